"""The agent core: one turn of a person's conversation, from the inbound message to the answer.

Public: `agent` (the `Agent`, which only the CLI builds), `sizing` (how big the context window
is and how it is shared between the fixed part, MEMORY.md, the conversation and the answer;
`doctor`, `init` and the start of `run` and `chat` read it), `window` (what the server says
about its window) and `turn` (one turn of a conversation, /retry and /undo; its answers' texts).
`context_window` (the window and its shares, in one place; each session's system prompt),
`consolidating` (when to consolidate), `prompt` (building the messages sent to the model, with
the guide to the tools of bot/tools/) and `streaming` (an answer's text as it is written) are
its own, as are the parts the Agent composes: `people` (/link, /unlink, the moving of a
person's files between workers, /wipe), `residency` (who is held in RAM, idle eviction, a
person's files held still) and `commanding` (the context a command handler is given).
"""

__all__ = ["agent", "sizing", "turn", "window"]
