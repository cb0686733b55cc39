"""What a failure of the run store's SQLite file means to the user: one translation for every store operation.

Every public :class:`~ddpgui.core.store.run_store.RunStore` method runs inside :func:`translated`, so a
SQLite error, at opening or later (a damaged page met by ``show``, a full disk met by ``follow``), becomes
one :class:`StoreFileError` that names the file, says what is wrong and what to do, never a traceback.
"""
from __future__ import annotations

import os
import shlex
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from remote_runner.fsutil import free_bytes

from .records import StoreCorruptError, StoreFileError, StoreFullError, StoreReadOnlyError


class DamagedBlock(ValueError):
    """A block payload that cannot be decoded (bytes changed under SQLite's page checks)."""


def corrupt_error(path: Path, what: object) -> StoreCorruptError:
    """The damaged store file, and the two ways back: SQLite's own recovery, or the runs on the hosts."""
    broken = path.with_name(path.name + ".broken")
    return StoreCorruptError(
        f"the run store {path} cannot be read ({what})",
        f"move it aside (for example rename it to {broken.name}); then either get back what it still holds with "
        f"`sqlite3 {shlex.quote(str(broken))} .recover | sqlite3 {shlex.quote(str(path))}`, or start ddpgui again "
        f"(a new, empty store is made) and take back the runs on your hosts, every point, with `ddpgui adopt HOST`")


def empty_error(path: Path) -> StoreCorruptError:
    """A store file of 0 bytes: a store is never empty once made, so its runs were lost here, not on the hosts."""
    return StoreCorruptError(
        f"the run store {path} is an empty file (0 bytes): the runs it held are gone from this computer",
        f"remove it (rm {shlex.quote(str(path))}), then take back the runs on your hosts, every point, with `ddpgui adopt HOST`")


def full_error(path: Path) -> StoreFullError:
    free = free_bytes(str(path.parent))
    return StoreFullError(
        f"the disk of the run store is full ({path}, {'?' if free is None else free} bytes free)",
        "free some space on that disk: following goes on by itself from where it stopped, nothing is lost (the "
        "records wait on the hosts); or set DDPGUI_DATA_DIR to a folder on another disk")


def read_only_reason(path: Path) -> str | None:
    """Why the store cannot be written here ("a read-only file system", ...), or None when it can."""
    folder = path.parent
    try:
        if hasattr(os, "statvfs") and os.statvfs(folder).f_flag & os.ST_RDONLY:  # no statvfs on Windows
            return f"its folder {folder} is on a read-only file system"
    except OSError:
        return None
    if not os.access(folder, os.W_OK):
        return f"its folder {folder} is read-only"
    if path.exists() and not os.access(path, os.W_OK):
        return "the file is read-only"
    return None


def read_only_error(path: Path, reason: str) -> StoreReadOnlyError:
    return StoreReadOnlyError(
        f"the run store {path} cannot be written: {reason}",
        "make it writable (or mount it read-write), or set DDPGUI_DATA_DIR to a folder you can write")


def store_error(path: Path, exc: BaseException) -> StoreFileError:
    """The :class:`StoreError` to raise for ``exc``, a failure of the store file at ``path``."""
    if isinstance(exc, DamagedBlock):
        return corrupt_error(path, exc)
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text or "not a database" in text:
        return corrupt_error(path, exc)
    if name.startswith("SQLITE_FULL") or (name.startswith("SQLITE_IOERR") and free_bytes(str(path.parent)) == 0):
        return full_error(path)
    reason = read_only_reason(path) if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_IOERR",
                                                         "SQLITE_PERM", "SQLITE_AUTH")) else None
    if reason is not None:
        return read_only_error(path, reason)
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return StoreFileError(f"the run store {path} is busy: another ddpgui has held it for too long ({exc})",
                          "try again; if it stays busy, close the other ddpgui windows and commands")
    check = f"sqlite3 {shlex.quote(str(path))} 'PRAGMA integrity_check'"
    return StoreFileError(f"the run store {path} failed: {exc}", f"try again; if it fails again, check the file with `{check}`")


@contextmanager
def translated(path: Path) -> Iterator[None]:
    """Run a store operation: a SQLite failure of the file (or a damaged block) leaves as :func:`store_error`."""
    try:
        yield
    except (sqlite3.Error, DamagedBlock) as exc:
        raise store_error(path, exc) from exc
