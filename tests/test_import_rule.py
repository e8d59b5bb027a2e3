"""The import rule of ARCHITECTURE.md, checked on the source: adapters → bot → memory, never back,
and only the CLI knows the Agent (adapters get a Core, command handlers a CommandContext).

Every import counts, also one under `if TYPE_CHECKING:` or inside a function: a type-only import
back up the layers is still a dependency someone will one day make real.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"memory": 0, "bot": 1, "adapters": 2}  # a module may import its own layer or lower ones
AGENT = "bot.agent.agent"
MAY_BUILD_THE_AGENT = {"bot.cli.common"}


def imported(source: str, module: str) -> set[str]:
    """Every module `source` imports (absolute names; relative imports resolved)."""
    package = module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            if base in LAYERS:  # `from bot import agent` imports the module bot.agent.agent
                names.update(f"{base}.{alias.name}" for alias in node.names)
            else:
                names.add(base)
    return names


def violations(sources: dict[str, str]) -> list[str]:
    """ "a imports b" for every import that breaks the rule, given module name → source."""
    found = []
    for module, source in sorted(sources.items()):
        found += [
            f"{module} imports {name}"
            for name in sorted(imported(source, module))
            if _breaks(module, name)
        ]
    return found


def _breaks(module: str, name: str) -> bool:
    upward = LAYERS.get(name.split(".")[0], -1) > LAYERS[module.split(".")[0]]
    return upward or (name == AGENT and module not in MAY_BUILD_THE_AGENT)


def project_sources() -> dict[str, str]:
    sources = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            sources[name] = path.read_text("utf-8")
    return sources


def test_the_project_keeps_the_import_rule() -> None:
    sources = project_sources()
    expected = {"memory.session", "bot.agent.agent", "bot.commands.registry", "adapters.telegram"}
    assert expected <= set(sources)
    assert violations(sources) == []


def test_the_check_spots_every_kind_of_breach() -> None:
    sources = {
        "memory.store": "from bot.config import Config\n",
        "memory.session": "import adapters.discord\n",
        "bot.commands.registry": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from bot.agent.agent import Agent\n",
        "bot.platform": "def f():\n    from adapters import telegram\n",
        "bot.formatting": "from .agent import agent\n",
        "adapters.terminal": "from bot.agent.agent import Agent\n",
        "bot.cli.common": "from bot.agent.agent import Agent\nimport memory.workspace\n",
        "adapters.discord": "from bot.commands.registry import COMMANDS\nimport discord\n",
    }
    assert violations(sources) == [
        "adapters.terminal imports bot.agent.agent",
        "bot.commands.registry imports bot.agent.agent",
        "bot.formatting imports bot.agent.agent",
        "bot.platform imports adapters.telegram",
        "memory.session imports adapters.discord",
        "memory.store imports bot.config",
    ]
