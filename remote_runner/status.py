"""``status.json``: the run's state, written atomically (temp file, fsync, rename).

When the host's disk is full the temp file cannot be written: :func:`write_status`
then frees the run's reserve (``.reserve``, written at launch) and tries again,
and as a last resort overwrites status.json in place (its blocks are already
allocated), so a run's end is recorded whatever filled the disk.
"""
import json
import os
import socket
import time
from typing import Optional

from .fsutil import NO_SPACE, atomic_write, overwrite_in_place

STATUS = "status.json"
CONFIG = "config.json"

#: States a run passes through; the last three are final.
STATES = ("created", "starting", "running", "finished", "failed", "stopped")
FINAL_STATES = ("finished", "failed", "stopped")


#: A file of this many bytes is kept in each run directory and deleted when the disk is full, so the
#: run's end can still be written (see :func:`write_status` and ``spools.append_event``).
RESERVE = ".reserve"
RESERVE_BYTES = 256 << 10


def write_status(run_dir: str, **fields: object) -> dict:
    """Merge ``fields`` into status.json and replace it atomically; returns the new status.

    On a full disk: the reserve is freed and the atomic write tried again; then
    status.json is overwritten in place.  Raises OSError only when all fail.
    """
    status = read_status(run_dir) or {"schema": 1}
    status.update(fields)
    status["updated_at"] = time.time()
    path = os.path.join(run_dir, STATUS)
    data = json.dumps(status, indent=1, sort_keys=True).encode("utf-8")
    try:
        atomic_write(path, data)
    except OSError as exc:
        if exc.errno not in NO_SPACE:
            raise
        try:
            if not release_reserve(run_dir):
                raise
            atomic_write(path, data)
        except OSError as again:
            if again.errno not in NO_SPACE:
                raise
            overwrite_in_place(path, data)
    return status


def reserve_space(run_dir: str) -> None:
    """Write the run's reserve file (nothing happens when even that does not fit)."""
    try:
        fd = os.open(os.path.join(run_dir, RESERVE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return
    try:
        os.write(fd, b"\0" * RESERVE_BYTES)
    except OSError:
        pass
    finally:
        os.close(fd)


def release_reserve(run_dir: str) -> bool:
    """Delete the run's reserve file; returns whether there was one (and so space was freed)."""
    try:
        os.unlink(os.path.join(run_dir, RESERVE))
        return True
    except OSError:
        return False


def read_status(run_dir: str) -> Optional[dict]:
    """The run's status, or None when the run has not written one yet."""
    try:
        with open(os.path.join(run_dir, STATUS), encoding="utf-8") as fh:
            return json.load(fh)
    except (FileNotFoundError, ValueError):
        return None


def this_host() -> str:
    """This machine's name, as status.json's ``host`` records it."""
    return socket.gethostname()


def runs_elsewhere(status: Optional[dict]) -> Optional[str]:
    """The host named in ``status`` when it is another machine (a run root shared over NFS), else None.

    A pid in such a status belongs to that machine: it must not be checked or signalled here.
    """
    host = (status or {}).get("host")
    return host if host and host != this_host() else None

