"""The agent core shared by every platform: config, LLM client, context, tools, commands, CLI."""
