"""bot/agent/: the Agent, its turn, window, sizing and streaming."""
