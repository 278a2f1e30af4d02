"""The ``web_fetch`` tool: the model reads a page by URL (``tool``), and its spec (``spec``)."""
