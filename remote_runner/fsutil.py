"""General file and process helpers: atomic replacement, in-place overwrite, full-disk errors and free space,
live pids."""
import errno
import os
import shutil
import tempfile
from typing import Optional

#: The errors of a full disk (or a full quota).
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def free_bytes(path: str) -> Optional[int]:
    """Bytes free for unprivileged users on the filesystem holding ``path`` (or its nearest existing parent);
    None when it cannot be told."""
    path = os.path.abspath(path)
    while True:
        try:
            return shutil.disk_usage(path).free
        except OSError:
            parent = os.path.dirname(path)
            if parent == path:
                return None
            path = parent


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


def overwrite_in_place(path: str, data: bytes) -> None:
    """Write ``data`` over the start of ``path`` and cut it there: needs no new blocks while it is no longer
    than the file's (a reader may see a mix for a moment and reads it again; only for a full disk)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)


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
