"""The import rules of ARCHITECTURE.md, checked on the source:

- layers: adapters → bot → memory, never back;
- only the CLI's factory (bot/cli/core.py) builds the Agent (adapters get a Core, command handlers
  a CommandContext);
- a package's face: code outside a subpackage imports only the package itself or the modules its
  `__init__` names in `__all__`;
- no import circle anywhere in bot/, adapters/ and memory/;
- a platform's face (adapters/<platform>/__init__.py) imports neither its adapter nor any SDK
  when it is loaded, so that loading the configuration stays light;
- no test file (tests/**/test_*.py) is imported by another module of tests/: what tests share
  lives in tests/rigs/, so a newcomer finds a helper there and a test file stays one story.

Every import counts, also one under `if TYPE_CHECKING:` or inside a function: a type-only or lazy
import is still a dependency someone will one day make real.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.rigs import REPO as ROOT

LAYERS = {"memory": 0, "bot": 1, "adapters": 2}  # a module may import its own layer or lower ones
AGENT = "bot.agent.agent"
MAY_BUILD_THE_AGENT = {"bot.cli.core"}
PLATFORM_SDKS = {"telegram", "discord", "prompt_toolkit", "rich", "aiohttp", "asyncio"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_sources() -> dict[str, str]:
    sources = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            sources[module_name(path)] = path.read_text("utf-8")
    return sources


def packages_of(sources: dict[str, str]) -> set[str]:
    return {name for name in sources if any(other.startswith(name + ".") for other in sources)}


def imported(
    source: str, module: str, known: set[str] | None = None, *, top_level_only: bool = False
) -> set[str]:
    """Every module `source` imports (absolute names; relative imports resolved). `from p import
    x` imports the module p.x when p.x is a module (of `known`, or a top-level layer's)."""
    is_package = known is not None and any(k.startswith(module + ".") for k in known)
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source)
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if base in LAYERS or (known is not None and full in known):
                    names.add(full)
                else:
                    names.add(base)
    return names


def violations(sources: dict[str, str]) -> list[str]:
    """ "a imports b" for every import that breaks a rule, given module name → source."""
    known = set(sources)
    faces = {p: _public(sources[p]) for p in packages_of(sources)}
    found = []
    for module, source in sorted(sources.items()):
        for name in sorted(imported(source, module, known)):
            why = _breaks(module, name, faces)
            if why is not None:
                found.append(f"{module} imports {name}{why}")
    return found


def _public(face_source: str) -> set[str] | None:
    """The names a package's `__init__` lists in `__all__` (None: it declares none)."""
    for node in ast.parse(face_source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return {ast.literal_eval(e) for e in node.value.elts}  # type: ignore[attr-defined]
    return None


def _breaks(module: str, name: str, faces: dict[str, set[str] | None]) -> str | None:
    """None when the import is allowed, else what to add to "a imports b"."""
    if LAYERS.get(name.split(".")[0], -1) > LAYERS[module.split(".")[0]]:
        return ""  # upward: "a imports b" says it all
    if name == AGENT and module not in MAY_BUILD_THE_AGENT:
        return " (only bot.cli.core builds the Agent)"
    parts = name.split(".")
    for depth in range(2, len(parts)):  # each subpackage on the way down, below the layer
        package, inner = ".".join(parts[:depth]), parts[depth]
        if package not in faces or module == package or module.startswith(package + "."):
            continue
        public = faces[package]
        if public is None or inner not in public:
            return f" (not in {package}.__all__)"
    return None


def cycles(sources: dict[str, str]) -> list[list[str]]:
    """Every import circle (strongly connected component of more than one module, or a module
    importing itself), lazy and type-only imports included."""
    known = set(sources)
    graph = {m: sorted(imported(s, m, known) & known - {m}) for m, s in sources.items()}
    selfish = [[m] for m, s in sources.items() if m in imported(s, m, known)]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):  # Tarjan's algorithm, iteratively (no recursion limit)
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            children = graph[node]
            if i < len(children):
                work.append((node, i + 1))
                child = children[i]
                if child not in index:
                    work.append((child, 0))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found + selfish)


def heavy_faces(sources: dict[str, str]) -> list[str]:
    """A platform face that imports its adapter or an SDK when loaded."""
    found = []
    for module, source in sorted(sources.items()):
        parts = module.split(".")
        if parts[0] != "adapters" or len(parts) != 2 or module not in packages_of(sources):
            continue
        for name in sorted(imported(source, module, set(sources), top_level_only=True)):
            if name.split(".")[0] in PLATFORM_SDKS or name == f"{module}.adapter":
                found.append(f"{module} loads {name}")
    return found


def suite_sources() -> dict[str, str]:
    """Every module of tests/ (test files, rigs, conftest), by module name."""
    return {module_name(p): p.read_text("utf-8") for p in sorted((ROOT / "tests").rglob("*.py"))}


