"""A real, small tmpfs for tests of a host whose disk fills up (root only: mount needs it)."""
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

#: A script-mode entry that prints one metric line, then writes until the disk is full (and fails on it).
FILL_SCRIPT = """\
import os
print("step 1 loss 1.0", flush=True)
with open(os.path.join(os.environ.get("FILL_DIR", "."), "big.bin"), "wb") as fh:
    while True:
        fh.write(b"\\0" * 65536)
        fh.flush()
"""


@contextmanager
def small_tmpfs(path: Path, size: str = "6m"):
    """Mount a tmpfs of ``size`` at ``path`` (world-writable, for a throwaway SSH account) and unmount it after."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("SKIPPED LOUDLY: the disk-full tests mount a small tmpfs, which needs root (CI runs as root)")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"SKIPPED LOUDLY: mounting a tmpfs is not permitted here ({mounted.stderr.strip()}); "
                    "the disk-full tests need it (a container without CAP_SYS_ADMIN?)")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)  # a process still holds a file there


def fill(path: Path) -> None:
    """Fill the filesystem of ``path`` to the last byte (dd ends with "No space left on device")."""
    subprocess.run(["dd", "if=/dev/zero", f"of={path / 'filler.bin'}", "bs=64k"], capture_output=True)
    try:
        with open(path / "filler-tail.bin", "wb") as fh:  # the last partial block
            while True:
                fh.write(b"\0" * 512)
                fh.flush()
    except OSError:
        pass


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
