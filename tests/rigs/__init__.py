"""The shared rigs of the tests: fakes of what lies outside the project (fakes/), helpers that
build the real parts (agent, cli, cluster …) and the fixtures every test folder shares
(registered by tests/conftest.py). Test files import from here, never from one another."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout: tests/rigs/__init__.py → ../..
