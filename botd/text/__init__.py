"""Markdown text as the agent writes it: its code fences (``fences``) and its fence-safe
splitting under a platform's limit (``chunks``). Shared by the subscriber and the channels,
so that neither imports the other; imports nothing of botd."""
