"""An exclusive lock beside a file the app rewrites, for read-modify-write across processes.

Several ``ddpgui`` processes (the app and CLI commands, or ten ``hosts add`` at once) may change one
file; each takes this lock, reads the file again under it, applies its change and replaces the file
atomically, so no change is lost.  ``fcntl.flock`` on ``NAME.lock`` (the file itself is replaced by
a rename, so it cannot carry the lock); the kernel drops the lock when the process dies.
"""
from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (blocks until other holders are done)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
