"""The Telegram adapter end to end: real python-telegram-bot polling a fake Bot API server, the real
Agent talking to a fake OpenAI server, real files under a temporary workspaces folder."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.intake.texts import REFUSAL, SENT_PRIVATELY, TEXT_ONLY
from adapters.telegram import create
from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.markup import markdown_to_html
from bot.agent.agent import Agent
from bot.commands.registry import COMMANDS
from bot.platform import PlatformStartError
from memory.keys import encode_key
from tests.rigs.fakes.openai_server import Delay, FakeOpenAI, Held, Status, completion
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram, visible_text
from tests.rigs.telegram import (
    GROUP,
    by_prompt,
    eventually,
    last_user_text,
    make_config,
    running,
    session_lines,
)

BOT_NAME = "lightgrep_bot"


@pytest.fixture
async def bot(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> AsyncIterator[TelegramAdapter]:
    async with running(make_config(tg, fake_llm, workspaces_dir)) as adapter:
        yield adapter


async def test_dm_turn_answered_and_persisted(
    tg: FakeTelegram,
    fake_llm: FakeOpenAI,
    workspaces_dir: Path,
    caplog: pytest.LogCaptureFixture,
    recwarn: pytest.WarningsRecorder,
) -> None:
    caplog.set_level(logging.DEBUG)
    tg.dm(42, "hi there, I'm Ana")  # waiting before the bot starts: must not be dropped
    fake_llm.queue(completion("Hello **Ana** & welcome"))
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        [reply] = await tg.wait_sent(42)
        await eventually(lambda: tg.method_calls("sendChatAction"))

    assert reply.text == "Hello Ana & welcome"
    assert reply.parse_mode == "HTML" and "<b>Ana</b> &amp;" in reply.raw
    assert "hi there, I'm Ana" in last_user_text(fake_llm.chat_requests[0])
    lines = session_lines(workspaces_dir, "telegram-42", "telegram:dm:42")
    assert lines[0]["_type"] == "metadata" and lines[0]["key"] == "telegram:dm:42"
    messages = [m for m in lines if "role" in m]
    assert "hi there, I'm Ana" in messages[0]["content"]
    assert messages[-1] == {
        **messages[-1],
        "role": "assistant",
        "content": "Hello **Ana** & welcome",
    }
    assert [c["command"] for c in tg.commands] == [c.name for c in COMMANDS]  # the registry
    assert tg.method_calls("deleteWebhook")[0].get("drop_pending_updates") in (None, "false")
    assert f"@{BOT_NAME}" in caplog.text  # start-up says which bot it is
    assert TOKEN not in caplog.text and TOKEN.split(":")[1] not in caplog.text
    assert not [w for w in recwarn if "Please use" in str(w.message)]  # raw calls on purpose


async def test_memory_and_recall_in_dm(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path, bot: TelegramAdapter
) -> None:
    workspace = bot._core.workspaces.get("telegram-42")
    workspace.memory.write("## User Information\n- Lives in Lisbon\n")
    workspace.memory.append_history("[2025-03-01 10:00] Planned a trip to Porto by train.")

    tg.dm(42, "/memory")
    [memory] = await tg.wait_sent(42)
    assert "Lives in Lisbon" in memory.text

    tg.dm(42, f"/recall@{BOT_NAME} porto")
    recall = (await tg.wait_sent(42, 2))[1]
    assert "Porto" in recall.text and "2025-03-01" in recall.text
    assert fake_llm.requests == []


async def test_group_mention_answered_and_other_messages_ignored(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path, bot: TelegramAdapter
) -> None:
    fake_llm.default = lambda request: completion(f"re: {last_user_text(request)[-20:]}")
    tg.group(GROUP, 42, "just chatting among humans")
    tg.group(GROUP, 42, "/help@some_other_bot")
    tg.group(GROUP, 42, "/etc/passwd is a file")
    asked = tg.group(GROUP, 42, f"@{BOT_NAME} what is two plus two")
    [reply] = await tg.wait_sent(GROUP)

    assert json.loads(reply.params["reply_parameters"])["message_id"] == asked
    [request] = fake_llm.chat_requests
    assert "what is two plus two" in last_user_text(request)
    assert f"@{BOT_NAME}" not in last_user_text(request)
    lines = session_lines(workspaces_dir, "telegram-42", f"telegram:group:{GROUP}:42")
    lines = [line for line in lines if "role" in line]  # the messages (not where they went)
    assert lines[-1]["role"] == "assistant"

    # A reply to the bot in a forum topic: the user's own topic session, answered in the topic.
    tg.group(GROUP, 43, "and three plus three?", reply_to_bot=True, topic=7)
    second = (await tg.wait_sent(GROUP, 2))[1]
    assert second.params["message_thread_id"] == "7"
    assert session_lines(workspaces_dir, "telegram-43", f"telegram:group:{GROUP}:43:topic:7")
    assert len(tg.sent_to(GROUP)) == 2 and len(fake_llm.chat_requests) == 2


async def test_recall_in_group_answered_privately_only(
    tg: FakeTelegram, fake_llm: FakeOpenAI, bot: TelegramAdapter
) -> None:
    for user in (42, 43):
        workspace = bot._core.workspaces.get(f"telegram-{user}")
        workspace.memory.write(f"## Important Notes\n- secret of user {user}\n")
        workspace.memory.append_history(f"[2025-03-01 10:00] User {user} booked the Porto hotel.")
    tg.started_users.add(42)  # 42 has a private chat with the bot; 43 never pressed Start

    tg.group(GROUP, 42, f"/recall@{BOT_NAME} porto hotel")
    [private] = await tg.wait_sent(42)
    assert "User 42 booked the Porto hotel" in private.text
    [ack] = await tg.wait_sent(GROUP)
    assert ack.text == SENT_PRIVATELY

    tg.group(GROUP, 43, f"/memory@{BOT_NAME}")
    note = (await tg.wait_sent(GROUP, 2))[1]
    assert "private chat" in note.text and f"t.me/{BOT_NAME}" in note.text
    assert not tg.sent_to(43)
    group_text = " ".join(s.text for s in tg.sent_to(GROUP))
    assert "secret" not in group_text and "Porto" not in group_text
    assert fake_llm.requests == []


async def test_unknown_user_refused_without_llm(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    config = make_config(tg, fake_llm, workspaces_dir, allow=["42", "@Alice"])
    async with running(config):
        tg.group(GROUP, 7, f"@{BOT_NAME} let me in")
        tg.dm(7, "hello?")
        tg.dm(8, "hi, I'm alice", username="alice")
        [refusal] = await tg.wait_sent(7)
        await tg.wait_sent(8)

    assert refusal.text == REFUSAL
    assert not tg.sent_to(GROUP)  # silence in the group
    assert len(fake_llm.chat_requests) == 1  # alice's turn only
    assert "alice" in last_user_text(fake_llm.chat_requests[0])
    typed = {c["chat_id"] for c in tg.method_calls("sendChatAction")}
    assert typed == {"8"}
    assert not (workspaces_dir / encode_key("telegram-7")).exists()


async def test_long_answer_split_without_loss(
    tg: FakeTelegram, fake_llm: FakeOpenAI, bot: TelegramAdapter
) -> None:
    prose = [f"Paragraph {n}: a < b & c > d, " + "word " * 60 for n in range(25)]
    code = "```python\n" + "\n".join(f"x{n} = {n} < {n + 1}" for n in range(150)) + "\n```"
    answer = "\n\n".join([*prose[:12], code, *prose[12:]])
    assert len(answer) > 10_000
    fake_llm.queue(completion(answer))

    tg.dm(42, "tell me everything")
    await tg.wait_until(lambda: _words(" ".join(s.text for s in tg.sent_to(42))) == _words(answer))

    sent = tg.sent_to(42)
    assert len(sent) >= 3
    assert all(len(s.text) <= 4096 and s.parse_mode == "HTML" for s in sent)
    assert all(s.raw.count("<pre>") == s.raw.count("</pre>") for s in sent)


def _words(text: str) -> list[str]:
    return [w for line in text.splitlines() if not line.startswith("```") for w in line.split()]


async def test_rejected_markup_resent_as_plain_text(
    tg: FakeTelegram, fake_llm: FakeOpenAI, bot: TelegramAdapter
) -> None:
    answer = "Use **bold** and `code` here"
    fake_llm.queue(completion(answer))
    tg.fail_next("sendMessage", 400, "Bad Request: can't parse entities: Unsupported start tag")
    tg.dm(42, "format something")
    [reply] = await tg.wait_sent(42)

    attempts = tg.method_calls("sendMessage")
    assert attempts[0]["parse_mode"] == "HTML"
    assert reply.parse_mode is None and reply.text == answer


async def test_flood_limit_waited_out(
    tg: FakeTelegram, fake_llm: FakeOpenAI, bot: TelegramAdapter
) -> None:
    fake_llm.queue(completion("worth the wait"))
    tg.fail_next("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1)
    tg.dm(42, "hello")
    await eventually(lambda: tg.method_calls("sendMessage"))
    first_try = time.monotonic()
    [reply] = await tg.wait_sent(42)

    assert reply.text == "worth the wait"
    assert reply.at - first_try >= 0.9


async def test_slow_user_does_not_delay_another(
    tg: FakeTelegram, fake_llm: FakeOpenAI, bot: TelegramAdapter
) -> None:
    bot.typing_interval_s = 0.15
    # The slow answer comes once the quick one is in its chat (and not before 0.8 s): a bot
    # that made the second person wait behind the first never answers either.
    quick_answered = asyncio.Event()
    slow_answer = Delay(0.8, Held(quick_answered, completion("slow answer")))
    fake_llm.default = by_prompt({"slow": slow_answer, "quick": completion("quick answer")})
    tg.dm(1, "a slow question")
    await eventually(lambda: len(fake_llm.chat_requests) == 1)
    tg.dm(2, "a quick question")
    [quick] = await tg.wait_sent(2)
    quick_answered.set()
    [slow] = await tg.wait_sent(1)

    assert quick.text == "quick answer" and slow.text == "slow answer"
    typing_for_a = [c for c in tg.method_calls("sendChatAction") if c["chat_id"] == "1"]
    assert len(typing_for_a) >= 3  # kept on during the slow turn


async def test_edits_and_non_text_messages(
    tg: FakeTelegram, fake_llm: FakeOpenAI, bot: TelegramAdapter
) -> None:
    tg.edited(42, "an edited message is not a new turn")
    tg.sticker(42)  # neither text nor a file the bot reads (pictures: test_media.py)
    [reply] = await tg.wait_sent(42)
    await asyncio.sleep(0.1)

    assert reply.text == TEXT_ONLY
    assert len(tg.sent_to(42)) == 1 and fake_llm.requests == []


async def test_a_private_chat_answers_in_its_topic_and_never_another_bot(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path, bot: TelegramAdapter
) -> None:
    """Private text messages are read straight from the update (adapters/telegram/place.py),
    everything else through PTB: both ways, a topic's message is answered in the topic, a
    bot's message is never answered, and a command is still a command."""
    fake_llm.default = lambda request: completion("re: topic")
    tg.dm(42, "sent by a bot", **{"from": {"id": 42, "is_bot": True, "first_name": "B"}})
    tg.dm(42, "in my topic", message_thread_id=5, is_topic_message=True)
    [answer] = await tg.wait_sent(42)
    tg.dm(42, "/help", message_thread_id=5, is_topic_message=True)
    help_answer = (await tg.wait_sent(42, 2))[1]

    assert answer.text == "re: topic" and answer.params["message_thread_id"] == "5"
    assert help_answer.params["message_thread_id"] == "5" and "/new" in help_answer.text
    assert len(fake_llm.chat_requests) == 1
    lines = session_lines(workspaces_dir, "telegram-42", "telegram:dm:42")
    said = [m["content"] for m in lines if "role" in m]
    assert any("in my topic" in str(c) for c in said)
    assert not any("sent by a bot" in str(c) for c in said)


