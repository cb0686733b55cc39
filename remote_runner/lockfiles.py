"""Small JSON files and ``flock`` locks of the runner's detached helpers (the queue, the release watcher).

A helper that must run once per folder holds a lock file for its whole life: ``flock`` belongs to the open file,
so the kernel lets go when the process dies and nothing stale is left to clear.  :func:`start_holder` takes the
lock, then starts the helper handing it the open file (``--lock-fd``), so no second one can start meanwhile.

Standard library only; Python 3.9.
"""
import contextlib
import fcntl
import json
import os
import subprocess
from collections.abc import Iterator
from typing import Optional

from .fsutil import atomic_write


@contextlib.contextmanager
def flock(path: str) -> Iterator[int]:
    """Hold an exclusive lock on ``path`` (created when missing) for the block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def write_json(path: str, obj: dict) -> None:
    atomic_write(path, json.dumps(obj, sort_keys=True).encode("utf-8"))


def read_json(path: str) -> Optional[dict]:
    """The JSON object in ``path``; None when it is missing, damaged or not an object."""
    try:
        with open(path, encoding="utf-8") as fh:
            found = json.load(fh)
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def lock_holder(folder: str, lock: str, pid_file: str) -> Optional[int]:
    """The pid of the process holding ``folder/lock`` (-1 when it has not written its pid yet), else None (a stale
    pid file counts for nothing)."""
    fd = os.open(os.path.join(folder, lock), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                with open(os.path.join(folder, pid_file)) as fh:
                    return int(fh.read().strip() or 0) or -1
            except (OSError, ValueError):
                return -1
        return None
    finally:
        os.close(fd)


def start_holder(folder: str, lock: str, pid_file: str, log: str, args: list) -> int:
    """Start the runner's ``args`` (a helper that holds ``lock`` for its life) detached, handing it the lock taken
    here; its pid (or the pid of the one that took the lock first)."""
    from .supervisor import runner_env, self_command

    fd = os.open(os.path.join(folder, lock), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # one started after our look
            return lock_holder(folder, lock, pid_file) or -1
        with open(os.path.join(folder, log), "ab") as out:
            proc = subprocess.Popen(self_command() + args + ["--lock-fd", str(fd)], cwd=folder, env=runner_env(),
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True, pass_fds=(fd,))
        with open(os.path.join(folder, pid_file), "w") as fh:
            fh.write("%d\n" % proc.pid)
        return proc.pid
    finally:
        os.close(fd)  # the helper holds the lock now (flock belongs to the open file, which it shares)
