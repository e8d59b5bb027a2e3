"""The package as a release ships it: `python -m build` makes the sdist and, from it, the wheel;
the wheel goes into a fresh venv (no checkout on its path) and the installed `lightgrep` runs as
a person would: --version, doctor, and a piped chat against the fake model.

One test, ~25 s of the suite (installing the dependencies ~13 s from pip's cache: into the fresh
venv with the suite's own pip and without compiling them; the installed bot compiles what it
imports once, as an install without bytecode does). The build runs without isolation, with the
setuptools the dev extra installs (the [build-system] requirement, which `build` checks): an
isolated build made two throwaway venvs and installed setuptools into each, ~4.5 s of CPU."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.rigs import REPO
from tests.rigs.cli import write_config
from tests.rigs.fakes.openai_server import FakeOpenAI, completion

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "workspaces",
    "config.toml", "*.env",
)  # fmt: skip
STEP_TIMEOUT = 240.0  # a build or an install on a loaded machine; only a hang waits this long


async def run(*cmd: str | Path, cwd: Path, env: dict[str, str], stdin: bytes = b"") -> str:
    proc = await asyncio.create_subprocess_exec(
        *map(str, cmd),
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(stdin), STEP_TIMEOUT)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, f"{' '.join(map(str, cmd[:4]))} exited {proc.returncode}:\n{text}"
    return text


def outside_env() -> dict[str, str]:
    """As a person's shell has it: no checkout on the path, no secrets of this machine."""
    secret = ("LIGHTGREP_", "OPENAI_", "TELEGRAM_", "DISCORD_")
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith(secret)}


@pytest.mark.timeout(600)
async def test_the_built_wheel_installs_and_runs_in_a_fresh_venv(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    env = outside_env()
    source = tmp_path / "src"
    shutil.copytree(REPO, source, symlinks=True, ignore=NOT_SOURCE)  # the build writes there
    dist = tmp_path / "dist"
    await run(
        sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, source,
        cwd=tmp_path, env=env,
    )  # fmt: skip
    version = PROJECT["version"]
    [sdist] = dist.glob("*.tar.gz")
    [wheel] = dist.glob("*.whl")

    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"config.example.toml", "LICENSE", "Dockerfile", "deploy/lightgrep.service"} <= names
    assert {"tests/rigs/fakes/openai_server.py", "bot/config.example.toml"} <= names
    with zipfile.ZipFile(wheel) as archive:
        files = set(archive.namelist())
        info = f"lightgrep-{version}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    command = PROJECT["scripts"]["lightgrep"]  # module:function
    assert {"bot/config.example.toml", command.split(":")[0].replace(".", "/") + ".py"} <= files
    assert not any(name.startswith(("tests/", "bench/", "deploy/")) for name in files)
    assert "License-Expression: MIT" in metadata and "Requires-Python: >=3.11" in metadata
    platforms = PROJECT["entry-points"]["lightgrep.platforms"]
    assert f"lightgrep = {command}" in entry_points
    assert all(f"{name} = {target}" in entry_points for name, target in platforms.items())

    venv = tmp_path / "venv"
    await run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path, env=env)
    python, lightgrep = venv / "bin" / "python", venv / "bin" / "lightgrep"
    await run(
        sys.executable, "-m", "pip", "--python", python, "install", "--quiet",
        "--no-compile", "--disable-pip-version-check", wheel, cwd=tmp_path, env=env,
    )  # fmt: skip

    home = tmp_path / "bot"
    home.mkdir()
    assert await run(lightgrep, "--version", cwd=home, env=env) == f"lightgrep {version}\n"
    where = await run(
        python, "-c",
        "import bot, importlib.resources as r; print(bot.__file__); "
        "print(r.files('bot').joinpath('config.example.toml').read_text(), end='')",
        cwd=home, env=env,
    )  # fmt: skip
    installed, example = where.split("\n", 1)
    assert installed.startswith(str(venv))  # the wheel's code, not the checkout's
    assert example == (REPO / "config.example.toml").read_text()

    config = write_config(home, fake_llm)
    doctor = await run(lightgrep, "doctor", "--config", config, cwd=home, env=env)
    checks = [line.split(":")[0] for line in doctor.splitlines() if line[:4] in ("OK  ", "FAIL")]
    assert checks == [
        "OK    config",
        "OK    workspaces",
        "OK    endpoint",
        "OK    context window",
        "OK    token counter",
    ], doctor
    assert "tiktoken, works offline" in doctor  # the tokenizer's data came with the install

    fake_llm.queue(completion("Hello from the fake model."))
    chat = await run(
        lightgrep, "chat", "--config", config, "--user", "pip",
        cwd=home, env=env, stdin=b"hello, installed bot\n/memory\n",
    )  # fmt: skip
    assert "Hello from the fake model." in chat
    [session] = (home / "workspaces" / "cli-pip" / "sessions").iterdir()
    said = [json.loads(line).get("content") for line in session.read_text().splitlines()]
    assert "Hello from the fake model." in said
