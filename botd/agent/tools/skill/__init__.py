"""The ``skill`` tool (loads one of the skills offered in the run's chat)."""
