"""Shared pieces of the load benchmark and the crash loop: fakes that keep score, a config, the
bot as a real `lightgrep run` process, and a reader of what ended up on disk.

The fakes run in the calling process (its event loop); the bot is a separate process, so its
peak memory and its crashes are its own. Every simulated user message carries a token
`LG<user id>m<seq>` (no Markdown characters, so it survives rendering) by which the message is
found in getUpdates, in the LLM requests, in the answers and in the session files.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import signal
import sys
import time
import tomllib
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from aiohttp import web  # noqa: E402

from adapters.telegram.spool import Spool  # noqa: E402
from memory import clock  # noqa: E402
from memory.session import SessionStore  # noqa: E402
from tests.rigs.fakes.openai_server import (  # noqa: E402
    Delay,
    FakeOpenAI,
    completion,
    is_consolidation,
    save_memory_call,
)
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram, Sent  # noqa: E402

FIRST_USER_ID = 1000
TOKEN_RE = re.compile(r"\bLG(\d+)m(\d+)\b")
MEMORY_BEGIN = "<!-- LIGHTGREP-BENCH MEMORY BEGIN {} -->"
MEMORY_END = "<!-- LIGHTGREP-BENCH MEMORY END {} -->"
HISTORY_BEGIN = "HISTORY-BEGIN-{}"
HISTORY_END = "HISTORY-END-{}"
_MEMORY_BEGIN_RE = re.compile(r"^<!-- LIGHTGREP-BENCH MEMORY BEGIN (\d+) -->$")
_HISTORY_BEGIN_RE = re.compile(r"HISTORY-BEGIN-(\d+)")
WORDS = [
    "tea", "garden", "bicycle", "river", "python", "lantern", "harbor", "violin", "orchard",
    "marble", "compass", "meadow", "glacier", "copper", "lighthouse", "saffron", "walnut",
]  # fmt: skip


def token(user_id: int, seq: int) -> str:
    return f"LG{user_id}m{seq}"


def filler(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


# ---- the fake LLM -------------------------------------------------------------------------------


class BenchLLM(FakeOpenAI):
    """FakeOpenAI with a fixed latency that answers chat turns with the message's token and
    consolidations with a save_memory call whose MEMORY.md has a numbered first and last line.

    It records, per user, when a request was in flight (the LLM's share of a turn's time)."""

    def __init__(self, latency_s: float, reply_words: int = 40, memory_lines: int = 12) -> None:
        super().__init__()
        self.latency_s = latency_s
        self.reply_words = reply_words
        self.memory_lines = memory_lines
        self.rng = random.Random(7)
        self.busy: dict[int, list[tuple[float, float]]] = defaultdict(list)
        self.consolidations = 0
        self.consolidations_in_flight = 0
        self.chat_calls = 0
        self.generation = 0
        self.consolidation_started = asyncio.Event()
        self.consolidation_answered = asyncio.Event()
        self.default = self._answer

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ConnectionResetError:  # the bot was killed while sending: nothing to answer
            return web.Response(status=499)
        consolidation = is_consolidation(body)
        user = _user_of(body)
        started = time.monotonic()
        if consolidation:
            self.consolidations += 1
            self.consolidations_in_flight += 1
            self.consolidation_started.set()
        else:
            self.chat_calls += 1
        try:
            return await super()._chat(request)
        finally:
            if user is not None:
                self.busy[user].append((started, time.monotonic()))
            if consolidation:
                self.consolidations_in_flight -= 1
                self.consolidation_answered.set()
        # (requests are kept by FakeOpenAI; the bench does not need them beyond counting)

    def _answer(self, body: dict[str, Any]) -> Any:
        if is_consolidation(body):
            return Delay(self.latency_s, self._save_memory(body))
        last = last_user_text(body)
        found = TOKEN_RE.search(last)
        name = found.group(0) if found else "no-token"
        reply = f"ack {name} {filler(self.rng, self.reply_words)}"
        prompt = len(json.dumps(body.get("messages", []))) // 4
        return Delay(self.latency_s, completion(reply, prompt_tokens=prompt, completion_tokens=60))

    def _save_memory(self, body: dict[str, Any]) -> dict[str, Any]:
        """Whole-file markers: a MEMORY.md missing its last line was torn."""
        self.generation += 1
        gen = self.generation
        user = _user_of(body)
        lines = [MEMORY_BEGIN.format(gen), "## User Information", f"- bench user {user}"]
        # The same facts each time, as a model keeping the memory would (one that rewrote every
        # line would have its answer refused as losing the existing facts).
        facts = [filler(random.Random(f"{user}-{i}"), 8) for i in range(self.memory_lines)]
        lines += [f"- fact {i}: {fact}" for i, fact in enumerate(facts)]
        lines += ["## Preferences", "## Project Context", "## Important Notes"]  # all kept
        lines.append(MEMORY_END.format(gen))
        stamp = clock.history_stamp()  # as a model dates the conversation: in UTC
        begin, end = HISTORY_BEGIN.format(gen), HISTORY_END.format(gen)
        entry = f"[{stamp}] {begin} talked with bench user {user} {end}"
        return save_memory_call(entry, "\n".join(lines) + "\n")

    def busy_within(self, user: int, start: float, end: float) -> float:
        """Seconds within [start, end] during which an LLM request for `user` was in flight."""
        spans = sorted(
            (max(a, start), min(b, end))
            for a, b in self.busy.get(user, [])
            if b > start and a < end
        )
        total, cursor = 0.0, start
        for a, b in spans:
            a = max(a, cursor)
            if b > a:
                total += b - a
                cursor = b
        return total


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def _user_of(body: dict[str, Any]) -> int | None:
    found = TOKEN_RE.search(json.dumps(body.get("messages", [])))
    return int(found.group(1)) if found else None


# ---- the fake Bot API ---------------------------------------------------------------------------


class BenchTelegram(FakeTelegram):
    """FakeTelegram that knows each update's message token, times the answers, and can delay
    getUpdates (and the acknowledgement it carries).

    Telegram forgets an update once a getUpdates asks for a higher offset ("acknowledged"); an
    update returned by getUpdates is "delivered" (both kept by FakeTelegram)."""

    def __init__(self) -> None:
        super().__init__()
        self.token_of: dict[int, str] = {}  # update_id → message token
        self.update_of: dict[str, int] = {}  # message token → update_id
        self.injected_at: dict[str, float] = {}  # token → monotonic time pushed
        self.answers: dict[str, list[float]] = defaultdict(list)  # token → sendMessage times
        self.on_answer: Callable[[str, Sent], None] | None = None
        self.abandoned: Counter[str] = Counter()  # method → requests the bot dropped mid-send
        # Network delay of getUpdates (the acknowledgement travels with it); a request of a bot
        # killed meanwhile (`epoch` moved on) never arrives, so it acknowledges nothing.
        self.get_updates_delay_s = 0.0
        self.epoch = 0

    def send(self, user_id: int, seq: int, rng: random.Random, words: int = 12) -> str:
        """A private message from a simulated user; its token."""
        name = token(user_id, seq)
        self.injected_at[name] = time.monotonic()
        self.dm(user_id, f"{name} {filler(rng, words)}")
        self.token_of[self._next_update - 1] = name
        self.update_of[name] = self._next_update - 1
        return name

    def delivered_tokens(self) -> dict[str, int]:
        return {self.token_of[u]: n for u, n in self.delivered.items() if u in self.token_of}

    def acked_token(self, name: str) -> bool:
        """Forgotten by the server: it will never be delivered again."""
        return self.acked(self.update_of[name])

    def was_delivered(self, name: str) -> bool:
        return self.delivered[self.update_of[name]] > 0

    async def _dispatch(self, request: web.Request) -> web.Response:
        try:
            return await super()._dispatch(request)
        except ConnectionResetError:  # the client gave up (a cancelled call): count, not log
            self.abandoned[request.match_info.get("method", "?")] += 1
            return web.Response(status=499)

    async def _m_getupdates(self, params: dict[str, Any]) -> web.Response:
        if self.get_updates_delay_s:
            epoch = self.epoch
            await asyncio.sleep(self.get_updates_delay_s)
            if epoch != self.epoch:
                return web.Response(status=499)
        return await super()._m_getupdates(params)

    async def _m_sendmessage(self, params: dict[str, Any]) -> web.Response:
        response = await super()._m_sendmessage(params)
        if response.status == 200:
            sent = self.sent[-1]
            found = TOKEN_RE.search(sent.text)
            if found:
                self.answers[found.group(0)].append(sent.at)
                if self.on_answer is not None:
                    self.on_answer(found.group(0), sent)
        return response


# ---- the bot process ----------------------------------------------------------------------------


def write_config(
    folder: Path,
    llm: FakeOpenAI,
    telegram: FakeTelegram,
    window_tokens: int,
    *,
    stream: bool = True,
) -> Path:
    """A config with Telegram at the fake, everyone allowed, a small context window; the
    answers streamed (the default) or, with `stream=False`, asked whole."""
    workspaces = folder / "workspaces"
    path = folder / "config.toml"
    path.write_text(
        "[llm]\n"
        f'base_url = "{llm.base_url}"\napi_key = "bench-key"\nmodel = "fake-model"\n'
        f"context_window_tokens = {window_tokens}\ntimeout_s = 30\n"
        f"max_output_tokens = {max(64, window_tokens // 10)}\n"
        "[memory]\n"
        f"workspaces_dir = {json.dumps(str(workspaces))}\n"
        f"[agent]\nstream = {'true' if stream else 'false'}\n"
        "[telegram]\n"
        f'enabled = true\ntoken = "{TOKEN}"\nallow_from = ["*"]\n'
        f'api_base = "{telegram.api_base}"\npoll_timeout_s = 5\n'
    )
    return path


def child_env(folder: Path) -> dict[str, str]:
    """The environment of `lightgrep run`: the checkout importable, its platforms registered as
    pip would (so an uninstalled checkout works), no secrets of the machine."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    platforms = project["project"]["entry-points"]["lightgrep.platforms"]
    site = folder / "site"
    info = site / "lightgrep-0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lightgrep\nVersion: 0.0\n")
    lines = [f"{name} = {target}" for name, target in platforms.items()]
    (info / "entry_points.txt").write_text("[lightgrep.platforms]\n" + "\n".join(lines) + "\n")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LIGHTGREP_", "OPENAI_", "TELEGRAM_", "DISCORD_"))
    }
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]), PYTHONUNBUFFERED="1")
    return env


