"""A person's reminders on disk: `records`, the append-only reminders file of a workspace. When
and how they are sent is bot/reminders/'s."""

__all__ = ["records"]
