"""The ``forget`` tool (drops one item of the run's memory)."""
