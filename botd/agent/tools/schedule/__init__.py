"""The ``schedule`` tool: reminders the agent sets in chat (``tool``), and its spec (``spec``)."""
