"""The docs say only what is true of this checkout: README.md, ARCHITECTURE.md and docs/*.md.

- every `lightgrep <command>` they show is a command of the real CLI, and every `--option` after
  it is one that command's `--help` lists;
- every `[section] key` is a key of config.example.toml;
- every path of this repository they name (`bot/…`, `tests/…`, `deploy/…`, `Dockerfile`, …)
  exists, and every dotted name of our code (`bot.outbound.Outbound`) is a module, or a name
  found in its module;
- every relative link resolves, to a heading that exists when it names one;
- README quotes .ci/run's command unchanged, and README and ARCHITECTURE stay readable in one
  sitting (3,000 and 2,500 words).

A newcomer copies commands and keys from these pages; one that no longer exists costs them an
hour, so a rename that forgets the docs fails here. A guide names what it tells the reader to
create in a comment, `<!-- new: adapters/matrix/, [tools] web_search -->`; those need not exist.
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

REPO = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
PAGES = sorted([REPO / "README.md", REPO / "ARCHITECTURE.md", *(REPO / "docs").glob("*.md")])
WORDS = {"README.md": 3000, "ARCHITECTURE.md": 2500}
GLOBAL_OPTIONS = {"--config": 1, "-v": 0, "--verbose": 0}
TOP_FILES = {
    "Dockerfile",
    "compose.yaml",
    "compose.cluster.yaml",
    "config.example.toml",
    "pyproject.toml",
    "MANIFEST.in",
    "LICENSE",
    "README.md",
    "ARCHITECTURE.md",
}
TOP_FOLDERS = ("bot/", "memory/", "adapters/", "tests/", "bench/", "deploy/", "docs/", ".ci/")
PLACEHOLDER = re.compile(r"[<>*…{}]")


def new_in(text: str) -> set[str]:
    """What a page tells its reader to create (its `<!-- new: … -->` comments)."""
    return {
        item.strip()
        for comment in re.findall(r"<!-- new: (.*?) -->", text, flags=re.S)
        for item in comment.split(",")
    }


def is_new(name: str, new: set[str]) -> bool:
    """`name` (a path, or a dotted module name) is one of `new`, or inside one."""
    path = name if "/" in name else name.replace(".", "/")
    return any(name == n or path == n.rstrip("/") or path.startswith(n) for n in new)


def page_id(path: Path) -> str:
    return str(path.relative_to(REPO))


def code_of(text: str) -> list[str]:
    """The code in a page: each line of a fenced block, and each `inline span` elsewhere."""
    pieces: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            pieces.append(line)
        else:
            pieces.extend(re.findall(r"`([^`]+)`", line))
    return pieces


def prose_of(text: str) -> str:
    """The page without its fenced blocks: a TOML example's `[section]` is no `[section] key`."""
    return re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.M | re.S)


# ---- lightgrep commands -------------------------------------------------------------------


def commands_in(text: str) -> list[tuple[str, list[str]]]:
    """(subcommand, its options) for every `lightgrep …` in the code of a page. Options before
    the subcommand are the global ones; a placeholder (`lightgrep …`) or a word that is not a
    command-shaped name (an image name, `lightgrep.env`) names no command."""
    found = []
    for piece in code_of(text):
        for match in re.finditer(r"(?:^|[\s/])lightgrep((?: +[^\s&|;]+)*)", piece):
            words = _without_globals(match.group(1).split())
            if not words or not re.fullmatch(r"[a-z]+(-[a-z]+)*", words[0]):
                continue
            options = [
                w.split("=")[0] for w in words[1:] if re.fullmatch(r"--?[a-z][\w-]*(=.*)?", w)
            ]
            found.append((words[0], options))
    return found


def _without_globals(words: list[str]) -> list[str]:
    while words and words[0] in GLOBAL_OPTIONS:
        words = words[1 + GLOBAL_OPTIONS[words[0]] :]
    return words


