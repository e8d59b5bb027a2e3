"""What hostile media cost the others (issue 22): another person's latency, the bot's RSS and the
time to stop, with `lightgrep run` as a real process against the fake Telegram and model.

    .venv/bin/python bench/media_bench.py pdf        # six accounts send a PDF made to be slow
    .venv/bin/python bench/media_bench.py download   # a file far larger than its reported size
    .venv/bin/python bench/media_bench.py pictures   # three people with four 9.5 MB pictures each

`pdf`: six accounts each send a 49 KB PDF of 300 pages sharing one content stream of 20,000
empty text runs (~0.55 s a page with pypdf here, ~165 s a file); meanwhile another person sends
/recall and a chat message, one after the other, for 30 s; then SIGTERM. `download`: a document
reported as 1,000 bytes but served as 300 MB, then a 50 MB one with no size, while another
person chats. `pictures`: three people each send four 9.5 MB pictures, then each asks about them
at once (a tool round, then the answer), while another person chats.

Prints medians and maxima of the other person's latency (a reply not come within the probe's
timeout counts as that timeout, marked ">"), the bot's RSS at the start and its peak (its own,
and with its child processes), the biggest request the model got, the seconds from SIGTERM to
exit, and the longest its event loop was held (asyncio's debug mode, on in the bot: it slows
the bot a little, the same for both checkouts). Run it on two checkouts to compare (the fakes
run in this process, the bot apart).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import web

from bench.harness import BenchLLM, BenchTelegram, BotProcess, child_env, write_config
from tests.rigs.fakes.openai_server import Delay, completion, tool_call
from tests.rigs.media import png, slow_pdf

OTHER = 7  # the person who only wants an answer


class MediaLLM(BenchLLM):
    """BenchLLM that keeps each request's size (pictures make them tens of MB) and answers a
    message asking to "compare" with a tool call first, as a model looking something up."""

    def __init__(self) -> None:
        super().__init__(latency_s=0.05)
        self.sizes: list[int] = []
        self.default = self._media_answer

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        """A large request (pictures) is answered whole (the pictures scenario asks whole), its
        body parsed in a thread, so that tens of MB of JSON do not hold up this process's fake
        Telegram, by which the other person's latency is measured; its pictures not checked."""
        raw = await request.read()
        self.sizes.append(len(raw))
        if len(raw) < 1_000_000:
            return await super()._chat(request)
        body = await asyncio.to_thread(json.loads, raw)
        item = self._media_answer(body)
        while isinstance(item, Delay):
            await asyncio.sleep(item.seconds)
            item = item.item
        return web.json_response(item)

    def _media_answer(self, body: dict[str, Any]) -> Any:
        messages = body.get("messages", [])
        last = messages[-1] if messages else {}
        content = str(last.get("content"))
        if last.get("role") == "user" and "compare" in content:
            return completion(None, [tool_call("search_history", {"query": "pictures"})])
        return self._answer(body)


