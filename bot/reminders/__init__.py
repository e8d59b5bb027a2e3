"""Reminders: reading `when` (`when`), how one repeats (`repeat`), time zones (`zones`), the
due-time index beside the workspaces (`index`), each person's desk that /remind, /reminders,
/timezone and the model's `remind` tool use (`desk`), who has reminders in which group
(`groups`) and a group's reminders for its admins (`groupdesk`), and the `scheduler` that sends
each reminder at its time. The file itself is memory/reminders/records.py."""

__all__ = ["desk", "groupdesk", "groups", "index", "repeat", "scheduler", "when", "zones"]
