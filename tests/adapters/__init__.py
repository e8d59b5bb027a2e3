"""adapters/: each platform through its real client library against a fake far end."""