class Sampler:
    """The bot's RSS (kB), its own and with its children, sampled until stopped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start_kb = _rss(pid)
        self.peak_kb = self.start_kb
        self.peak_with_children_kb = self.start_kb
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            own = _rss(self.pid)
            self.peak_kb = max(self.peak_kb, own)
            children = sum(_rss(child) for child in _children(self.pid))
            self.peak_with_children_kb = max(self.peak_with_children_kb, own + children)
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def line(self) -> str:
        return (
            f"bot RSS {self.start_kb / 1024:.0f} → peak {self.peak_kb / 1024:.0f} MB "
            f"(with its children {self.peak_with_children_kb / 1024:.0f} MB)"
        )


def _rss(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    return int(found.group(1)) if found else 0


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                if int(stat.rpartition(")")[2].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


async def replied(tg: BenchTelegram, chat: int, before: int, timeout_s: float) -> float | None:
    """Seconds until `chat` got a message beyond its first `before`, or None by `timeout_s`."""
    started = time.monotonic()
    try:
        await tg.wait_until(lambda: len(tg.sent_to(chat)) > before, timeout_s)
    except TimeoutError:
        return None
    return time.monotonic() - started


class Probe:
    """Another person's latency: a chat message (answered by the model) or /recall."""

    def __init__(self, tg: BenchTelegram, timeout_s: float = 30.0) -> None:
        self.tg = tg
        self.timeout_s = timeout_s
        self.rng = random.Random(3)
        self.seq = 0
        self.latencies: dict[str, list[float]] = {"chat": [], "/recall": []}
        self.timeouts: dict[str, int] = {"chat": 0, "/recall": 0}
        self.gave_up = False

    async def once(self, what: str) -> None:
        before = len(self.tg.sent_to(OTHER))
        if what == "chat":
            self.seq += 1
            self.tg.send(OTHER, self.seq, self.rng)
        else:
            self.tg.dm(OTHER, "/recall invoice")
        took = await replied(self.tg, OTHER, before, self.timeout_s)
        if took is None:  # no more probes: a late answer would be taken for the next one's
            self.timeouts[what] += 1
            self.latencies[what].append(self.timeout_s)
            self.gave_up = True
        else:
            self.latencies[what].append(took)

    async def run_for(self, seconds: float, kinds: tuple[str, ...] = ("/recall", "chat")) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self.gave_up:
            for what in kinds:
                await self.once(what)
                if self.gave_up:
                    return
            await asyncio.sleep(0.5)

    def lines(self) -> list[str]:
        out = []
        for what, values in self.latencies.items():
            if not values:
                continue
            late = f" ({self.timeouts[what]} not answered within {self.timeout_s:.0f} s)"
            mark = ">" if self.timeouts[what] else ""
            out.append(
                f"another person's {what}: {len(values)} sent, median "
                f"{statistics.median(values):.3f} s, max {mark}{max(values):.3f} s"
                + (late if self.timeouts[what] else "")
            )
        return out


async def stop_time(bot: BotProcess, timeout_s: float = 120.0) -> str:
    started = time.monotonic()
    code = await bot.terminate(timeout_s)
    took = time.monotonic() - started
    if code == -9:
        return f"SIGTERM to exit: > {timeout_s:.0f} s (killed)"
    return f"SIGTERM to exit: {took:.1f} s (exit {code})"


async def scenario_pdf(tg: BenchTelegram, llm: MediaLLM, bot: BotProcess) -> list[str]:
    hostile = slow_pdf(pages=300)
    sampler = Sampler(bot.pid)
    probe = Probe(tg)
    await probe.run_for(3)  # a baseline before the files
    quiet = probe.lines()
    probe = Probe(tg)
    for account in range(101, 107):
        tg.document(account, hostile, "report.pdf", "application/pdf")
    await tg.wait_until(lambda: len(tg.downloads) >= 6, 60)
    await probe.run_for(30)
    result = [f"quiet: {line}" for line in quiet]
    reading = f"six slow PDFs of {len(hostile) // 1000} KB being read"
    result += [f"{reading}: {line}" for line in probe.lines()]
    answered = sum(1 for account in range(101, 107) if tg.sent_to(account))
    result.append(f"PDF senders answered within the 30 s: {answered} of 6")
    result.append(await stop_time(bot))
    await sampler.stop()
    result.append(sampler.line())
    return result


