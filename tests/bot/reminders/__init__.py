"""bot/reminders/: reminders in the core and sent on the platforms."""
