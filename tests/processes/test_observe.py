"""/metrics and /healthz of `lightgrep run` as a real process, scraped over real HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.rigs.cli import STEP_TIMEOUT, closed_port_url, read_until, start_run, write_config
from tests.rigs.fakes.openai_server import FakeOpenAI, completion
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def observed_config(folder: Path, llm: FakeOpenAI | str, telegram: FakeTelegram, port: int):
    return write_config(
        folder,
        llm,
        f'[metrics]\nlisten = "127.0.0.1:{port}"\n'
        f'[telegram]\nenabled = true\ntoken = "{TOKEN}"\nallow_from = ["*"]\n'
        f'api_base = "{telegram.api_base}"\npoll_timeout_s = 1\n',
    )


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        return response.status, await response.text()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def serving(config: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    proc = await start_run(config, env)
    assert proc.stderr is not None
    await read_until(proc.stderr, "telegram is ready")
    return proc


async def stopped(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), STEP_TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def test_metrics_and_health_after_a_turn(
    fake_llm: FakeOpenAI,
    fake_telegram: FakeTelegram,
    tmp_path: Path,
    child_env: dict[str, str],
) -> None:
    port = free_port()
    fake_llm.queue(completion("Hello.", prompt_tokens=120, completion_tokens=7))
    proc = await serving(observed_config(tmp_path, fake_llm, fake_telegram, port), child_env)
    try:
        fake_telegram.dm(42, "hi")
        fake_telegram.dm(42, "/help")
        await fake_telegram.wait_sent(42, 2, wait_s=STEP_TIMEOUT)
        # The fake has the answer as it is sent; the update is over (counted, out of flight)
        # once the bot has the fake's response, which it says by acknowledging the update.
        last = fake_telegram.last_update_id
        await fake_telegram.wait_until(lambda: fake_telegram.acked(last), STEP_TIMEOUT)
        status, text = await get(f"http://127.0.0.1:{port}/metrics")
        health_status, health = await get(f"http://127.0.0.1:{port}/healthz")
    finally:
        await stopped(proc)

    assert status == 200
    seen = samples(text)
    telegram = ("platform", "telegram")
    assert seen[("lightgrep_turns_total", (("kind", "turn"), ("outcome", "ok"), telegram))] == 1
    assert seen[("lightgrep_turns_total", (("kind", "command"), ("outcome", "ok"), telegram))] == 1
    assert seen[("lightgrep_answer_seconds_count", (("kind", "turn"), telegram))] == 1
    assert seen[("lightgrep_llm_calls_total", (("outcome", "ok"), ("purpose", "chat")))] == 1
    assert seen[("lightgrep_llm_tokens_total", (("kind", "prompt"), ("purpose", "chat")))] == 120
    assert seen[("lightgrep_llm_tokens_total", (("kind", "completion"), ("purpose", "chat")))] == 7
    assert seen[("lightgrep_updates_in_flight", (telegram,))] == 0
    assert health_status == 200
    assert json.loads(health) == {
        "healthy": True,
        "platforms": {"telegram": {"connected": True}},
        "model": {"reachable": True, "detail": json.loads(health)["model"]["detail"]},
    }


async def test_health_is_503_while_the_model_is_unreachable(
    fake_telegram: FakeTelegram,
    tmp_path: Path,
    child_env: dict[str, str],
) -> None:
    port = free_port()
    config = observed_config(tmp_path, closed_port_url(), fake_telegram, port)
    proc = await serving(config, child_env)
    try:
        status, body = await get(f"http://127.0.0.1:{port}/healthz")
        fake_telegram.dm(42, "hello?")
        await fake_telegram.wait_sent(42, 1, wait_s=STEP_TIMEOUT)  # "couldn't reach my model"
        _, text = await get(f"http://127.0.0.1:{port}/metrics")
    finally:
        await stopped(proc)

    assert status == 503
    health = json.loads(body)
    assert health["healthy"] is False and health["platforms"]["telegram"]["connected"] is True
    assert health["model"]["reachable"] is False and "GET /models" in health["model"]["detail"]
    failed = (("outcome", "connection"), ("purpose", "chat"))
    assert samples(text)[("lightgrep_llm_calls_total", failed)] == 1


async def test_limit_refusals_are_counted(
    fake_llm: FakeOpenAI,
    fake_telegram: FakeTelegram,
    tmp_path: Path,
    child_env: dict[str, str],
) -> None:
    port = free_port()
    fake_llm.queue(completion("Hello."))
    config = observed_config(tmp_path, fake_llm, fake_telegram, port)
    config.write_text(config.read_text() + "[limits]\nmessages_per_minute = 1\n")
    proc = await serving(config, child_env)
    try:
        fake_telegram.dm(42, "hi")
        await fake_telegram.wait_sent(42, 1, wait_s=STEP_TIMEOUT)
        fake_telegram.dm(42, "and again")
        await fake_telegram.wait_sent(42, 2, wait_s=STEP_TIMEOUT)
        _, text = await get(f"http://127.0.0.1:{port}/metrics")
    finally:
        await stopped(proc)

    seen = samples(text)
    assert seen[("lightgrep_limit_refusals_total", (("limit", "messages_per_minute"),))] == 1
    assert seen[("lightgrep_llm_calls_total", (("outcome", "ok"), ("purpose", "chat")))] == 1