class BotProcess:
    """`python -m bot.cli run --config FILE` (or another command: `ingress`, `worker …`, with
    the log line that says it is ready) with its log in a file."""

    def __init__(
        self,
        config: Path,
        env: dict[str, str],
        log_path: Path,
        profile: Path | None = None,
        command: tuple[str, ...] = ("run",),
        ready: str = "telegram is ready",
    ) -> None:
        self.command = command
        self.ready = ready
        self.config = config
        self.env = env
        self.log_path = log_path
        self.profile = profile  # cProfile output of the bot (written when it exits), if wanted
        self.proc: asyncio.subprocess.Process | None = None
        self.peak_rss_kb = 0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, ready_timeout_s: float = 30.0) -> None:
        """Start and wait until it says it is ready (`lightgrep run`: Telegram is ready)."""
        start_at = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            profiler = ["-m", "cProfile", "-o", str(self.profile)] if self.profile else []
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, *profiler, "-m", "bot.cli", self.command[0],
                "--config", str(self.config), *self.command[1:],
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.config.parent,
                env=self.env,
            )  # fmt: skip
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            text = self.log_path.read_bytes()[start_at:].decode(errors="replace")
            if self.ready in text:
                return
            if self.proc.returncode is not None:
                raise RuntimeError(
                    f"lightgrep {self.command[0]} exited with {self.proc.returncode}:\n{text}"
                )
            await asyncio.sleep(0.02)
        raise RuntimeError(f"lightgrep {self.command[0]} not ready after {ready_timeout_s:.0f} s")

    def cpu_seconds(self) -> float:
        """User + system CPU time the process has used so far (from /proc/<pid>/stat)."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def sample_rss(self) -> int:
        """Peak resident memory so far (VmHWM, kB); kept as the process's peak."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return self.peak_rss_kb
        found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
        if found:
            self.peak_rss_kb = max(self.peak_rss_kb, int(found.group(1)))
        return self.peak_rss_kb

    async def kill(self) -> None:
        """SIGKILL, then wait until the process is gone (its folder lock dies with it)."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def terminate(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (a clean stop); the exit code."""
        assert self.proc is not None
        self.sample_rss()
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout_s)
        except TimeoutError:
            await self.kill()
            return -9

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


