"""botd: LLM agents in Slack, Discord and Telegram conversations."""

__version__ = "0.1.0"