async def scenario_download(tg: BenchTelegram, llm: MediaLLM, bot: BotProcess) -> list[str]:
    result = []
    sampler = Sampler(bot.pid)
    for account, size, sized, name in (
        (101, 300_000_000, True, "notes.txt"),
        (102, 50_000_000, False, "big.pdf"),
    ):
        probe = Probe(tg)
        known = set(tg.downloads)
        tg.document(account, b"x" * 1000, name, None, hidden=size, sized=sized)
        while not tg.sent_to(account) and not probe.gave_up:
            await probe.once("chat")
        await tg.wait_until(lambda chat=account: bool(tg.sent_to(chat)), 600)
        [path] = set(tg.downloads) - known
        said = "reported as 1,000 bytes" if sized else "with no size"
        result.append(
            f"{name} {said}, served as {size // 1_000_000} MB: the bot took "
            f"{tg.served.get(path, 0) / 1e6:.1f} MB; answer: {tg.sent_to(account)[-1].text!r}"
        )
        result += [f"  meanwhile {line}" for line in probe.lines()]
    await sampler.stop()
    result.append(sampler.line())
    result.append(await stop_time(bot))
    return result


async def scenario_pictures(tg: BenchTelegram, llm: MediaLLM, bot: BotProcess) -> list[str]:
    people = (201, 202, 203)
    sampler = Sampler(bot.pid)
    for person in people:
        for number in range(4):
            before = len(tg.sent_to(person))
            tg.photo(person, png(person + number) + bytes(9_500_000), caption=f"picture {number}")
            await replied(tg, person, before, 120)
    probe = Probe(tg)
    first = len(llm.sizes)
    counts = {person: len(tg.sent_to(person)) for person in people}
    started = time.monotonic()
    for person in people:
        tg.dm(person, "compare my pictures, please")
    while any(len(tg.sent_to(p)) <= counts[p] for p in people) and not probe.gave_up:
        await probe.once("chat")
    await tg.wait_until(lambda: all(len(tg.sent_to(p)) > counts[p] for p in people), 600)
    took = time.monotonic() - started
    await sampler.stop()
    sizes = llm.sizes[first:]
    return [
        f"three turns about four 9.5 MB pictures each (a tool round, then the answer): "
        f"{took:.1f} s",
        f"their requests: {len(sizes)}, the largest {max(sizes) / 1e6:.1f} MB",
        *[f"meanwhile {line}" for line in probe.lines()],
        sampler.line(),
        await stop_time(bot),
    ]


def _longest_pause(log: str) -> str:
    """From asyncio's debug mode: "Executing <Handle …> took 0.512 seconds", once the bot is
    ready (start-up holds the loop by design: nothing is served yet)."""
    served = log[log.find("telegram is ready") :]
    pauses = [float(found) for found in re.findall(r"took (\d+\.\d+) seconds", served)]
    if not pauses:
        return "the bot's event loop: no callback held it 0.1 s or more"
    return (
        f"the bot's event loop: {len(pauses)} callbacks held it 0.1 s or more, the longest "
        f"{max(pauses):.3f} s"
    )


SCENARIOS = {"pdf": scenario_pdf, "download": scenario_download, "pictures": scenario_pictures}


async def main(which: str) -> None:
    llm = await MediaLLM().start()
    tg = await BenchTelegram().start()
    with tempfile.TemporaryDirectory() as folder:
        config = write_config(Path(folder), llm, tg, 65536, stream=which != "pictures")
        if which == "pictures":
            text = config.read_text().replace("[llm]\n", "[llm]\nvision = true\n", 1)
            config.write_text(text)
        env = child_env(Path(folder))
        env["PYTHONASYNCIODEBUG"] = "1"  # the bot logs every callback that holds its loop 0.1 s
        log = Path(folder) / "bot.log"
        bot = BotProcess(config, env, log)
        await bot.start()
        try:
            lines = await SCENARIOS[which](tg, llm, bot)
            lines.append(_longest_pause(log.read_text(errors="replace")))
        finally:
            if bot.proc is not None and bot.proc.returncode is None:
                await bot.kill()
            await tg.stop()
            await llm.stop()
    load = os.getloadavg()[0]
    print(f"{which} (load average {load:.1f} on {os.cpu_count()} cores):")
    for line in lines:
        print(f"  {line}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    asyncio.run(main(parser.parse_args().scenario))
