"""The ``write_file`` tool (writes a text file in the conversation's workspace)."""
