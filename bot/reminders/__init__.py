"""Reminders: reading `when` (`when`), how one repeats (`repeat`), time zones (`zones`), the
due-time index beside the workspaces (`index`), each person's desk that /remind, /reminders,
/timezone and the model's `remind` tool use (`desk`), and the `scheduler` that sends each
reminder at its time. The file itself is memory/reminders/records.py."""

__all__ = ["desk", "index", "repeat", "scheduler", "when", "zones"]
