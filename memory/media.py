"""Pictures, voice messages and files a person sent, kept once per workspace by content hash.

`media/<sha256>.<ext>`: the same picture sent twice is one file. A transcript never holds the
bytes (appends stay small and the JSONL stays greppable): the message's content holds a
reference part instead, e.g. `{"type": "image_ref", "sha256": …, "ext": "jpg", "mime":
"image/jpeg", "name": "photo.jpg", "caption": …}`. The prompt builder turns image references
back into pictures for the model (bot/agent/prompt.py); `ref_text` is how a reference reads as text,
for older pictures and for consolidation. A reference is untrusted on the way back (the file
may have been edited by hand), so it can only ever name a file inside media/.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
from pathlib import Path
from typing import Any

from memory.atomic import atomic_write_text
from memory.safefs import LinkRefusedError, make_private_dir, read_bytes
from memory.text import plain_name

MEDIA_DIR = "media"
IMAGE_REF = "image_ref"
AUDIO_REF = "audio_ref"
FILE_REF = "file_ref"
REF_TYPES = (IMAGE_REF, AUDIO_REF, FILE_REF)
_SHA256 = re.compile(r"[0-9a-f]{64}")
_EXT = re.compile(r"[a-z0-9]{1,8}")


class MediaStore:
    """The media/ folder of one workspace."""

    def __init__(self, root: Path) -> None:
        self.folder = Path(root) / MEDIA_DIR

    def put(self, data: bytes, ext: str, digest: str | None = None) -> str:
        """Keep `data` (atomically, once: a file of that hash is already the same bytes);
        returns its sha256 (`digest`: already computed by the caller, `content_hash`)."""
        digest = digest or content_hash(data)
        ext = ext if _EXT.fullmatch(ext) else "bin"
        path = self.folder / f"{digest}.{ext}"
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            info = None
        if info is not None and stat.S_ISLNK(info.st_mode):
            raise LinkRefusedError(path)
        if info is not None and stat.S_ISREG(info.st_mode) and info.st_size == len(data):
            return digest
        make_private_dir(self.folder)
        atomic_write_text(path, data)
        return digest

    def read(self, ref: dict[str, Any]) -> bytes | None:
        """The bytes a reference names; None if it names nothing (removed, or not a valid
        reference). Never through a link."""
        name = file_name(ref)
        if name is None:
            return None
        with contextlib.suppress(FileNotFoundError, NotADirectoryError, LinkRefusedError):
            return read_bytes(self.folder / name)
        return None


def content_hash(data: bytes) -> str:
    """The sha256 that names `data` in media/."""
    return hashlib.sha256(data).hexdigest()


def media_ref(
    kind: str, sha256: str, ext: str, mime: str, name: str, **extra: Any
) -> dict[str, Any]:
    """A reference part for a message's content; `extra` (caption, seconds) only when set."""
    part = {"type": kind, "sha256": sha256, "ext": ext, "mime": mime, "name": name}
    part.update({key: value for key, value in extra.items() if value not in (None, "")})
    return part


def is_ref(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") in REF_TYPES


def file_name(ref: dict[str, Any]) -> str | None:
    """"<sha256>.<ext>" of a valid reference, else None (it can name nothing outside media/)."""
    sha, ext = ref.get("sha256"), ref.get("ext")
    if not (isinstance(sha, str) and isinstance(ext, str)):
        return None
    if not (_SHA256.fullmatch(sha) and _EXT.fullmatch(ext)):
        return None
    return f"{sha}.{ext}"


def ref_text(part: dict[str, Any]) -> str:
    """How a reference reads as text: a picture as "[image: <caption or file name>]"; audio and
    files as nothing, since their transcript or text is already in the message."""
    if part.get("type") != IMAGE_REF:
        return ""
    label = part.get("caption") or part.get("name") or "picture"
    return f"[image: {plain_name(str(label))}]"


def referenced_files(content: Any) -> set[str]:
    """The media/ file names a message's content refers to."""
    if not isinstance(content, list):
        return set()
    names = (file_name(part) for part in content if is_ref(part))
    return {name for name in names if name is not None}
