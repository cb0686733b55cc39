"""``status.json``: the run's state, written atomically (temp file, fsync, rename)."""
import json
import os
import time
from typing import Optional

STATUS = "status.json"
CONFIG = "config.json"

#: States a run passes through; the last three are final.
STATES = ("created", "starting", "running", "finished", "failed", "stopped")
FINAL_STATES = ("finished", "failed", "stopped")


def write_status(run_dir: str, **fields: object) -> dict:
    """Merge ``fields`` into status.json and replace it atomically; returns the new status."""
    status = read_status(run_dir) or {"schema": 1}
    status.update(fields)
    status["updated_at"] = time.time()
    path = os.path.join(run_dir, STATUS)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(status, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return status


def read_status(run_dir: str) -> Optional[dict]:
    """The run's status, or None when the run has not written one yet."""
    try:
        with open(os.path.join(run_dir, STATUS), encoding="utf-8") as fh:
            return json.load(fh)
    except (FileNotFoundError, ValueError):
        return None


def pid_alive(pid: Optional[int]) -> bool:
    """Whether a process with this pid exists (and is not a zombie) on this host."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True
