"""`remind`: the model sets, lists or cancels the person's reminders (bot/reminders/desk.py, the
desk /remind uses), sent back to the chat the message came from.

Offered in the full form only (a small window keeps /remind). In a group turn whose answer is
public it may only set one: the list could show private ones. What it set is shown under the
answer whatever the model says (`ToolTurn.told`), so that no reminder is set unseen.
"""

from __future__ import annotations

from bot.observe.metrics import count_limit_refusal
from bot.reminders.desk import SET_OK
from bot.tools.tool import REMINDERS, Arguments, Offer, Tool, ToolTurn

SET_BY_MODEL = "(Set while answering: /reminders lists them, /reminders cancel N removes one.)"

FULL = Offer(
    {
        "type": "function",
        "function": {
            "name": "remind",
            "description": (
                "Set (`what`, sent here at `when`: 'in 10 minutes', 'tomorrow at 9', 'every "
                "monday at 9'), list or cancel (`number` from list, or 'all') this person's "
                "reminders."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["set", "list", "cancel"]},
                    "when": {"type": "string"},
                    "what": {"type": "string"},
                    "number": {"type": "string"},
                },
                "required": ["action"],
            },
        },
    },
    "- To remind them of something later, call `remind`; tell them what it set, and when.",
)
PUBLIC = Offer(
    {
        "type": "function",
        "function": {
            "name": "remind",
            "description": (
                "Set a reminder for this person: `what`, sent here at `when` ('in 10 minutes', "
                "'tomorrow at 9', 'every monday at 9')."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["set"]},
                    "when": {"type": "string"},
                    "what": {"type": "string"},
                },
                "required": ["action"],
            },
        },
    },
    "`remind` sets a reminder, sent here.",
)


async def run(turn: ToolTurn, args: Arguments) -> str:
    """Set, list or cancel; the answer says what happened, in the words the person is told
    (times in their zone)."""
    desk = turn.reminders
    action = args.get("action")
    refusal = turn.limits.reminder_call(turn.workspace.user_key) if turn.limits else None
    if refusal is not None:
        count_limit_refusal(refusal.kind)
        return f"Error: {refusal.text}"
    if action == "set":
        when, what = args.get("when"), args.get("what")
        if not isinstance(when, str) or not isinstance(what, str):
            return "Error: 'set' needs `when` and `what` as strings."
        text = await desk.set(when, what)
        if text.startswith(SET_OK):
            turn.told.append(f"{text}\n{SET_BY_MODEL}")
        return text
    if turn.public:
        return "Error: in a group chat reminders can only be set (action 'set')."
    if action == "list":
        return await desk.listing()
    if action == "cancel":
        return await desk.cancel(str(args.get("number", "")), once=False)
    return "Error: `action` must be set, list or cancel."


REMIND = Tool(
    name="remind",
    reaches=(REMINDERS,),
    enabled=lambda config: config.tools.remind,
    run=run,
    full=FULL,
    public=PUBLIC,
)
