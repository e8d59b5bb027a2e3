"""bot/llm/: the LLM client against providers that misbehave, and what real servers sent."""
