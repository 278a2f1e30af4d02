"""Telegram: python-telegram-bot, imported only inside this package."""