async def test_stop_finishes_running_turn(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.queue(Delay(0.5, completion("finished anyway")))
    config = make_config(tg, fake_llm, workspaces_dir)
    agent = Agent(config)
    adapter = create(config, agent)
    stop = asyncio.Event()
    task = asyncio.create_task(adapter.run(stop))
    tg.dm(42, "a question just before shutdown")
    await eventually(lambda: len(fake_llm.chat_requests) == 1)
    stop.set()
    await asyncio.wait_for(task, 5)
    await agent.aclose()

    assert [s.text for s in tg.sent_to(42)] == ["finished anyway"]
    last_poll = tg.method_calls("getUpdates")[-1]
    assert int(last_poll["offset"]) == 2  # the handled update was acknowledged


async def test_update_acknowledged_only_once_handled(
    tg: FakeTelegram, fake_llm: FakeOpenAI, bot: TelegramAdapter
) -> None:
    """A crash while a turn runs must leave its message with Telegram: the offset sent stays at
    the lowest update still being handled, without polling in a tight loop meanwhile."""
    slow_may_finish = asyncio.Event()  # the slow turn runs until the test has looked
    slow_answer = Held(slow_may_finish, completion("slow answer"))
    fake_llm.default = by_prompt({"slow": slow_answer, "quick": completion("quick answer")})
    tg.dm(1, "a slow question")
    slow = tg.last_update_id
    await eventually(lambda: len(fake_llm.chat_requests) == 1)
    polls_before = len(tg.method_calls("getUpdates"))
    busy_since = time.monotonic()
    tg.dm(2, "a quick question")
    quick = tg.last_update_id
    await tg.wait_sent(2)
    polls_at_quick = len(tg.method_calls("getUpdates"))
    # Polls after the quick turn ended, and over the busy interval.
    await eventually(lambda: len(tg.method_calls("getUpdates")) >= polls_at_quick + 2)

    assert not tg.acked(slow) and not tg.acked(quick)  # acknowledgement is cumulative
    assert int(tg.method_calls("getUpdates")[-1]["offset"]) == slow
    assert tg.delivered[slow] >= 2  # Telegram keeps returning it while it runs…
    slow_may_finish.set()
    [slow_sent] = await tg.wait_sent(1)
    await eventually(lambda: tg.acked(quick))
    busy_s = time.monotonic() - busy_since

    assert slow_sent.text == "slow answer"
    assert len(fake_llm.chat_requests) == 2  # …and it is handled once
    busy_polls = tg.method_calls("getUpdates")[polls_before:]
    # About every 0.5 s while busy and after each finished turn, never in a tight loop.
    assert 2 <= len(busy_polls) <= busy_s / 0.5 + 5, (len(busy_polls), busy_s)
    assert all(poll["timeout"] == "0" for poll in busy_polls[:-1])


async def test_redelivered_update_kept_once_and_not_answered_again_by_the_llm(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """The bot died after answering but before its acknowledgement reached Telegram, and
    before the mark that it had handled the update reached the disk (adapters/telegram/spool.py
    remembers handled updates; test_telegram_webhook.py beside this file shows that the mark alone
    is enough): the message comes again after the restart. It is kept once; its answer is resent
    from the session (at-least-once delivery), without asking the model again."""
    config = make_config(tg, fake_llm, workspaces_dir)
    fake_llm.queue(completion("the blue door it is"))
    async with running(config):
        tg.dm(42, "remember the blue door")
        update = tg.last_update_id
        await tg.wait_sent(42)
        await eventually(lambda: tg.acked(update))
    (workspaces_dir / ".telegram-999.spool.handled").unlink()  # the unsynced mark lost
    tg.redeliver(update)
    async with running(config):
        await tg.wait_sent(42, 2)
        await eventually(lambda: tg.acked(update))

    assert [s.text for s in tg.sent_to(42)] == ["the blue door it is"] * 2
    assert len(fake_llm.chat_requests) == 1
    messages = session_lines(workspaces_dir, "telegram-42", "telegram:dm:42")
    assert [m["role"] for m in messages if "role" in m] == ["user", "assistant"]


async def test_redelivered_message_answered_by_a_later_turn_sends_nothing(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """A message whose own turn failed was answered with the next message's turn; delivered
    again (and the marks that both were handled lost, as above), it gets no second answer
    (the core replies with empty text)."""
    config = make_config(tg, fake_llm, workspaces_dir)
    fake_llm.queue(Status(500, {"error": {"message": "overloaded"}}), completion("both answered"))
    async with running(config):
        tg.dm(42, "first part")
        first = tg.last_update_id
        await tg.wait_sent(42)
        tg.dm(42, "second part")
        await tg.wait_sent(42, 2)
        await eventually(lambda: tg.acked(tg.last_update_id))
    (workspaces_dir / ".telegram-999.spool.handled").unlink()
    tg.redeliver(first)  # both come again
    async with running(config):
        await tg.wait_sent(42, 3)
        await eventually(lambda: tg.acked(tg.last_update_id))
        await asyncio.sleep(0.1)

    sent = [s.text for s in tg.sent_to(42)]
    assert "couldn't reach" in sent[0] and sent[1:] == ["both answered", "both answered"]
    assert len(fake_llm.chat_requests) == 2
    messages = session_lines(workspaces_dir, "telegram-42", "telegram:dm:42")
    assert [m["role"] for m in messages if "role" in m] == ["user", "user", "assistant"]


async def test_polling_survives_get_updates_errors(
    tg: FakeTelegram,
    fake_llm: FakeOpenAI,
    workspaces_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    tg.fail_next("getUpdates", 409, "Conflict: terminated by other getUpdates request")
    tg.fail_next("getUpdates", 502, "Bad Gateway")
    tg.dm(42, "still there?")
    fake_llm.queue(completion("yes"))
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        [reply] = await tg.wait_sent(42)

    assert reply.text == "yes"
    assert "getUpdates conflict" in caplog.text and "another process is polling" in caplog.text
    assert "getUpdates failed (NetworkError: Bad Gateway)" in caplog.text
    assert "getUpdates works again" in caplog.text
    assert TOKEN not in caplog.text and TOKEN.split(":")[1] not in caplog.text


async def test_polling_reports_a_revoked_token_as_such(
    tg: FakeTelegram,
    fake_llm: FakeOpenAI,
    workspaces_dir: Path,
    caplog: pytest.LogCaptureFixture,
    recwarn: pytest.WarningsRecorder,
) -> None:
    """A token revoked while running is named as the cause (not "unknown method"), the token is
    never logged, and the raw getUpdates call raises no library warning."""
    tg.fail_next("getUpdates", 401, "Unauthorized")
    async with running(make_config(tg, fake_llm, workspaces_dir)):
        await eventually(lambda: "getUpdates unauthorized" in caplog.text)

    assert "token revoked?" in caplog.text and "EndPointNotFound" not in caplog.text
    assert TOKEN not in caplog.text and TOKEN.split(":")[1] not in caplog.text
    assert not [w for w in recwarn if "getUpdates" in str(w.message)]


# A missing token, an empty allow_from or webhook mode without its URL are refused when the
# configuration is loaded (tests/bot/test_config.py), before any adapter starts.
async def test_a_rejected_token_refuses_to_start_with_a_clear_message(
    tg: FakeTelegram,
    fake_llm: FakeOpenAI,
    workspaces_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    config = make_config(tg, fake_llm, workspaces_dir)
    config.platforms["telegram"].token = "123456:wrong-token-value"
    with pytest.raises(PlatformStartError, match="rejected the bot token") as raised:
        async with running(config):
            pass
    assert "wrong-token-value" not in str(raised.value) + caplog.text


async def test_one_users_messages_answered_in_order(
    tg: FakeTelegram, fake_llm: FakeOpenAI, bot: TelegramAdapter
) -> None:
    fake_llm.default = by_prompt(
        {"first": Delay(0.3, completion("answer one")), "second": completion("answer two")}
    )
    tg.dm(42, "first question")
    tg.dm(42, "second question")
    await tg.wait_sent(42, 2)

    assert [s.text for s in tg.sent_to(42)] == ["answer one", "answer two"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab <>&*_~`[]()#>-\n:/.", max_size=200))
def test_rendered_markup_is_always_accepted(text: str) -> None:
    """Whatever the model writes, Telegram gets well-formed HTML no longer than the Markdown."""
    seen = visible_text(markdown_to_html(text))
    assert len(seen) <= len(text)


@pytest.mark.parametrize(
    ("markdown", "html"),
    [
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        ("**bold** *it* snake_case_name", "<b>bold</b> <i>it</i> snake_case_name"),
        ("## Title", "<b>Title</b>"),
        ("- one\n* two", "• one\n• two"),
        ("`x<y`", "<code>x&lt;y</code>"),
        ("[site](https://e.x/?a=1&b=2)", '<a href="https://e.x/?a=1&amp;b=2">site</a>'),
        ("[bad](javascript:alert(1))", "[bad](javascript:alert(1))"),
        ("```py\nif a<b:\n```", '<pre><code class="language-py">if a&lt;b:</code></pre>'),
        ("**a *b** c*", "<b>a *b</b> c*"),
    ],
)
def test_markdown_rendering(markdown: str, html: str) -> None:
    assert markdown_to_html(markdown) == html


MALFORMED_MESSAGES: list[dict[str, Any]] = [
    {},  # nothing at all
    {"message_id": "x", "date": "yesterday", "chat": "nope"},  # wrong types everywhere
    {"message_id": 5, "date": 0, "chat": {"id": 77, "type": "private"}, "text": "no sender"},
    {  # an entity pointing far outside the text
        "message_id": 6,
        "date": 0,
        "chat": {"id": 77, "type": "private"},
        "from": {"id": 77, "is_bot": False, "first_name": "M"},
        "text": "/memory",
        "entities": [{"type": "bot_command", "offset": 500, "length": 9000}],
    },
    {  # a path-like, NUL-carrying chat id of an unknown chat type
        "message_id": 7,
        "date": 0,
        "chat": {"id": "../../etc\u0000", "type": "channelish"},
        "from": {"id": "../x", "is_bot": False, "first_name": "M"},
        "text": "hello",
    },
]


async def test_malformed_updates_never_stop_the_bot_nor_write_outside(
    tg: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path, bot: TelegramAdapter
) -> None:
    for payload in MALFORMED_MESSAGES:
        tg.push("message", payload)
    tg.push("unknown_kind_of_update", {"whatever": True})
    fake_llm.queue(completion("Still here."))
    tg.dm(42, "are you alive?")
    [sent] = await tg.wait_sent(42)
    assert sent.text == "Still here."
    await eventually(lambda: tg.acked(tg.last_update_id))  # nothing holds the offset back
    outside = [p for p in workspaces_dir.parent.rglob("*") if workspaces_dir not in p.parents]
    assert sorted(p.name for p in outside) == ["workspaces"]
