"""The media's own threads: hashing and writing what people send, and encoding pictures for the
model, off the event loop.

WHY: never in the default executor, which /recall, /forget, /export, /wipe, the tools and
memory writes share: a person's large upload, or the pictures of a long conversation, must not
make anyone else wait for those. (PDFs are not read here at all: bot/media/sandbox.py.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from memory.threads import in_thread

T = TypeVar("T")

THREADS = 2
_pool: ThreadPoolExecutor | None = None
_made = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _made:
        if _pool is None:
            _pool = ThreadPoolExecutor(THREADS, thread_name_prefix="lightgrep-media")
        return _pool


async def off_loop(work: Callable[[], T]) -> T:
    """`work()` in a media thread; a cancel of the caller takes effect once it has finished
    (memory.threads.in_thread: a file being written is never left to a thread alone)."""
    return await in_thread(work, _executor())
