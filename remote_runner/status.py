"""``status.json``: the run's state, written atomically (temp file, fsync, rename)."""
import json
import os
import tempfile
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
    atomic_write(os.path.join(run_dir, STATUS), json.dumps(status, indent=1, sort_keys=True).encode("utf-8"))
    return status


def atomic_write(path: str, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` so that a reader sees the old or the new file, never a part.

    A temp file beside it, fsync, chmod, rename.  (The app writes its own files with it too.)
    """
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
