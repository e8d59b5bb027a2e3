"""One module per platform (plus the terminal). Adapters translate; the core decides."""
