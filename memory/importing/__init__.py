"""Bringing a person's past in: ChatGPT and Claude exports become dated HISTORY.md entries, and
a LightGrep /export archive restores (or merges into) a workspace. Pure files, no network.

Public: `sources` (opening an export: zip or JSON, hostile files refused in one line),
`depth` (JSON nesting capped before the parser), `formats` (the services' conversation shapes,
read one conversation at a time), `history` (a conversation's entries appended through
memory.store, each conversation's id recorded so a re-import adds nothing), `restore` (a
LightGrep archive) and `facts` (imported conversations consolidated into MEMORY.md, only adding,
resumable).
"""

__all__ = ["depth", "facts", "formats", "history", "restore", "sources"]
