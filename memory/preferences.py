"""A person's own choices about how the bot treats their memory (e.g. shown in group chats).

One small JSON object per workspace, replaced atomically, so a crash leaves the old choices or
the new ones. An unreadable file counts as "no choice made": the defaults are the safe ones.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from memory.atomic import atomic_write_text
from memory.safefs import make_private_dir, read_bytes

log = logging.getLogger(__name__)

PREFERENCES_FILE = "preferences.json"
MEMORY_IN_GROUPS = "memory_in_groups"
TIMEZONE = "timezone"  # the IANA zone of the person's reminders (/timezone)
VOICE = "voice"  # whether answers are also spoken: "off", "auto" or "always" (/voice)
MODEL = "model"  # the model asked first for the person's answers (/model)


class Preferences:
    def __init__(self, workspace_root: Path) -> None:
        self.path = Path(workspace_root) / PREFERENCES_FILE
        self._chosen: dict[str, Any] | None = None  # read once: this process is the only writer

    def get(self, name: str) -> Any:
        """The value chosen for `name`, None when no choice was made."""
        return self._load().get(name)

    def set(self, name: str, value: Any) -> None:
        """Record a choice (None forgets it)."""
        chosen = dict(self._load())
        if value is None:
            chosen.pop(name, None)
        else:
            chosen[name] = value
        make_private_dir(self.path.parent)
        atomic_write_text(self.path, json.dumps(chosen, indent=1, sort_keys=True) + "\n")
        self._chosen = chosen

    def _load(self) -> dict[str, Any]:
        if self._chosen is None:
            self._chosen = self._read()
        return self._chosen

    def _read(self) -> dict[str, Any]:
        try:
            value = json.loads(read_bytes(self.path))
        except FileNotFoundError:
            return {}
        except ValueError:
            log.warning("%s is not a JSON object; using the defaults", self.path)
            return {}
        return value if isinstance(value, dict) else {}
