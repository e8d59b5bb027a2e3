"""The person's control over their memory: the file work of /forget, /wipe, /export and
/memory history|undo. Each changes files atomically, so a crash leaves every file loadable.

Public: `forget`, `wipe`, `export`, `versions`.
"""

__all__ = ["export", "forget", "versions", "wipe"]
