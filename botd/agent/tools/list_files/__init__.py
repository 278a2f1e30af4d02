"""The ``list_files`` tool (lists a directory of the conversation's workspace)."""
