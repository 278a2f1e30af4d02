"""The ``web_search`` tool: the model searches the web through the configured service
(``tool``), whose answers ``providers`` reads; its spec (``spec``)."""
