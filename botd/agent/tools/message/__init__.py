"""The ``message`` tool: the agent posts a message itself (``tool``), and its spec (``spec``)."""
