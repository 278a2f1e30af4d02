"""Loopback fakes of the network services botd talks to (see spec/testing.md)."""
