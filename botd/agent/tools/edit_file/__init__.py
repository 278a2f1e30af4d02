"""The ``edit_file`` tool (replaces text in a file of the conversation's workspace, exactly)."""