def imported_test_files(sources: dict[str, str]) -> list[str]:
    """ "a imports b" for every module of tests/ that imports a test file (test_*.py)."""
    known = set(sources)
    return [
        f"{module} imports {name}"
        for module, source in sorted(sources.items())
        for name in sorted(imported(source, module, known))
        if name.rpartition(".")[2].startswith("test_")
    ]


def test_the_project_keeps_the_import_rules() -> None:
    sources = project_sources()
    expected = {"memory.session", "bot.agent.agent", "bot.commands.registry"}
    assert expected | {"adapters.telegram.adapter", "adapters.telegram"} <= set(sources)
    assert violations(sources) == []


def test_no_import_circle() -> None:
    assert cycles(project_sources()) == []


def test_platform_faces_are_light() -> None:
    sources = project_sources()
    assert {"adapters.telegram", "adapters.discord", "adapters.terminal"} <= packages_of(sources)
    assert heavy_faces(sources) == []


def test_no_folder_is_crowded() -> None:
    """The tree shows the architecture: no folder holds more than ~15 modules directly."""
    for package in LAYERS:
        for folder in [ROOT / package, *(p for p in (ROOT / package).rglob("*") if p.is_dir())]:
            modules = [p for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")]
            assert len(modules) <= 16, f"{folder.relative_to(ROOT)}: {len(modules)} modules"


def test_no_test_file_imports_another() -> None:
    sources = suite_sources()
    assert {"tests.rigs.cli", "tests.processes.test_cli", "tests.conftest"} <= set(sources)
    assert imported_test_files(sources) == []


def test_the_checks_spot_every_kind_of_breach() -> None:
    sources = {
        "memory.store": "from bot.config import Config\n",
        "memory.session": "import adapters.discord\n",
        "bot.commands": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from bot.agent.agent import Agent\n",
        "bot.platform": "def f():\n    from adapters import telegram\n",
        "bot.formatting": "from .agent import agent\n",
        "bot.agent": '__all__ = ["agent"]\n',
        "bot.agent.agent": "from bot.agent import prompt\n",
        "bot.agent.prompt": "",
        "bot.tasks": "from bot.agent.prompt import build\n",
        "adapters.terminal": "from bot.agent.agent import Agent\n",
        "bot.cli.core": "from bot.agent.agent import Agent\nimport memory.workspace\n",
        "bot.cli.main": "from bot.agent.agent import Agent\n",
        "adapters.discord": "from bot.commands import COMMANDS\nimport discord\n",
    }
    assert violations(sources) == [
        "adapters.terminal imports bot.agent.agent (only bot.cli.core builds the Agent)",
        "bot.cli.main imports bot.agent.agent (only bot.cli.core builds the Agent)",
        "bot.commands imports bot.agent.agent (only bot.cli.core builds the Agent)",
        "bot.formatting imports bot.agent.agent (only bot.cli.core builds the Agent)",
        "bot.platform imports adapters.telegram",
        "bot.tasks imports bot.agent.prompt (not in bot.agent.__all__)",
        "memory.session imports adapters.discord",
        "memory.store imports bot.config",
    ]
    circle = {
        "bot.a": "def f():\n    from bot import b\n",
        "bot.b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import bot.c\n",
        "bot.c": "from . import a\n",
        "bot.d": "import bot.a\n",
        "bot.e": "import bot.e\n",
    }
    assert cycles(circle) == [["bot.a", "bot.b", "bot.c"], ["bot.e"]]
    faces = {
        "adapters.telegram": "import telegram\ndef create():\n    from . import adapter\n",
        "adapters.telegram.adapter": "",
        "adapters.discord": "from adapters.discord.adapter import X\n",
        "adapters.discord.adapter": "",
        "adapters.terminal": "def create():\n    from adapters.terminal.adapter import T\n",
        "adapters.terminal.adapter": "import prompt_toolkit\n",
    }
    assert heavy_faces(faces) == [
        "adapters.discord loads adapters.discord.adapter",
        "adapters.telegram loads telegram",
    ]
    tests = {
        "tests.rigs.cli": "from tests.processes.test_cli import read_until\n",
        "tests.processes.test_cli": "from tests.rigs.cli import start_run\n",
        "tests.processes.test_link": "def f():\n    from tests.processes import test_cli\n",
        "tests.bot.test_config": "from . import test_limits\nfrom tests.rigs import REPO\n",
        "tests.bot.test_limits": "import tests.memory.test_sessions\n",
        "tests.memory.test_sessions": "from tests.rigs.fakes.openai_server import FakeOpenAI\n",
        "tests.conftest": "from tests.rigs.telegram import make_config\n",
    }
    assert imported_test_files(tests) == [
        "tests.bot.test_config imports tests.bot.test_limits",
        "tests.bot.test_limits imports tests.memory.test_sessions",
        "tests.processes.test_link imports tests.processes.test_cli",
        "tests.rigs.cli imports tests.processes.test_cli",
    ]
