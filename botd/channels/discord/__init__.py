"""Discord: discord.py, imported only inside this package."""