# ---- what is on disk ----------------------------------------------------------------------------


@dataclass
class DiskState:
    """What the workspaces hold, and what is wrong with them."""

    user_tokens: Counter[str] = field(default_factory=Counter)  # token → user messages holding it
    session_files: int = 0
    memory_files: int = 0
    history_entries: int = 0
    problems: list[str] = field(default_factory=list)  # damage: any entry fails the run
    torn_last_lines: int = 0  # a line cut by a kill at the end of a file (skipped on load)
    stale_temp_files: int = 0  # temp files of an atomic write interrupted by a kill
    # update ids accepted into the Telegram spool and not done: Telegram may have forgotten them
    # (acknowledged), but the next start handles them
    spooled: set[int] = field(default_factory=set)

    @property
    def persisted(self) -> int:
        return sum(self.user_tokens.values())

    @property
    def duplicated(self) -> list[str]:
        return sorted(t for t, n in self.user_tokens.items() if n > 1)


def read_workspaces(base: Path) -> DiskState:
    """Load every session file with SessionStore and check every MEMORY.md and HISTORY.md;
    note what the Telegram spool still holds."""
    state = DiskState()
    if not base.is_dir():
        return state
    for path in base.glob(".telegram-*.spool"):
        state.spooled.update(u["update_id"] for u in Spool(path).read())
    for root in sorted(p for p in base.iterdir() if p.is_dir()):
        _read_sessions(root / "sessions", state)
        _check_memory(root, state)
        _check_history(root, state)
        state.stale_temp_files += sum(1 for p in root.iterdir() if p.name.endswith(".tmp"))
    return state


