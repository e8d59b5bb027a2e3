"""The image's lock files (deploy/lock) still say what pyproject.toml asks for: every dependency
of the image pinned there to a version its range allows, with the sha256 of its files, and
nothing pinned for pyproject alone that it no longer asks for. A stale lock fails here with the
command that renews it, before a Docker build installs something else than CI tested."""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.rigs import REPO

RENEW = "run deploy/lock (pip install uv first) and commit deploy/*.lock"
LOCKS = {  # lock file: the extras it holds beside the dependencies (as the Dockerfile says)
    "requirements.lock": ["nkeys", "nats-server"],
    "requirements-read-page.lock": ["nkeys", "nats-server", "read-page"],
}
PIN = re.compile(r"^([A-Za-z0-9._-]+)==(\S+)(?: ;[^\\]*)? \\$")


def asked(extras: list[str]) -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    return {canonicalize_name(r.name): r for r in map(Requirement, wanted)}


def pinned(text: str) -> dict[str, tuple[str, int, list[str]]]:
    """name: (version, how many hashes, what the lock says it is there for)."""
    found: dict[str, tuple[str, int, list[str]]] = {}
    name = ""
    for line in text.splitlines():
        if match := PIN.match(line):
            name = canonicalize_name(match[1])
            found[name] = (match[2], 0, [])
        elif name and line.strip().startswith("--hash=sha256:"):
            version, hashes, via = found[name]
            found[name] = (version, hashes + 1, via)
        elif name and line.strip().startswith("#"):
            said = line.strip().lstrip("# ").removeprefix("via").strip()
            if said:
                found[name][2].append(said)
    return found


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_the_lock_pins_what_pyproject_asks_for(lock: str) -> None:
    text = (REPO / "deploy" / lock).read_text()
    pins = pinned(text)
    wanted = asked(LOCKS[lock])
    stale = []
    for name, requirement in wanted.items():
        if name not in pins:
            stale.append(f"{requirement} is not pinned")
        elif not requirement.specifier.contains(pins[name][0], prereleases=True):
            stale.append(f"{requirement} but {name}=={pins[name][0]} is pinned")
    for name, (version, _, via) in pins.items():
        only_ours = via and all(v.startswith("lightgrep") for v in via)
        if only_ours and name not in wanted:
            stale.append(f"{name}=={version} is pinned for lightgrep, which no longer asks for it")
    assert not stale, f"deploy/{lock} is stale ({'; '.join(stale)}): {RENEW}"
    unhashed = [name for name, (_, hashes, _) in pins.items() if not hashes]
    assert not unhashed, f"deploy/{lock} has no sha256 for {unhashed}: {RENEW}"


def test_the_image_installs_from_the_lock_files() -> None:
    """The Dockerfile installs from them, checking hashes, and .dockerignore lets them in."""
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "--require-hashes" in dockerfile
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    for lock in LOCKS:
        assert f"deploy/{lock}" in dockerfile and f"!deploy/{lock}" in ignore
