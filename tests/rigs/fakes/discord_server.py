"""A small Discord REST + gateway server on 127.0.0.1 for tests: the far end, never our code.

It speaks just enough of Discord for the real discord.py client: login (`/users/@me`,
`/oauth2/applications/@me`), command sync, messages, typing, DM channels, interaction callbacks
and follow-ups (JSON, or multipart with `payload_json` and attached files, which are recorded in
`uploads`), and a gateway (HELLO, heartbeat ACK, IDENTIFY → READY + GUILD_CREATE). Tests push
events with `dispatch(...)` (`slash` and `press` build interactions: a command, a pressed button)
and read what the bot did from the recorded requests. Files people attach (`attachment`) are
served from the fake's CDN path, `GET /attachments/<channel>/<id>/<name>` (recorded in
`downloads`; an unknown one is a 404, as an expired CDN link is).
A guild may have threads (channels of type 11 with a parent) and members who may manage it (a
role with Manage Server). Messages the bot sends are kept (`posted`, by id) and may be edited
(`PATCH /channels/<channel>/messages/<id>`, recorded in `edits`). Like Discord, a message with
neither content nor files is refused (50006), content over 2000 characters too (50035), and an
edit in a channel sooner than `edit_interval_s` after its last edit is answered 429 with
`retry_after` (recorded in `too_fast`; discord.py waits and retries by itself).
See /work/shared/TESTING.md (Discord) for the facts this relies on.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSMsgType, web

from tests.rigs.fakes.local_server import serve_locally, stream_file

MESSAGE_CONTENT_INTENT = 1 << 15
IS_VOICE_MESSAGE = 1 << 13  # message flag
PRIVILEGED_INTENTS = (1 << 1) | (1 << 8) | MESSAGE_CONTENT_INTENT
MANAGE_GUILD = 1 << 5  # permission bit


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    files: dict[str, bytes] = field(default_factory=dict)  # attachment file name → bytes


def _json(data: Any, status: int = 200) -> web.Response:
    """JSON with exactly `application/json` (discord.py rejects a charset suffix)."""
    return web.Response(
        status=status, body=json.dumps(data).encode(), headers={"Content-Type": "application/json"}
    )


def user_payload(user_id: int, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": str(user_id),
        "username": name,
        "global_name": name.title(),
        "discriminator": "0",
        "avatar": None,
        "bot": bot,
    }


class FakeDiscord:
    """The fake far end. `token` is the only accepted bot token."""

    def __init__(self, token: str = "fake-token", *, reject_privileged: bool = False) -> None:
        self.token = token
        self.reject_privileged = reject_privileged
        self.bot_id = 900
        self.app_id = 900
        self.bot = user_payload(self.bot_id, "lightgrep", bot=True)
        self.guilds: dict[int, list[int]] = {}  # guild id → text channel ids
        self.threads: dict[int, dict[int, int]] = {}  # guild id → its threads (id → parent)
        self.managers: dict[int, set[int]] = {}  # guild id → members with Manage Server
        self.requests: list[Recorded] = []
        self.identify: dict[str, Any] | None = None
        self.identifies = 0  # IDENTIFYs received: one per (re)connection that starts a session
        self.port = 0
        self._ids = itertools.count(10_000)
        self._seq = itertools.count(1)
        self._ws: web.WebSocketResponse | None = None
        self._runner: web.AppRunner | None = None
        self.cdn: dict[str, bytes] = {}  # attachment path → bytes
        self.hidden: dict[str, int] = {}  # attachment path → bytes served after them, unreported
        self.downloads: list[str] = []
        self.served: dict[str, int] = {}  # attachment path → bytes the bot took of it
        self.posted: dict[str, dict[str, Any]] = {}  # message id → the message as it is now
        self.edits: list[tuple[int, str, str, float]] = []  # (channel, message id, content, at)
        self.edit_interval_s = 1.0
        self.too_fast: list[tuple[int, float]] = []  # (channel, seconds since its last edit)
        self.refused: list[tuple[str, str]] = []  # (path, Discord's message) of refusals
        self._last_edit: dict[int, float] = {}
        # While set, a new message is held (not answered, not posted) until it is cleared; one
        # whose sender went away meanwhile is never posted (it did not reach Discord).
        self.hold_messages = False
        self.hold_callbacks = False  # the same for an interaction's answer (its callback)
        self.held = 0  # messages held so far

    # ---- addresses -------------------------------------------------------------------------
    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    def add_guild(
        self,
        guild_id: int,
        *channel_ids: int,
        threads: dict[int, int] | None = None,
        managers: set[int] | None = None,
    ) -> None:
        """A guild the bot is in; announced as GUILD_CREATE after READY, with its `threads`
        (thread id → parent channel) and a role with Manage Server that `managers` have."""
        self.guilds[guild_id] = list(channel_ids)
        self.threads[guild_id] = dict(threads or {})
        self.managers[guild_id] = set(managers or ())

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self) -> FakeDiscord:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/attachments/{tail:.+}", self._attachment)
        app.router.add_route("*", "/api/v10/{tail:.*}", self._rest)
        self._runner, self.port = await serve_locally(app)
        return self

    async def stop(self) -> None:
        if self._ws is not None and not self._ws.closed:
            await self._ws.close()
        if self._runner:
            await self._runner.cleanup()

    # ---- what the bot did ------------------------------------------------------------------
    def calls(self, method: str, prefix: str) -> list[Recorded]:
        """Recorded requests with this method whose path starts with `prefix` (after /api/v10)."""
        return [r for r in self.requests if r.method == method and r.path.startswith(prefix)]

    def seen_in(self, channel_id: int) -> list[str]:
        """The bot's messages in a channel as a person reads them now (edits applied)."""
        return [m["content"] for m in self.posted.values() if m["channel_id"] == str(channel_id)]

    def sent_messages(self, channel_id: int | None = None) -> list[dict[str, Any]]:
        """Bodies of messages the bot posted (to one channel, or anywhere)."""
        prefix = f"/channels/{channel_id}/messages" if channel_id else "/channels/"
        return [
            r.body
            for r in self.calls("POST", prefix)
            if r.path.endswith("/messages") and isinstance(r.body, dict)
        ]

    async def wait_until(self, check: Callable[[], Any], within: float = 5.0) -> Any:
        """Wait until `check()` is truthy (polled, so it may also look at other fakes)."""
        # Polled rather than notified: the check may look at other fakes (the LLM's requests).
        async with asyncio.timeout(within):
            while not (result := check()):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            return result

    # ---- events the tests send -------------------------------------------------------------
    async def close_gateway(self, code: int) -> None:
        """Close the gateway connection with a close code, as Discord does (4004: the token
        is no longer valid)."""
        if self._ws is not None:
            await self._ws.close(code=code)

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        if self._ws is None:
            raise RuntimeError("no gateway connection")
        await self._ws.send_json({"op": 0, "t": event, "s": next(self._seq), "d": data})

    def message(
        self,
        author: dict[str, Any],
        content: str,
        *,
        channel_id: int,
        guild_id: int | None = None,
        mentions: list[dict[str, Any]] | None = None,
        referenced: dict[str, Any] | None = None,
        attachments: list[dict[str, Any]] | None = None,
        reference_only: str | None = None,
    ) -> dict[str, Any]:
        """A MESSAGE_CREATE payload (a DM when `guild_id` is None); a voice message when its
        one attachment is one (`attachment(voice=True)`); a reply to `referenced` (a message,
        e.g. one of `posted`), or to the message id `reference_only` without the message
        itself (as Discord sends a reply whose message it did not fetch)."""
        data = self._message(author, content, channel_id, mentions or [])
        if attachments:
            data["attachments"] = attachments
            if any("waveform" in a for a in attachments):
                data["flags"] = IS_VOICE_MESSAGE
        if guild_id is not None:
            data["guild_id"] = str(guild_id)
            data["member"] = _member(roles=self._roles_of(guild_id, author))
        if referenced is not None or reference_only is not None:
            data["type"] = 19
            if referenced is not None:
                data["referenced_message"] = referenced
            data["message_reference"] = {
                "message_id": referenced["id"] if referenced is not None else reference_only,
                "channel_id": str(channel_id),
                **({"guild_id": str(guild_id)} if guild_id is not None else {}),
            }
        return data

    def _roles_of(self, guild_id: int, user: dict[str, Any]) -> list[str]:
        """The member's roles: the managers' role for a manager of the guild."""
        return [str(guild_id + 1)] if int(user["id"]) in self.managers.get(guild_id, ()) else []

    def attachment(
        self,
        data: bytes,
        filename: str,
        content_type: str | None,
        *,
        channel_id: int,
        voice_seconds: float | None = None,
        size: int | None = None,
        hidden: int = 0,
    ) -> dict[str, Any]:
        """An attachment object as Discord sends it, its bytes served by the fake CDN (`size`:
        what Discord reports, if not len(data); `hidden`: zero bytes the CDN serves after
        `data`, streamed without a length)."""
        attachment_id = str(next(self._ids))
        path = f"{channel_id}/{attachment_id}/{filename}"
        self.cdn[path] = data
        self.hidden[path] = hidden
        url = f"http://127.0.0.1:{self.port}/attachments/{path}"
        payload: dict[str, Any] = {
            "id": attachment_id,
            "filename": filename,
            "size": len(data) if size is None else size,
            "url": url,
            "proxy_url": url,
        }
        if content_type:
            payload["content_type"] = content_type
        if voice_seconds is not None:
            payload["duration_secs"] = voice_seconds
            payload["waveform"] = "AAAA"
        return payload

    async def _attachment(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["tail"]
        self.downloads.append(path)
        if path not in self.cdn:
            return web.Response(status=404, text="Not Found")
        if self.hidden.get(path):
            return await stream_file(request, self.cdn[path], self.hidden[path], self.served, path)
        self.served[path] = len(self.cdn[path])
        return web.Response(body=self.cdn[path], content_type="application/octet-stream")

    def slash(
        self,
        user: dict[str, Any],
        name: str,
        options: dict[str, str] | None = None,
        *,
        channel_id: int,
        guild_id: int | None = None,
        attachment_size_limit: int = 8 * 1024 * 1024,
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE payload for a chat-input command."""
        command = {
            "id": str(next(self._ids)),
            "name": name,
            "type": 1,
            "options": [{"name": k, "type": 3, "value": v} for k, v in (options or {}).items()],
        }
        return self._interaction(user, 2, command, channel_id, guild_id, attachment_size_limit)

    def press(
        self,
        user: dict[str, Any],
        custom_id: str,
        *,
        channel_id: int,
        guild_id: int | None = None,
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE payload for a pressed button (a message component)."""
        component = {"custom_id": custom_id, "component_type": 2}
        data = self._interaction(user, 3, component, channel_id, guild_id, 8 * 1024 * 1024)
        data["message"] = {**self._message(self.bot, "a question", channel_id, []), "flags": 64}
        return data

    def buttons(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        """(label, custom_id) of the buttons in a message body the bot sent."""
        rows = body.get("components") or []
        return [(c["label"], c["custom_id"]) for row in rows for c in row.get("components", [])]

    def _interaction(
        self,
        user: dict[str, Any],
        kind: int,
        payload: dict[str, Any],
        channel_id: int,
        guild_id: int | None,
        attachment_size_limit: int,
    ) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": str(next(self._ids)),
            "application_id": str(self.app_id),
            "type": kind,
            "token": f"itoken-{next(self._ids)}",
            "version": 1,
            "attachment_size_limit": attachment_size_limit,
            "locale": "en-US",
            "app_permissions": "0",
            "entitlements": [],
            "authorizing_integration_owners": {"0" if guild_id else "1": str(user["id"])},
            "data": payload,
        }
        if guild_id is None:
            data["user"] = user
            data["context"] = 1
            data["channel"] = {"id": str(channel_id), "type": 1, "recipients": [user]}
            data["channel_id"] = str(channel_id)
        else:
            data["guild_id"] = str(guild_id)
            data["context"] = 0
            data["channel"] = {
                "id": str(channel_id),
                "type": 0,
                "name": "general",
                "guild_id": str(guild_id),
                "position": 0,
            }
            data["channel_id"] = str(channel_id)
            manager = int(user["id"]) in self.managers.get(guild_id, ())
            data["member"] = {
                **_member(user, roles=self._roles_of(guild_id, user)),
                "permissions": str(MANAGE_GUILD if manager else 0),
            }
        return data

    # ---- REST ------------------------------------------------------------------------------
    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"]
        held = (self.hold_messages and path.endswith("/messages")) or (
            self.hold_callbacks and path.endswith("/callback")
        )
        if request.method == "POST" and held:
            self.held += 1
            hold = "hold_messages" if path.endswith("/messages") else "hold_callbacks"
            while getattr(self, hold):  # noqa: ASYNC110 - a test clears it
                await asyncio.sleep(0.01)
            if request.transport is None or request.transport.is_closing():
                return web.Response(status=499)  # the sender is gone: nothing was sent
        body: Any = None
        files: dict[str, bytes] = {}
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            for name, value in form.items():
                if isinstance(value, web.FileField):
                    files[value.filename] = value.file.read()
                elif name == "payload_json":
                    body = json.loads(value)
        elif request.can_read_body:
            raw = await request.read()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
        self.requests.append(Recorded(request.method, path, dict(request.query), body, files))
        return self._answer(request, path, body)

    def uploads(self) -> list[Recorded]:
        """Requests that carried files."""
        return [r for r in self.requests if r.files]

    def _answer(self, request: web.Request, path: str, body: Any) -> web.StreamResponse:
        parts = path.strip("/").split("/")
        webhook = parts[0] in ("webhooks", "interactions")
        if not webhook and request.headers.get("Authorization") != f"Bot {self.token}":
            return _json({"message": "401: Unauthorized", "code": 0}, 401)
        method = request.method
        if method == "GET" and path == "/users/@me":
            return _json(self.bot)
        if method == "GET" and path == "/oauth2/applications/@me":
            return _json(self._application())
        if method == "PUT" and parts[0] == "applications" and parts[-1] == "commands":
            return _json([self._echo_command(c) for c in body or []])
        if method == "POST" and parts[0] == "channels" and parts[-1] == "typing":
            return web.Response(status=204)
        if method == "POST" and parts[0] == "channels" and parts[-1] == "messages":
            refusal = self._refusal(path, body, bool(self.requests[-1].files))
            if refusal is not None:
                return refusal
            sent = self._message(self.bot, (body or {}).get("content") or "", int(parts[1]), [])
            self.posted[sent["id"]] = sent
            return _json(sent)
        if (
            method == "PATCH"
            and len(parts) == 4
            and parts[0] == "channels"
            and parts[2] == "messages"
        ):
            return self._edit(path, int(parts[1]), parts[3], body)
        if method == "POST" and path == "/users/@me/channels":
            recipient = user_payload(int(body["recipient_id"]), "someone")
            return _json({"id": str(next(self._ids)), "type": 1, "recipients": [recipient]})
        if method == "POST" and parts[0] == "interactions" and parts[-1] == "callback":
            return _json({"interaction": {"id": parts[1], "type": 2}})
        if parts[0] == "webhooks" and method in ("POST", "PATCH"):
            content = (body or {}).get("content", "") if isinstance(body, dict) else ""
            return _json(self._message(self.bot, content, 1, []))
        return _json({"message": "404: Not Found", "code": 0}, 404)

    def _edit(self, path: str, channel: int, message_id: str, body: Any) -> web.Response:
        target = self.posted.get(message_id)
        if target is None or target["channel_id"] != str(channel):
            return _json({"message": "Unknown Message", "code": 10008}, 404)
        now = time.monotonic()
        last = self._last_edit.get(channel)
        if last is not None and now - last < self.edit_interval_s:
            self.too_fast.append((channel, now - last))
            wait = round(self.edit_interval_s - (now - last), 3)
            limited = {
                "message": "You are being rate limited.",
                "retry_after": wait,
                "global": False,
            }
            return _json(limited, 429)
        content = (body or {}).get("content", target["content"]) or ""
        refusal = self._refusal(path, {"content": content}, bool(target["attachments"]))
        if refusal is not None:
            return refusal
        self._last_edit[channel] = now
        target["content"] = content
        target["edited_timestamp"] = _now()
        if "components" in (body or {}):
            target["components"] = body["components"]
        self.edits.append((channel, message_id, content, now))
        return _json(target)

    def _refusal(self, path: str, body: Any, files: bool) -> web.Response | None:
        """Discord's answer to a message body it does not take, or None."""
        content = (body or {}).get("content") or ""
        if not content and not files and not (body or {}).get("embeds"):
            self.refused.append((path, "Cannot send an empty message"))
            return _json({"message": "Cannot send an empty message", "code": 50006}, 400)
        if len(content) > 2000:
            self.refused.append((path, "Must be 2000 or fewer in length."))
            error = {"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}
            return _json(
                {
                    "message": "Invalid Form Body",
                    "code": 50035,
                    "errors": {"content": {"_errors": [error]}},
                },
                400,
            )
        return None

    def _application(self) -> dict[str, Any]:
        return {
            "id": str(self.app_id),
            "name": "LightGrep",
            "description": "",
            "icon": None,
            "bot_public": True,
            "bot_require_code_grant": False,
            "owner": user_payload(1, "owner"),
            "verify_key": "00",
            "flags": 0,
        }

    def _echo_command(self, command: dict[str, Any]) -> dict[str, Any]:
        return {
            **command,
            "id": str(next(self._ids)),
            "application_id": str(self.app_id),
            "version": "1",
        }

    def _message(
        self, author: dict[str, Any], content: str, channel_id: int, mentions: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return {
            "id": str(next(self._ids)),
            "channel_id": str(channel_id),
            "author": author,
            "content": content,
            "timestamp": _now(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": mentions,
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
        }

    # ---- gateway ---------------------------------------------------------------------------
    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._ws = ws
        await ws.send_json({"op": 10, "d": {"heartbeat_interval": 45_000}})
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            payload = json.loads(msg.data)
            if payload.get("op") == 1:
                await ws.send_json({"op": 11})
            elif payload.get("op") == 2:
                await self._identify(ws, payload["d"])
        return ws

    async def _identify(self, ws: web.WebSocketResponse, data: dict[str, Any]) -> None:
        self.identify = data
        self.identifies += 1
        if self.reject_privileged and data.get("intents", 0) & PRIVILEGED_INTENTS:
            await ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        ready = {
            "v": 10,
            "user": self.bot,
            "guilds": [{"id": str(g), "unavailable": True} for g in self.guilds],
            "session_id": "fake-session",
            "resume_gateway_url": self.gateway_url,
            "application": {"id": str(self.app_id), "flags": 0},
        }
        if "shard" in data:  # as Discord: READY says which shard it is
            ready["shard"] = data["shard"]
        await self.dispatch("READY", ready)
        for guild_id, channels in self.guilds.items():
            await self.dispatch("GUILD_CREATE", self._guild(guild_id, channels))

    def _guild(self, guild_id: int, channels: list[int]) -> dict[str, Any]:
        return {
            "id": str(guild_id),
            "name": f"guild {guild_id}",
            "owner_id": "1",
            "member_count": 2,
            "roles": [
                {"id": str(guild_id), "name": "@everyone", "permissions": "0", "position": 0},
                {"id": str(guild_id + 1), "name": "mods", "permissions": str(MANAGE_GUILD)},
            ],
            "emojis": [],
            "stickers": [],
            "features": [],
            "members": [_member(self.bot)],
            "channels": [
                {
                    "id": str(c),
                    "type": 0,
                    "name": f"chan-{c}",
                    "position": i,
                    "guild_id": str(guild_id),
                    "permission_overwrites": [],
                }
                for i, c in enumerate(channels)
            ],
            "threads": [
                {
                    "id": str(thread),
                    "type": 11,
                    "name": f"thread-{thread}",
                    "guild_id": str(guild_id),
                    "parent_id": str(parent),
                    "owner_id": "1",
                    "message_count": 0,
                    "member_count": 1,
                    "thread_metadata": {
                        "archived": False,
                        "auto_archive_duration": 1440,
                        "archive_timestamp": _now(),
                    },
                }
                for thread, parent in self.threads.get(guild_id, {}).items()
            ],
            "voice_states": [],
            "presences": [],
        }


def _member(user: dict[str, Any] | None = None, roles: list[str] | None = None) -> dict[str, Any]:
    """A guild member object (with `user` except inside MESSAGE_CREATE, as Discord sends it)."""
    member: dict[str, Any] = {
        "roles": roles or [],
        "joined_at": _now(),
        "deaf": False,
        "mute": False,
        "flags": 0,
    }
    if user is not None:
        member["user"] = user
    return member


def _now() -> str:
    return datetime.now(UTC).isoformat()
