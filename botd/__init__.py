"""botd: LLM agents in Slack, Discord and Telegram conversations."""

__version__ = "0.1.0"
"""botd's version: the one place it is written (pyproject.toml reads it when building)."""
