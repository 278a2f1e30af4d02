"""Chat platforms behind one interface (adapters import their SDKs; the core never does)."""
