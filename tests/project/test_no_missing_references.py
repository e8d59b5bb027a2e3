"""The code cites only what a reader of the repository can open."""

from __future__ import annotations

import re

from tests.rigs import REPO

CITATION = re.compile(r"DESIGN(?:\.md)?\s*§")


def test_no_source_cites_sections_of_a_design_file_that_is_not_in_the_repo() -> None:
    assert not (REPO / "DESIGN.md").exists()
    sources = [
        path
        for folder in ("bot", "adapters", "memory", "tests", "bench")
        for path in (REPO / folder).rglob("*.py")
    ]
    assert len(sources) > 20
    citing = [
        str(path.relative_to(REPO))
        for path in sources
        if CITATION.search(path.read_text("utf-8"))
    ]
    assert citing == []
