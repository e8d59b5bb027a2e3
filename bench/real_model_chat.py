"""The whole bot against a real model, as a person would meet it: nothing set by hand.

    python bench/real_model_chat.py --port 8777 [--label NAME] [--keep DIR]

`lightgrep init --yes` finds the server on 127.0.0.1:PORT and writes the config; then
`lightgrep chat` (the real CLI, stdin a pipe) gets a 34-message conversation holding 8 facts,
`/new`, 8 questions about those facts and 4 `/recall`s. After every message a command the bot
does not know is sent too: its answer ("I don't know the command /mark…") comes without the
model, so the time from a message to its marker's answer is that message's turn.

Printed, one row for the table of docs/local-models.md: turns answered (not an error or the
"too long" answer), answers showing a raw tool call (`{"name": …}`, `<tool_call>`,
`functions.NAME`), the median turn, planted facts found in MEMORY.md and in HISTORY.md, MEMORY.md
fact lines that hold none of the planted facts (printed, to judge by eye), `/recall` hits (4)
and questions answered right (8). The files and the whole chat are kept with --keep.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from queue import Empty, Queue

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

# (message, the fact's word to look for later: lower case) — 8 facts among 34 messages.
CONVERSATION: list[tuple[str, str]] = [
    ("Hello there! My name is Tomasz.", "tomasz"),
    ("How are you today?", ""),
    ("I live in Rotterdam, near the harbour.", "rotterdam"),
    ("What is a good way to start the morning?", ""),
    ("Can you tell me a fun fact about bridges?", ""),
    ("I work as a bridge engineer for the city.", "engineer"),
    ("What should I read on the train?", ""),
    ("Give me a short poem about rain.", ""),
    ("My cat is called Biscuit.", "biscuit"),
    ("Cats sleep a lot, right?", ""),
    ("What is the capital of Canada?", ""),
    ("Suggest a quick lunch idea.", ""),
    ("Every morning I drink rooibos tea.", "rooibos"),
    ("Is tea healthier than coffee?", ""),
    ("How many planets are in the solar system?", ""),
    ("Tell me a joke about engineers.", ""),
    ("I play chess at a club on Tuesdays.", "chess"),
    ("What is a good chess opening for beginners?", ""),
    ("Why is the sky blue?", ""),
    ("Recommend a board game for four people.", ""),
    ("My sister Ingrid lives in Oslo.", "ingrid"),
    ("What is Norway famous for?", ""),
    ("How do I keep plants alive indoors?", ""),
    ("What is a haiku?", ""),
    ("I was born in 1987.", "1987"),
    ("What happened in science that year, roughly?", ""),
    ("Give me a tip for learning languages.", ""),
    ("How long should I boil an egg?", ""),
    ("What is the tallest mountain in Europe?", ""),
    ("Suggest a name for a sailing boat.", ""),
    ("How do tides work, briefly?", ""),
    ("What is a good stretch after cycling?", ""),
    ("Recommend a film for a rainy evening.", ""),
    ("Thanks, that's all for now.", ""),
]
QUESTIONS: list[tuple[str, str]] = [
    ("What is my name?", "tomasz"),
    ("Which city do I live in?", "rotterdam"),
    ("What is my job?", "engineer"),
    ("What is my cat called?", "biscuit"),
    ("What do I drink every morning?", "rooibos"),
    ("What game do I play on Tuesdays?", "chess"),
    ("What is my sister's name?", "ingrid"),
    ("Which year was I born?", "1987"),
]
RECALLS = ["Rotterdam", "Biscuit", "Ingrid", "chess"]
FACTS = [fact for _, fact in CONVERSATION if fact]
RAW_CALL = re.compile(r'"name"\s*:|<tool_call>|\bfunctions\.[a-z_]+', re.IGNORECASE)
FAILED = re.compile(
    r"something went wrong|too long for m[ey]|went round in circles|nothing to say to that", re.I
)


class Chat:
    """`lightgrep chat` on pipes: a line in, everything printed until the marker's answer."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [str(BIN / "lightgrep"), "--config", "config.toml", "chat"],
            cwd=folder, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1,
        )
        self.lines: Queue[str] = Queue()
        self.transcript: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.marks = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def say(self, text: str, timeout: float) -> tuple[str, float]:
        """Send `text` and a marker; the text printed before the marker's answer, and the time."""
        self.marks += 1
        mark = f"/mark{self.marks}"
        assert self.proc.stdin is not None
        started = time.monotonic()
        self.proc.stdin.write(f"{text}\n{mark}\n")
        self.proc.stdin.flush()
        got: list[str] = []
        while time.monotonic() - started < timeout:
            try:
                line = self.lines.get(timeout=1)
            except Empty:
                continue
            if f"command {mark}" in line:
                answer = "".join(got).strip()
                self.transcript += [f">>> {text}", answer]
                print(f">>> {text} [{time.monotonic() - started:.1f} s]\n{answer}", flush=True)
                return answer, time.monotonic() - started
            got.append(line)
        self.transcript += [f">>> {text}", "".join(got) + "\n[NO ANSWER IN TIME]"]
        return "".join(got).strip(), float("inf")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("/quit\n")
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8777)
    parser.add_argument("--label", default="")
    parser.add_argument("--keep", type=Path, help="keep the files and the chat here")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per turn at most")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="lg-real-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIGHTGREP_", "OPENAI_"))}
    env.update(HOME=str(folder), XDG_DATA_HOME=str(folder / "data"),
               XDG_STATE_HOME=str(folder / "state"), XDG_CONFIG_HOME=str(folder / "cfg"))
    init = subprocess.run(
        [str(BIN / "lightgrep"), "--config", "config.toml", "init", "--yes",
         "--ports", str(args.port)],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300,
    )
    print(f"init (exit {init.returncode}):\n{init.stdout}{init.stderr}")
    if init.returncode:
        sys.exit(1)

    chat = Chat(folder, env)
    times: list[float] = []
    answered = raw = 0
    for text, _ in CONVERSATION:
        answer, took = chat.say(text, args.timeout)
        times.append(took)
        answered += bool(answer) and not FAILED.search(answer)
        raw += bool(RAW_CALL.search(answer))
    chat.say("/new", args.timeout)
    right = 0
    for question, fact in QUESTIONS:
        answer, took = chat.say(question, args.timeout)
        times.append(took)
        answered += bool(answer) and not FAILED.search(answer)
        raw += bool(RAW_CALL.search(answer))
        right += fact in answer.lower()
    hits = 0
    for word in RECALLS:
        answer, _ = chat.say(f"/recall {word}", args.timeout)
        hits += word.lower() in answer.lower() and "no match" not in answer.lower()
    chat.say("/status", args.timeout)
    chat.close()

    memory = history = ""
    for path in (folder / "data").rglob("MEMORY.md"):
        memory += path.read_text("utf-8", errors="replace")
    for path in (folder / "data").rglob("HISTORY.md"):
        history += path.read_text("utf-8", errors="replace")
    fact_lines = [
        line for line in memory.splitlines()
        if line.strip() and not line.startswith("#") and not line.startswith("<!--")
    ]
    wrong = [line for line in fact_lines if not any(f in line.lower() for f in FACTS)]
    turns = len(CONVERSATION) + len(QUESTIONS)
    print("\n".join(chat.transcript[-12:]))
    print(f"\nMEMORY.md fact lines without a planted fact ({len(wrong)}):")
    for line in wrong:
        print(f"  {line[:160]}")
    print(
        f"\n| {args.label} | {answered}/{turns} | {raw} | "
        f"{statistics.median(times):.1f} s | "
        f"{sum(f in memory.lower() for f in FACTS)}/8 | "
        f"{sum(f in history.lower() for f in FACTS)}/8 | {len(wrong)} | {hits}/4 | {right}/8 |"
    )
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        (args.keep / "chat.txt").write_text("\n".join(chat.transcript), "utf-8")
        shutil.copytree(folder, args.keep / "files", dirs_exist_ok=True)
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
