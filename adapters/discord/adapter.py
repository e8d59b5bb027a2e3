"""Discord adapter: DMs, guild mentions/replies (or what a channel's /group trigger asks for),
threads and slash commands over discord.py.

The adapter only translates: it reads who wrote what where and derives keys with bot.keys; the
shared intake (adapters/intake) decides the rest (the allow list and its refusal, the channel's
trigger, the turn, its failure, a private answer asked in a guild, the receipt), driving the
channel through `DiscordChat` (chat.py: answers split with bot.formatting, mentions disabled).
It never touches a workspace file. Reconnects are discord.py's; login problems become
one PlatformStartError line. A gateway event discord.py cannot parse (a malformed `channel_id`)
is logged and dropped, so one bad event never ends the connection (it used to end the process);
when the connection ends for good anyway, `run` raises and the CLI restarts the platform.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import mimetypes
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aiohttp
import discord
from discord import app_commands

from adapters.discord import resend
from adapters.discord.chat import UPLOAD_LIMIT, DiscordChat, messages_of, reason, send_logged
from adapters.discord.conversation import chat_of, may_manage, platform_id, quoted_of
from adapters.discord.endpoints import endpoints, rest_base
from adapters.discord.live import NO_MENTIONS
from adapters.discord.settings import PLATFORM, DiscordConfig
from adapters.intake import pipeline, texts
from adapters.live import Pacer
from bot import logsafe
from bot.chats import Speaking
from bot.commands.registry import COMMANDS, Command
from bot.inbound import Inbound
from bot.keys import session_key, user_key
from bot.media.rules import Candidate, MediaRules, read_within
from bot.observe.metrics import watch_in_flight
from bot.outbound import BufferedOutbound, Reply
from bot.platform import PlatformStartError

if TYPE_CHECKING:
    from bot.config import Config
    from bot.platform import Core

log = logging.getLogger(__name__)

DESCRIPTION_LIMIT = 100  # characters per slash command description
COMMAND_NAME = re.compile(r"^[a-z0-9_-]{1,32}$")
SHUTDOWN_GRACE_S = 120.0  # longest wait for running turns when stopping
RESEND_WAIT_S = 60.0  # an answer to send by its destination waits this long for the gateway
CDN_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=30)
CDN_CHUNK = 64 * 1024


class DiscordAdapter:
    """One discord.py client serving DMs, guild mentions and application commands."""

    name = PLATFORM

    def __init__(
        self,
        config: Config,
        core: Core,
        *,
        guild_ready_timeout: float = 2.0,
        defer_after_s: float = 2.0,
    ) -> None:
        self.config: DiscordConfig = config.platforms[PLATFORM]
        self.core = core
        self.ready = asyncio.Event()
        self.guild_ready_timeout = guild_ready_timeout
        # Discord drops an interaction not answered within 3 s; past this we defer and follow up.
        self.defer_after_s = defer_after_s
        self._intake = pipeline.Intake(  # who is answered, and how (adapters/intake)
            core,
            self.config.allow_from,
            media=MediaRules.from_config(config),
            speaking=Speaking.from_config(config),  # when to speak in a channel
        )
        self._client: discord.Client | None = None
        self._cdn: aiohttp.ClientSession | None = None  # attachments' downloads (_from_cdn)
        self._accepting = False
        self._inflight: set[asyncio.Task[Any]] = set()
        self._pacer = Pacer()  # edits of answers being written, per channel
        # Messages posted unasked (reminders, send_to) into a guild channel: its rate.
        self._channel_pacer = Pacer(self.config.channel_send_interval_s)
        self._stop = asyncio.Event()  # run()'s: a send waiting for a channel's pace gives up
        self._dms = True  # this process answers DMs (it has shard 0, or is unsharded)
        watch_in_flight(PLATFORM, lambda: len(self._inflight))

    # ---- lifecycle -------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Log in, sync commands, serve until `stop`, then let running turns finish and close.

        The settings were checked when the configuration was loaded (settings.py)."""
        self._stop = stop
        token = self.config.token or ""
        logsafe.hide(*self.config.secrets())
        with endpoints(self.config.api_base, self.config.gateway_url):
            await self._serve(token, stop)

    async def _serve(self, token: str, stop: asyncio.Event) -> None:
        client = self._client = self._build_client()
        connect: asyncio.Task[None] | None = None
        stopper = asyncio.create_task(stop.wait())
        try:
            await self._login(client, token)
            self._accepting = True
            connect = asyncio.create_task(client.connect(reconnect=True))
            await asyncio.wait({connect, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if connect.done() and not stop.is_set():
                _raise_connect_failure(connect)
        finally:
            self._accepting = False
            stopper.cancel()
            await self._drain()
            await client.close()
            if self._cdn is not None:
                await self._cdn.close()
                self._cdn = None
            if connect is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await connect
            self.ready.clear()

    def _build_client(self) -> discord.Client:
        intents = discord.Intents.none()
        intents.guilds = True
        intents.guild_messages = True
        intents.dm_messages = True
        intents.message_content = self.config.message_content_intent
        # The bot never speaks in voice channels: skip discord.py's warnings about voice libraries.
        discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
        shards = self.config.shards()
        self._dms = shards is None or 0 in shards  # Discord sends DMs to shard 0 only
        client: discord.Client
        if shards is None:
            client = _Client(self, intents=intents, guild_ready_timeout=self.guild_ready_timeout)
        else:
            log.info("discord: shards %s of %d", shards, self.config.shard_count)
            client = _ShardedClient(
                self, intents=intents, guild_ready_timeout=self.guild_ready_timeout,
                shard_ids=shards, shard_count=self.config.shard_count,
            )  # fmt: skip
        _drop_unparsable_events(client)
        self._install_commands(client.tree)
        return client

    async def _login(self, client: discord.Client, token: str) -> None:
        try:
            await client.login(token)
        except discord.LoginFailure:
            raise PlatformStartError(
                "discord: login failed: the bot token was rejected (401 Unauthorized); "
                "check [discord] token"
            ) from None
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            raise PlatformStartError(
                f"discord: login failed at {rest_base()}: {reason(exc)}"
            ) from None

    async def _drain(self) -> None:
        """Wait for running turns (they still need the client to send their replies)."""
        pending = {t for t in self._inflight if not t.done()}
        if not pending:
            return
        log.info("discord: waiting for %d running turn(s) to finish", len(pending))
        _, late = await asyncio.wait(pending, timeout=SHUTDOWN_GRACE_S)
        for task in late:
            task.cancel()

    def _track(self) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    async def _sync_commands(self, tree: app_commands.CommandTree[Any]) -> None:
        """Register the slash commands (globally, or in one guild for fast iteration)."""
        guild_id = self.config.sync_guild_id
        try:
            if guild_id:
                guild = discord.Object(id=int(guild_id))
                tree.copy_global_to(guild=guild)
                synced = await tree.sync(guild=guild)
                log.info("discord: synced %d slash commands to guild %s", len(synced), guild_id)
            else:
                synced = await tree.sync()
                log.info("discord: synced %d slash commands globally", len(synced))
        except (discord.HTTPException, aiohttp.ClientError) as exc:
            # Messages still work without the commands; say why they are missing and go on.
            log.warning("discord: could not sync slash commands: %s", reason(exc))

    def _on_ready(self) -> None:
        user = self._client.user if self._client else None
        log.info("discord: connected as %s (id %s)", user, getattr(user, "id", "?"))
        self.ready.set()

    # ---- messages --------------------------------------------------------------------------
    async def on_message(self, message: discord.Message) -> None:
        """DMs; in guilds a mention of the bot, a reply to it, or what the channel's /group
        trigger asks for (the intake decides: adapters/intake)."""
        me = self._client.user if self._client else None
        if not self._accepting or me is None or not _from_a_person(message):
            return
        author = message.author
        guild_id = _guild_id(message)
        if guild_id is None and not self._dms:
            return  # the process that has shard 0 answers DMs
        chat: str | None = None
        addressed = True
        if guild_id is None:
            text = message.content
            session = session_key(PLATFORM, "dm", author.id)
        else:
            addressed = _addresses(message, me.id)
            text = _strip_mention(message.content, me.id) if addressed else message.content
            chat = chat_of(guild_id, message.channel, message.channel.id)
            # A thread is a channel of its own: its own conversation, answered in it.
            session = session_key(PLATFORM, "guild", guild_id, message.channel.id, author.id)
        text = text.strip()
        if not text and not message.attachments:
            return  # nothing we can see (e.g. a reply without ping and no content intent)
        self._track()
        inbound = Inbound(
            platform=PLATFORM,
            session_key=session,
            user_key=user_key(PLATFORM, author.id),
            text=text,
            is_private=guild_id is None,
            message_id=platform_id(message.channel.id, message.id),
            destination=resend.of_message(message, guild_id),
            reply_to=quoted_of(message, me.id),
            chat_key=chat,
            place=resend.place_of(message.channel.id, author.id, guild_id),
            sender_name=author.display_name,
        )

        async def is_admin() -> bool:
            return may_manage(author)

        arrival = pipeline.Arrival(
            inbound,
            author.id,
            addressed=addressed,
            media=_attachments(message, self._from_cdn),
            is_admin=is_admin,
        )
        chat_here = DiscordChat(message, self._pacer, in_guild=guild_id is not None)
        await self._intake.take(arrival, chat_here)

    async def _from_cdn(self, url: str, limit: int) -> bytes:
        """An attachment's bytes, streamed and stopped once more than `limit` come (bot.media.
        rules.TooLarge): the size Discord reports is only what the message says. (discord.py's
        Attachment.read would read it whole.) Through the client's proxy, if it has one."""
        if self._cdn is None or self._cdn.closed:
            self._cdn = aiohttp.ClientSession(
                cookie_jar=aiohttp.DummyCookieJar(), timeout=CDN_TIMEOUT
            )
        http = self._client.http if self._client is not None else None
        async with self._cdn.get(
            url,
            proxy=http.proxy if http is not None else None,
            proxy_auth=http.proxy_auth if http is not None else None,
        ) as response:
            if response.status != 200:
                raise ConnectionError(f"the CDN answered HTTP {response.status}")
            chunks = response.content.iter_chunked(CDN_CHUNK)
            return await read_within(chunks, limit, response.content_length)

    async def send_to(self, destination: dict[str, str], reply: Reply | None) -> None:
        """An answer without its message, or a reminder in the channel it was set in
        (bot.platform.Resender): adapters/discord/resend.py. A stop waits for it."""
        await asyncio.wait_for(self.ready.wait(), RESEND_WAIT_S)  # else tried again later
        assert self._client is not None
        reply = reply or Reply(texts.FAILED)
        messages = messages_of(reply, UPLOAD_LIMIT)
        # Into a guild's channel (not a DM, nor privately): many due at once arrive at the
        # channel's pace, not in a burst.
        channel = resend.paced_channel(destination, private=reply.private)
        if channel is not None and not await self._channel_pacer.wait(channel, self._stop):
            raise ConnectionError("stopping: not sent")  # tried again after the restart
        sending = asyncio.ensure_future(
            resend.send_by_destination(self._client, destination, messages, private=reply.private)
        )
        self._inflight.add(sending)  # a stop waits for the send itself, not for its caller
        sending.add_done_callback(self._inflight.discard)
        try:
            await sending
        finally:
            if channel is not None:
                self._channel_pacer.done(channel)

    async def on_button(self, interaction: discord.Interaction) -> None:
        """A pressed button of ours: its command text, as if the presser had typed it."""
        if interaction.type != discord.InteractionType.component:
            return
        data: Any = interaction.data or {}
        command = data.get("custom_id") if isinstance(data, dict) else None
        if not isinstance(command, str) or not command.startswith("/"):
            return  # not one of ours
        name = command[1:].split(" ", 1)[0]
        await self.on_command(interaction, name, command)

    # ---- slash commands --------------------------------------------------------------------
    def _install_commands(self, tree: app_commands.CommandTree[Any]) -> None:
        for command in _valid_commands():
            tree.add_command(self._slash_command(command))

    def _slash_command(self, command: Command) -> app_commands.Command[Any, ..., None]:
        """The application command for a registry entry, its one option built from the
        command's argument (a string, shown under the argument's own name)."""
        name, argument = command.name, command.argument
        callback: Callable[..., Awaitable[None]]
        if argument is None:

            async def plain(interaction: discord.Interaction) -> None:
                await self.on_command(interaction, name, f"/{name}")

            callback = plain
        elif argument.required:

            async def required(interaction: discord.Interaction, value: str) -> None:
                await self.on_command(interaction, name, f"/{name} {value}")

            callback = required
        else:

            async def optional(interaction: discord.Interaction, value: str | None = None) -> None:
                await self.on_command(interaction, name, f"/{name} {value or ''}".rstrip())

            callback = optional
        if argument is not None:
            described = app_commands.describe(value=argument.description[:DESCRIPTION_LIMIT])
            callback = app_commands.rename(value=argument.name)(described(callback))
        return app_commands.Command(
            name=name, description=command.description[:DESCRIPTION_LIMIT], callback=callback
        )

    async def on_command(self, interaction: discord.Interaction, name: str, text: str) -> None:
        """Answer a slash command; defer first when the core takes longer than Discord waits."""
        user = interaction.user
        if not self._intake.allows(user.id):
            log.info("discord: refused /%s from user %s (not in allow_from)", name, user.id)
            await interaction.response.send_message(texts.REFUSAL, ephemeral=True)
            return
        if not self._accepting:
            await interaction.response.send_message(texts.RESTARTING, ephemeral=True)
            return
        self._track()
        guild = interaction.guild_id
        permissions = interaction.permissions
        inbound = Inbound(
            platform=PLATFORM,
            session_key=_interaction_session(interaction),
            user_key=user_key(PLATFORM, user.id),
            text=text,
            is_private=guild is None,
            destination=resend.of_interaction(interaction),
            chat_key=None
            if guild is None
            else chat_of(guild, interaction.channel, interaction.channel_id),
            chat_admin=guild is not None
            and (permissions.manage_guild or permissions.manage_channels),
            place=resend.place_of(interaction.channel_id, user.id, interaction.guild_id),
            sender_name=user.display_name,
        )
        answer = BufferedOutbound()
        # Deferred or not, and ephemeral or not: decided here once the core has taken its time;
        # None: too late to answer at all. The send runs in the task that asked the core, so
        # the answer counts as delivered (in `lightgrep ingress`, acknowledged) only once sent.
        decision: asyncio.Future[tuple[bool, bool] | None] = (
            asyncio.get_running_loop().create_future()
        )
        handled = asyncio.Event()

        async def turn() -> None:
            reply = await self._intake.answer(inbound, answer)
            handled.set()
            how = await decision
            if how is not None:
                await self._answer_interaction(interaction, reply, *how)

        work = asyncio.create_task(turn())
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(handled.wait(), self.defer_after_s)
            deferred = not handled.is_set()
            # The core marks an answer private before anything else; one whose privacy is not
            # yet known is treated as private, so it can never show in the channel.
            ephemeral = answer.private or not answer.begun
            if deferred:
                try:
                    await interaction.response.defer(ephemeral=ephemeral, thinking=True)
                except discord.HTTPException as exc:
                    # Too late (the interaction expired): the turn still completes and is saved.
                    log.warning("discord: could not defer /%s: %s", name, reason(exc))
                    decision.set_result(None)
                    await work
                    return
            decision.set_result((deferred, ephemeral))
            await work
        finally:
            if not decision.done():  # cancelled while deciding: the answer is not sent here
                decision.cancel()

    async def _answer_interaction(
        self, interaction: discord.Interaction, reply: Reply, deferred: bool, ephemeral: bool
    ) -> None:
        # An interaction says how big an attachment may be where it was used.
        limit = getattr(interaction, "filesize_limit", None) or UPLOAD_LIMIT
        for index, (chunk, extra) in enumerate(messages_of(reply, limit)):
            send: Awaitable[Any]
            if index == 0 and not deferred:
                send = interaction.response.send_message(
                    chunk, ephemeral=ephemeral, allowed_mentions=NO_MENTIONS, **extra
                )
            else:
                send = interaction.followup.send(
                    chunk, ephemeral=ephemeral, allowed_mentions=NO_MENTIONS, **extra
                )
            await send_logged(send)


class _Client(discord.Client):
    """discord.Client that forwards events to the adapter and syncs commands after login."""

    def __init__(self, adapter: DiscordAdapter, **options: Any) -> None:
        super().__init__(**options)
        self.adapter = adapter
        self.tree: app_commands.CommandTree[Any] = app_commands.CommandTree(
            self,
            allowed_contexts=app_commands.AppCommandContext(
                guild=True, dm_channel=True, private_channel=True
            ),
            allowed_installs=app_commands.AppInstallationType(guild=True, user=True),
        )

    async def setup_hook(self) -> None:
        if self.adapter._dms:  # once per bot, not once per shard's process: shard 0's
            await self.adapter._sync_commands(self.tree)

    async def on_ready(self) -> None:
        self.adapter._on_ready()

    async def on_resumed(self) -> None:
        self.adapter.ready.set()

    async def on_disconnect(self) -> None:
        self.adapter.ready.clear()  # connected or not is what /healthz reports

    async def on_message(self, message: discord.Message) -> None:
        await self.adapter.on_message(message)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        await self.adapter.on_button(interaction)


class _ShardedClient(_Client, discord.AutoShardedClient):
    """The same, connecting only some shards ([discord] shard_ids of shard_count)."""


# ---- helpers -------------------------------------------------------------------------------
def _valid_commands() -> list[Command]:
    """The core's commands, keeping only names Discord accepts (for the argument too)."""
    valid = []
    for command in COMMANDS:
        names = [command.name] + ([command.argument.name] if command.argument else [])
        if all(COMMAND_NAME.match(n) for n in names) and command.description:
            valid.append(command)
        else:
            log.warning("discord: skipping command %r (not a valid slash command)", command.name)
    return valid


def _drop_unparsable_events(client: discord.Client) -> None:
    """Wrap discord.py's gateway event parsers so that one that raises drops its event with a
    log line instead of ending the connection (the gateway loop does not catch a parser's error).

    The parsers live in the client's connection state (`_connection.parsers`, read by the
    gateway for every dispatch): a private attribute, so if it is missing we say so and go on
    with discord.py's own behaviour."""
    parsers = getattr(getattr(client, "_connection", None), "parsers", None)
    if not isinstance(parsers, dict):
        log.warning("discord: cannot guard the gateway event parsers (discord.py changed?)")
        return
    for event, parse in list(parsers.items()):
        parsers[event] = _guarded(event, parse)


def _guarded(event: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
    def guarded(data: Any) -> None:
        try:
            parse(data)
        except Exception as exc:  # platform data is untrusted: one bad event, not a dead bot
            log.error("discord: dropped a %s event that does not parse (%s)", event, reason(exc))
            log.debug("discord: the %s event that failed", event, exc_info=exc)

    return guarded


def _raise_connect_failure(connect: asyncio.Task[None]) -> None:
    """The gateway loop ended on its own: turn the reason into one clear line."""
    exc = connect.exception()
    if isinstance(exc, discord.PrivilegedIntentsRequired):
        raise PlatformStartError(
            "discord: the gateway refused the Message Content intent; enable it in the Developer "
            "Portal (Bot → Privileged Gateway Intents) or set [discord] message_content_intent "
            "= false"
        )
    if isinstance(exc, discord.ConnectionClosed) and exc.code == 4004:
        raise PlatformStartError(
            "discord: the gateway rejected the bot token; check [discord] token"
        )
    if exc is not None:
        raise PlatformStartError(f"discord: the gateway connection failed: {reason(exc)}")
    raise PlatformStartError("discord: the gateway connection closed")


def _attachments(
    message: discord.Message, download: Callable[[str, int], Awaitable[bytes]]
) -> list[Candidate]:
    """The message's attachments as bot.media.rules candidates (downloaded from Discord's CDN by
    `download`, only if they will be used)."""
    candidates = []
    for attachment in message.attachments:
        name = attachment.filename or "file"
        mime = attachment.content_type or mimetypes.guess_type(name)[0] or ""
        candidates.append(
            Candidate(
                mime,
                name,
                attachment.size,
                functools.partial(download, attachment.url),
                voice=attachment.is_voice_message(),
                seconds=attachment.duration,
            )
        )
    return candidates


def _from_a_person(message: discord.Message) -> bool:
    """Bots (this one included), webhooks and system messages never start a turn."""
    if message.author.bot or message.webhook_id is not None:
        return False
    return message.type in (discord.MessageType.default, discord.MessageType.reply)


def _guild_id(message: discord.Message) -> int | None:
    if message.guild is not None:
        return message.guild.id
    return getattr(message.channel, "guild_id", None)


def _addresses(message: discord.Message, bot_id: int) -> bool:
    """A mention of the bot, or a reply to one of its messages."""
    if any(user.id == bot_id for user in message.mentions):
        return True
    reference = message.reference
    resolved = reference.resolved if reference is not None else None
    return isinstance(resolved, discord.Message) and resolved.author.id == bot_id


def _strip_mention(content: str, bot_id: int) -> str:
    return re.sub(rf"<@!?{bot_id}>", " ", content)


def _interaction_session(interaction: discord.Interaction) -> str:
    user_id = interaction.user.id
    if interaction.guild_id is not None:
        return session_key(PLATFORM, "guild", interaction.guild_id, interaction.channel_id, user_id)
    if interaction.context.dm_channel:
        return session_key(PLATFORM, "dm", user_id)
    # A user-installed command in someone else's DM or a group DM.
    return session_key(PLATFORM, "private", interaction.channel_id, user_id)
