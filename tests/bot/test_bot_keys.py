"""User and session keys from untrusted platform ids."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from bot.keys import session_key, user_key
from memory.workspace import Workspaces


def test_keys_have_the_documented_shape() -> None:
    assert user_key("telegram", 42) == "telegram-42"
    assert session_key("telegram", "group", -1001, 42, "topic", 7) == (
        "telegram:group:-1001:42:topic:7"
    )
    assert session_key("discord", "dm", 8123) == "discord:dm:8123"


def test_an_id_cannot_forge_another_sessions_separators() -> None:
    forged = session_key("telegram", "group", "-1001:42", 7)
    honest = session_key("telegram", "group", -1001, "42:7")
    assert forged != honest
    assert forged.count(":") == honest.count(":") == 3


@given(st.text(), st.text())
def test_distinct_ids_give_distinct_keys(a: str, b: str) -> None:
    if a != b:
        assert user_key("cli", a) != user_key("cli", b)
        assert session_key("cli", "local", a) != session_key("cli", "local", b)


def test_an_id_with_a_lone_surrogate_still_gets_a_workspace(tmp_path: Path) -> None:
    key = user_key("cli", "ada\udc80")
    workspace = Workspaces(tmp_path).get(key)
    workspace.memory.write("## User Information\n- Name: Ada\n")
    assert workspace.root.parent == tmp_path
    assert "Ada" in workspace.memory.read()
