"""The agent core: one turn of a person's conversation, from the inbound message to the answer.

Public: `agent` (the `Agent`, which only the CLI builds) and `window` (how the context window is
shared between the fixed part, MEMORY.md, the conversation and the answer; `doctor` reads it).
`prompt` (building the messages sent to the model), `tools` (the tools confined to the person's
workspace) and `streaming` (an answer's text as it is written) are its own.
"""

__all__ = ["agent", "window"]
