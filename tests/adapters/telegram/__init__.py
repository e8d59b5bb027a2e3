"""adapters/telegram/: python-telegram-bot against the fake Bot API."""
