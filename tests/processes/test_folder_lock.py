"""One process per workspaces folder: a second one is refused clearly; a dead holder frees it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory.folder_lock import LOCK_FILE, FolderLock, FolderLockedError
from tests.rigs import REPO

HOLDER = """
import subprocess, sys
from memory.folder_lock import FolderLock
lock = FolderLock(sys.argv[1])
lock.acquire()
# A child that outlives us must not keep the lock.
helper = subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
print(helper.pid, flush=True)
sys.stdin.read()  # hold until told to stop (stdin closed) or killed
"""

CONTENDER = """
import sys
from memory.folder_lock import FolderLock, FolderLockedError
try:
    FolderLock(sys.argv[1]).acquire()
except FolderLockedError as exc:
    print(exc, file=sys.stderr)
    sys.exit(3)
print("acquired")
"""


def python(script: str, folder: Path, **kwargs: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(  # type: ignore[call-overload]
        [sys.executable, "-c", script, str(folder)], env=env, text=True, **kwargs
    )


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path, int]]:
    """Another process holding the lock on tmp_path/workspaces; yields it, the folder and the
    pid of the helper it started."""
    folder = tmp_path / "workspaces"
    proc = python(HOLDER, folder, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    helper_pid = int(proc.stdout.readline())
    try:
        yield proc, folder, helper_pid
    finally:
        for pid in (proc.pid, helper_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=5)


def free_within(folder: Path, seconds: float = 5.0) -> bool:
    """True once the lock can be taken (a killed process's descriptors close a moment later)."""
    deadline = time.monotonic() + seconds
    while True:
        lock = FolderLock(folder)
        try:
            lock.acquire()
        except FolderLockedError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
            continue
        lock.release()
        return True


def test_a_second_process_is_refused_with_the_folder_and_the_holders_pid(
    holder: tuple[subprocess.Popen[str], Path, int],
) -> None:
    proc, folder, _ = holder
    with pytest.raises(FolderLockedError) as caught:
        FolderLock(folder).acquire()
    message = str(caught.value)
    assert str(folder.resolve()) in message and f"process {proc.pid}" in message
    assert "workspaces_dir" in message  # says what to do about it
    assert caught.value.pid == proc.pid


def test_the_lock_is_free_after_the_holder_exits(
    holder: tuple[subprocess.Popen[str], Path, int],
) -> None:
    proc, folder, _ = holder
    proc.communicate("", timeout=5)  # closes stdin: the holder exits normally
    assert proc.returncode == 0
    assert free_within(folder)


def test_the_lock_is_free_after_the_holder_is_killed_even_with_a_live_child(
    holder: tuple[subprocess.Popen[str], Path, int],
) -> None:
    proc, folder, helper_pid = holder
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=5)
    os.kill(helper_pid, 0)  # the helper it started is still running…
    assert free_within(folder)  # …and does not hold the lock
    assert (folder / LOCK_FILE).exists()  # the file stays; a stale file is harmless


def test_while_this_process_holds_it_another_process_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "workspaces"
    with FolderLock(folder):
        refused = python(CONTENDER, folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = refused.communicate(timeout=10)
        assert refused.returncode == 3, (out, err)
        assert str(folder.resolve()) in err and f"process {os.getpid()}" in err
    after = python(CONTENDER, folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = after.communicate(timeout=10)
    assert after.returncode == 0 and out.strip() == "acquired", err


def test_two_locks_in_one_process_also_exclude_each_other(tmp_path: Path) -> None:
    first, second = FolderLock(tmp_path), FolderLock(tmp_path)
    first.acquire()
    with pytest.raises(FolderLockedError, match=f"process {os.getpid()}"):
        second.acquire()
    first.release()
    second.acquire()
    assert second.locked and not first.locked
    second.release()


def test_context_manager_releases_on_error_and_creates_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "not" / "there" / "yet"
    with pytest.raises(KeyError), FolderLock(folder):
        raise KeyError("boom")
    assert folder.is_dir()
    with FolderLock(folder) as lock:
        assert lock.locked
        assert (folder / LOCK_FILE).read_text().strip() == str(os.getpid())


def test_a_leftover_lock_file_with_garbage_does_not_block(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).write_text("99999999\nnot a pid")
    with FolderLock(tmp_path):
        assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())


def test_an_unwritable_place_gives_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(RuntimeError, match="Cannot lock the workspaces folder"):
        FolderLock(blocker / "workspaces").acquire()
