"""The ``read_file`` tool (reads a text file of the conversation's workspace)."""
