"""The ``exec`` tool: the model runs a command line in a bubblewrap sandbox (``bubblewrap``),
in the conversation's workspace, within a budget (``tool``), and its spec (``spec``)."""
