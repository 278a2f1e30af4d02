"""The ``remember`` tool (keeps a fact in the run's memory)."""
