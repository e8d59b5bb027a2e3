"""How long `lightgrep memory` and `lightgrep recall` take from exec to exit, against the bare
interpreter (`python -c pass`) and against importing the agent (what `recall` used to do), in
the same run. Medians of N runs, wall time and CPU time (user + system: less disturbed by a
busy machine); run it on a quiet machine. Our modules' bytecode is cached first, as in any
installed copy: with PYTHONDONTWRITEBYTECODE set, every run would compile our sources again,
about as long as the imports themselves.

    .venv/bin/python bench/cli_startup.py [runs]
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def medians_s(argv: list[str], env: dict[str, str], runs: int) -> tuple[float, float]:
    """Median wall and CPU seconds of `runs` runs, after one that caches the bytecode."""
    subprocess.run(argv, env=env, check=True, capture_output=True)
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


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
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPATH=str(ROOT), HOME=folder)
        py = [sys.executable]
        cli = [*py, "-m", "bot.cli"]
        rows = {
            "python -c pass (baseline)": [*py, "-c", "pass"],
            "lightgrep memory": [*cli, "memory", "--config", str(config), "telegram-42"],
            "lightgrep recall": [*cli, "recall", "--config", str(config), "telegram-42", "tea"],
            "import bot.agent.agent (the old recall)": [*py, "-c", "import bot.agent.agent"],
        }
        baseline = None
        for name, argv in rows.items():
            took, cpu = medians_s(argv, env, runs)
            baseline = baseline or took
            print(
                f"{name:36} {took * 1000:7.0f} ms  ({took / baseline:4.1f}x baseline)  "
                f"CPU {cpu * 1000:5.0f} ms"
            )


if __name__ == "__main__":
    main()
