"""How long `lightgrep memory` and `lightgrep recall` take from exec to exit, against the bare
interpreter (`python -c pass`) and against importing the agent (what `recall` used to do), in
the same run. Medians of N runs; run it on a quiet machine.

    .venv/bin/python bench/cli_startup.py [runs]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def median_s(argv: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        user = base / "workspaces" / "telegram-42"
        user.mkdir(parents=True)
        (user / "MEMORY.md").write_text("## Preferences\n- Likes green tea\n")
        (user / "HISTORY.md").write_text("[2026-01-02 09:00] Talked about green tea.\n")
        config = base / "config.toml"
        config.write_text('[memory]\nworkspaces_dir = "workspaces"\n')
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": folder}
        py = [sys.executable]
        cli = [*py, "-m", "bot.cli"]
        rows = {
            "python -c pass (baseline)": [*py, "-c", "pass"],
            "lightgrep memory": [*cli, "memory", "--config", str(config), "telegram-42"],
            "lightgrep recall": [*cli, "recall", "--config", str(config), "telegram-42", "tea"],
            "import bot.agent (the old recall)": [*py, "-c", "import bot.agent"],
        }
        baseline = None
        for name, argv in rows.items():
            took = median_s(argv, env, runs)
            baseline = baseline or took
            print(f"{name:36} {took * 1000:7.0f} ms  ({took / baseline:4.1f}x baseline)")


if __name__ == "__main__":
    main()