@cache
def help_of(*command: str) -> str:
    """What the real CLI's parser prints for `lightgrep [command] --help`."""
    done = subprocess.run(
        [sys.executable, "-m", "bot", *command, "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert done.returncode == 0, f"lightgrep {' '.join(command)} --help: {done.stderr}"
    return done.stdout


def subcommands() -> set[str]:
    """The COMMAND names `lightgrep --help` lists (one per line, under "positional arguments")."""
    listed = help_of().split("positional arguments:", 1)[1].split("options:", 1)[0]
    return {m.group(1) for m in re.finditer(r"^ {4}([a-z][a-z-]*)\b", listed, flags=re.M)}


def test_every_lightgrep_command_in_the_docs_is_a_real_command() -> None:
    real = subcommands()
    assert {"chat", "run", "doctor", "init"} <= real  # the parser was read
    wrong = []
    for page in PAGES:
        for command, options in commands_in(page.read_text("utf-8")):
            if command not in real:
                wrong.append(f"{page_id(page)}: lightgrep {command} (no such command)")
                continue
            usage = help_of(command)
            wrong += [
                f"{page_id(page)}: lightgrep {command} {option} (not in its --help)"
                for option in options
                if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", usage)
            ]
    assert not wrong, "\n".join(sorted(set(wrong)))


# ---- config keys --------------------------------------------------------------------------


def example_keys() -> dict[str, set[str]]:
    """Each section of config.example.toml with its keys, set or shown commented out."""
    keys: dict[str, set[str]] = {}
    section = ""
    for line in (REPO / "config.example.toml").read_text("utf-8").splitlines():
        if header := re.fullmatch(r"\[([a-z_]+)\]\s*", line):
            section = header.group(1)
            keys[section] = set()
        elif (key := re.match(r"#?\s*([a-z_][a-z0-9_]*)\s*=", line)) and section:
            keys[section].add(key.group(1))
    return keys


def test_every_config_key_in_the_docs_is_in_the_example_config() -> None:
    keys = example_keys()
    assert {"llm", "memory", "telegram"} <= keys.keys() and "model" in keys["llm"]
    wrong = []
    for page in PAGES:
        text = page.read_text("utf-8")
        for section, key in re.findall(r"\[([a-z_]+)\]\s+([a-z_][a-z0-9_]*)\b", prose_of(text)):
            if key not in keys.get(section, ()) and f"[{section}] {key}" not in new_in(text):
                wrong.append(f"{page_id(page)}: [{section}] {key}")
    assert not wrong, "not in config.example.toml:\n" + "\n".join(wrong)


# ---- paths and names ----------------------------------------------------------------------


def paths_in(text: str) -> set[str]:
    """The repository paths a page names in its code: `bot/agent/tools.py`, `deploy/`,
    `Dockerfile`; a placeholder (`media/<sha256>.<ext>`) names none."""
    paths = set()
    for piece in code_of(text):
        for word in piece.split():
            word = word.strip("()[],;:.'\"").split("#")[0]
            if PLACEHOLDER.search(word) or "://" in word:
                continue
            if word.startswith(TOP_FOLDERS) or word in TOP_FILES:
                paths.add(word.removeprefix("./"))
    return paths


def dotted_names_in(text: str) -> set[str]:
    return {
        name
        for piece in code_of(text)
        for name in re.findall(r"(?<![\w./-])((?:bot|memory|adapters)(?:\.[A-Za-z_]\w*)+)", piece)
    }


def resolves(name: str) -> bool:
    """`bot.outbound.Outbound`: the longest prefix that is a module (a file or a package), and
    each name after it found in that module's source."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:cut])
        for source in (base.with_suffix(".py"), base / "__init__.py"):
            if source.is_file():
                text = source.read_text("utf-8")
                return all(re.search(rf"\b{re.escape(p)}\b", text) for p in parts[cut:])
    return False


def test_every_path_and_module_the_docs_name_exists() -> None:
    missing = []
    for page in PAGES:
        text = page.read_text("utf-8")
        new = new_in(text)
        missing += [
            f"{page_id(page)}: {p}"
            for p in sorted(paths_in(text))
            if not (REPO / p).exists() and not is_new(p, new)
        ]
        missing += [
            f"{page_id(page)}: {n}"
            for n in sorted(dotted_names_in(text))
            if not resolves(n) and not is_new(n, new)
        ]
    assert not missing, "named but not in the repository:\n" + "\n".join(missing)


# ---- links --------------------------------------------------------------------------------


def anchors(page: Path) -> set[str]:
    """GitHub's ids for a page's headings: lower case, punctuation gone, spaces to hyphens."""
    ids = set()
    for heading in re.findall(r"^#+ +(.+?)\s*$", prose_of(page.read_text("utf-8")), flags=re.M):
        ids.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return ids


def test_every_link_in_the_docs_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", prose_of(page.read_text("utf-8"))):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            goal = (page.parent / file).resolve() if file else page
            if not goal.exists():
                broken.append(f"{page_id(page)}: {target} (no such file)")
            elif anchor and goal.suffix == ".md" and anchor not in anchors(goal):
                broken.append(f"{page_id(page)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_readme_links_every_page_of_docs() -> None:
    readme = (REPO / "README.md").read_text("utf-8")
    unlinked = [
        page.name for page in (REPO / "docs").glob("*.md") if f"(docs/{page.name})" not in readme
    ]
    assert not unlinked, f"docs/ pages the README does not link: {unlinked}"


# ---- the README's promises ----------------------------------------------------------------


def test_the_readme_quotes_the_ci_command_unchanged() -> None:
    ci = (REPO / ".ci" / "run").read_text("utf-8").strip().splitlines()[-1]
    assert ci.startswith("python3 -m venv .venv && ")
    assert ci in (REPO / "README.md").read_text("utf-8").splitlines()


@pytest.mark.parametrize("name", sorted(WORDS))
def test_a_newcomer_can_read_it_in_one_sitting(name: str) -> None:
    words = len((REPO / name).read_text("utf-8").split())
    assert words <= WORDS[name], f"{name}: {words} words, at most {WORDS[name]}"


def test_the_fixed_part_the_docs_quote_is_the_one_sizing_counts() -> None:
    """docs/local-models.md quotes the fixed part of each prompt form (system prompt with an empty
    MEMORY.md, and the tool schemas) as sizing counts it with the default config: a tool added
    or a guide reworded changes it, and the page must say so."""
    from bot.agent.sizing import fixed_tokens
    from bot.config import Config
    from memory.tokens import TokenEstimator

    page = (REPO / "docs" / "local-models.md").read_text("utf-8")
    quoted = {
        form: int(number.replace(",", ""))
        for form, number in re.findall(r"\*(full|compact|none)\* \(~([\d,]+)", page)
    }
    config, estimator = Config(), TokenEstimator()
    assert quoted == {
        "full": fixed_tokens(config, "full", estimator),
        "compact": fixed_tokens(config, "compact", estimator),
        "none": fixed_tokens(config, "none", estimator),
    }


def test_the_form_the_docs_give_a_small_window_is_the_one_sizing_picks() -> None:
    """docs/local-models.md says which prompt form a small llama-cpp-python bot works in. Its
    form is planned when its window is learnt (the first refusal), with the estimate as it is
    then: no answer has yet shown the server's ratio (issue 33: the page said "without tools",
    the bot had the compact form's tools)."""
    from bot.agent.sizing import plan
    from bot.config import Config, LLMConfig

    page = (REPO / "docs" / "local-models.md").read_text("utf-8")
    said = re.findall(r"at ([\d,]+) such a bot works in the\s+\*(full|compact|none)\* form", page)
    assert said, "docs/local-models.md no longer says which form a small window gets"
    for tokens, form in said:
        window = int(tokens.replace(",", ""))
        assert plan(Config(llm=LLMConfig(context_window_tokens=window))).form == form


def test_what_the_code_cites_of_the_docs_exists() -> None:
    """A message or comment that sends the reader to `docs/cluster.md, "Who may do what"` names
    a page that exists, and a heading of it."""
    sources = [
        path
        for folder in ("bot", "adapters", "memory", "tests", "bench", "deploy")
        for path in (REPO / folder).rglob("*")
        if path.is_file() and path.suffix in {"", ".py", ".service", ".conf", ".example"}
    ]
    missing = []
    for path in sources:
        text = path.read_text("utf-8", errors="replace")
        for page, heading in re.findall(r"\b(docs/[\w-]+\.md)(?:,? \"([^\"]+)\")?", text):
            target = REPO / page
            if not target.is_file():
                missing.append(f"{path.relative_to(REPO)}: {page}")
            elif heading and " ".join(heading.lower().split()) not in headings(target):
                missing.append(f'{path.relative_to(REPO)}: {page}, "{heading}"')
    assert not missing, "\n".join(missing)


def headings(page: Path) -> set[str]:
    return {
        h.strip().lower()
        for h in re.findall(r"^#+ +(.+?)\s*$", prose_of(page.read_text("utf-8")), flags=re.M)
    }
