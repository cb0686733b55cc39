""""This computer": the runner through subprocesses, no SSH."""
from __future__ import annotations

import os
import select
import subprocess
import sys

from remote_runner.fsutil import atomic_write
from remote_runner.proctree import end_process

from ..paths import data_dir
from .base import CommandResult, Stream, Target

LOCAL_NAME = "local"


class _ProcessStream(Stream):
    def __init__(self, argv: list[str]):
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, start_new_session=True)
        self._fd = self._proc.stdout.fileno()

    def read(self, timeout: float) -> bytes:
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            raise TimeoutError
        return os.read(self._fd, 1 << 20)

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        end_process(self._proc, 5.0)
        self._proc.stdout.close()


class LocalTarget(Target):
    """Runs on this computer with ``python`` (default: the app's own interpreter)."""

    sees_local_files = True

    def __init__(self, name: str = LOCAL_NAME, python: str | None = None, run_root: str | None = None):
        self.name = name
        self.python = python or sys.executable
        self._root = os.path.abspath(os.path.expanduser(run_root)) if run_root else str(data_dir() / "local")

    def run_root(self) -> str:
        return self._root

    def exec(self, argv: list[str], stdin: bytes | None = None, timeout: float | None = 60.0) -> CommandResult:
        try:
            # Its own session: the terminal's Ctrl-C (sent to the whole foreground process group) interrupts the
            # CLI, which then detaches, and must not kill a launch half-way in this child.
            proc = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout, start_new_session=True)
        except FileNotFoundError as exc:
            return CommandResult(127, b"", str(exc).encode())
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)

    def stream(self, argv: list[str]) -> Stream:
        return _ProcessStream(argv)

    def write_file(self, path: str, data: bytes, mode: int = 0o600) -> None:
        atomic_write(path, data, mode)

    def read_file(self, path: str) -> bytes:
        with open(path, "rb") as fh:
            return fh.read()

    def makedirs(self, path: str, mode: int = 0o700) -> None:
        os.makedirs(path, mode=mode, exist_ok=True)
        os.chmod(path, mode)
