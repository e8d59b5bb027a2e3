"""A workspace that knows a secret everywhere it can, and how tests look for it in the files."""

from __future__ import annotations

from pathlib import Path

from memory.workspace import Workspace

SECRET = "Elm Street"


MEMORY_WITH_SECRET = (
    "## User Information\n\n- Name: Ana\n- Lives at 12 elm street, Springfield\n\n"
    "## Preferences\n\n- Likes green tea\n"
)


def all_bytes(root: Path) -> dict[str, bytes]:
    """Every file under `root` (relative name → bytes)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def files_holding(root: Path, phrase: str) -> list[str]:
    needle = phrase.lower().encode()
    return [name for name, data in all_bytes(root).items() if needle in data.lower()]


def fill(workspace: Workspace) -> None:
    """A workspace that knows the secret everywhere it can: memory, versions, history, a
    consolidated and an unconsolidated message of two sessions, a media file."""
    memory = workspace.memory
    memory.write("## User Information\n\n- Name: Ana\n- Moved to Elm Street last week\n")
    memory.write(MEMORY_WITH_SECRET + "- Old note\n")
    memory.write(MEMORY_WITH_SECRET)
    memory.append_history("[2026-01-01 10:00] Ana said she moved to Elm  Street, Springfield.")
    memory.append_history("[2026-01-02 11:00] Ana asked about green tea in Kyoto.")
    memory.append_history("[2026-01-03 12:00][RAW] 1 messages\n[2026-01-03T12:00] USER: ELM street")
    dm_session = workspace.sessions.get("telegram:dm:42")
    for role, text in [
        ("user", "I live on Elm Street now"),
        ("assistant", "Noted, Elm Street!"),
        ("user", "What tea should I try?"),
        ("assistant", "Sencha."),
        ("user", "my friend also lives on ELM STREET"),
        ("assistant", "Nice."),
    ]:
        workspace.sessions.append(dm_session, {"role": role, "content": text})
    workspace.sessions.set_last_consolidated(dm_session, 4)
    group_session = workspace.sessions.get("telegram:group:-100:42")
    workspace.sessions.append(group_session, {"role": "user", "content": "hello group"})
    media = workspace.root / "media"
    media.mkdir()
    (media / "note-elm-street.txt").write_text("a photo caption")
    (media / "caption.txt").write_text("Elm Street at night")
    (media / "tea.txt").write_text("green tea")
