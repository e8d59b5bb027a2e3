"""adapters/discord/: discord.py against the fake Discord gateway and REST API."""
