"""Slash commands, answered without the LLM.

Public: `registry` (`COMMANDS`, which /help, the platforms' menus and the core read;
`parse_command`, `run_command`), `context` (the `CommandContext` a handler is given),
`confirm` (the questions /forget and /wipe wait on), `control` (its `memory_notice`, said under an
answer) and `recall` (the /recall search, also run by `lightgrep recall`). The handlers live in
`basic`, `recall`, `control` and `link` (whose codes are `linking`'s).
"""

__all__ = ["confirm", "context", "control", "linking", "recall", "registry"]