def _read_sessions(folder: Path, state: DiskState) -> None:
    store = SessionStore(folder)
    keys = store.keys()
    for key in keys:
        path = store.path_for(key)
        state.session_files += 1
        _check_lines(path, state)
        try:
            session = store.get(key)
        except Exception as exc:  # the check itself: a file that does not load is damage
            state.problems.append(f"{path}: does not load ({type(exc).__name__}: {exc})")
            continue
        for message in store.read_all(session):
            if message.get("role") == "user":
                found = TOKEN_RE.search(str(message.get("content", "")))
                if found:
                    state.user_tokens[found.group(0)] += 1


def _check_lines(path: Path, state: DiskState) -> None:
    """A torn last line is what a kill mid-write may leave; a bad line elsewhere is damage."""
    lines = path.read_bytes().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for number, raw in enumerate(lines, start=1):
        try:
            json.loads(raw)
        except ValueError:
            if number == len(lines):
                state.torn_last_lines += 1
            else:
                state.problems.append(f"{path}: unreadable line {number} of {len(lines)}")


def _check_memory(root: Path, state: DiskState) -> None:
    path = root / "MEMORY.md"
    if not path.exists():
        return
    state.memory_files += 1
    lines = path.read_text("utf-8", "replace").rstrip("\n").split("\n")
    begin = _MEMORY_BEGIN_RE.match(lines[0])
    if not begin or lines[-1] != MEMORY_END.format(begin.group(1)):
        state.problems.append(f"{path}: incomplete (first {lines[0]!r}, last {lines[-1]!r})")


def _check_history(root: Path, state: DiskState) -> None:
    path = root / "HISTORY.md"
    if not path.exists():
        return
    text = path.read_text("utf-8", "replace")
    for found in _HISTORY_BEGIN_RE.finditer(text):
        state.history_entries += 1
        if HISTORY_END.format(found.group(1)) not in text[found.end() :]:
            state.problems.append(f"{path}: history entry {found.group(1)} is cut short")
