"""One intake for every platform: what happens to a message between the platform and the core.

`pipeline` decides (the allow list and its refusal, a group's trigger, "typing…" and the media,
the core's answer, a failure, a private answer asked in a group, the receipt); a platform only
says how to do things in its chats (the `Chat` protocol). `texts` holds what every platform says
to people in those cases; `throttle` keeps refusals to strangers rare.
"""

__all__ = ["pipeline", "texts", "throttle"]
