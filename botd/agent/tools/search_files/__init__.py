"""The ``search_files`` tool (finds lines in the files of the conversation's workspace)."""
