"""One lock across the test processes for the steps that change the machine itself.

``make test`` runs the suite on two pytest-xdist workers: each starts its own sshd, Slurm cluster and throwaway
account, but ``useradd``/``chpasswd``/``userdel`` (which lock /etc/passwd and give up after a while), ``apt-get``
(dpkg's lock) and starting ``munged`` (one daemon, one key) must not run in both at once.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK = Path(tempfile.gettempdir()) / f"ddpgui-tests-system-{os.geteuid()}.lock"


@contextmanager
def system_lock() -> Iterator[None]:
    """Held by one test process at a time (an flock: released by the kernel if the holder dies)."""
    with open(LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
