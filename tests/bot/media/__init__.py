"""bot/media/: pictures, voice and files in the core: memory, and files made to hurt."""
