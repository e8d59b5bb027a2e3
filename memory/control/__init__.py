"""The person's control over their memory: the file work of /forget, /wipe, /export,
/memory history|undo and /link. Each changes files atomically, so a crash leaves every file
loadable.

Public: `forget`, `wipe`, `export`, `versions`, `link` (the merge and split of /link,
/unlink), `notices` (what the other accounts are told of a link), `backup` (the whole folder
as one archive: `lightgrep backup`).
"""

__all__ = ["backup", "export", "forget", "link", "notices", "versions", "wipe"]
