"""SSH hosts as targets: the Target primitives on top of one :class:`~ddpgui.core.ssh.connection.SSHConnection`.

Files go over SFTP, or over exec channels where the host offers none (:mod:`ddpgui.core.ssh.files`).
"""
from __future__ import annotations

import posixpath
from collections.abc import Callable

import paramiko

from ..hosts import HostProfile
from ..ssh import files as ssh_files
from ..ssh.connection import ChannelStream, SFTPUnavailable, SSHConnection
from ..ssh.shell import login_note
from .base import CommandResult, Stream, Target, TargetError

__all__ = ["SSHTarget"]


class SSHTarget(Target):
    """A host profile reached over SSH; behaves like :class:`~ddpgui.core.targets.local.LocalTarget`."""

    def __init__(self, profile: HostProfile, connection: SSHConnection):
        self.profile = profile
        self.name = profile.name
        self.connection = connection
        self._home: str | None = None
        self._root: str | None = None

    def exec(self, argv: list[str], stdin: bytes | None = None, timeout: float | None = 60.0) -> CommandResult:
        return self.connection.run(argv, stdin=stdin, timeout=timeout)

    def stream(self, argv: list[str]) -> Stream:
        return ChannelStream(self.connection.start(argv), self.connection)

    def home(self) -> str:
        """$HOME on the host (asked once through a quoted command, then cached)."""
        if self._home is None:
            result = self.exec(["sh", "-c", 'printf "%s" "$HOME"'], timeout=30)
            home = result.stdout.decode("utf-8", "replace")
            if result.rc != 0 or not home.startswith("/"):
                raise TargetError(f"cannot find the home directory on {self.name}",
                                  "use absolute paths for the run root and python in the host profile",
                                  field="run_root")
            self._home = home
        return self._home

    def _expand(self, path: str) -> str:
        if path == "~" or path.startswith("~/"):
            return posixpath.join(self.home(), path[2:]) if path != "~" else self.home()
        return path

    @property
    def python(self) -> str:
        """The profile's interpreter, ``~/`` expanded on the host (quoted argv gets no shell expansion)."""
        return self._expand(self.profile.python)

    def run_root(self) -> str:
        """The profile's run root with ``~`` expanded on the host."""
        if self._root is None:
            self._root = posixpath.normpath(self._expand(self.profile.run_root))
        return self._root

    # ---- files: SFTP, or exec channels where the host offers none (ssh_files) -------------------
    def _file_call(self, what: str, over_sftp: Callable[[paramiko.SFTPClient], object],
                   over_exec: Callable[[], object]) -> object:
        if self.connection.sftp_offered is not False:
            try:
                return self.connection.sftp_call(what, over_sftp)
            except SFTPUnavailable:
                pass
        return over_exec()

    def write_file(self, path: str, data: bytes, mode: int = 0o600) -> None:
        self._file_call(f"writing {path}", lambda sftp: ssh_files.sftp_write(sftp, path, data, mode),
                        lambda: ssh_files.exec_write(self, [(path, data, mode)]))

    def write_files(self, files: list[tuple[str, bytes, int]], written: Callable[[int], None] | None = None) -> None:
        """Over SFTP one by one; without SFTP all in one exec channel (one round trip, not one per file)."""
        if not files or self.connection.check_sftp():
            return super().write_files(files, written)
        ssh_files.exec_write(self, files, parents=True)
        for i in range(len(files)):
            if written:
                written(i)

    def read_file(self, path: str) -> bytes:
        return self._file_call(f"reading {path}", lambda sftp: ssh_files.sftp_read(sftp, path),
                               lambda: ssh_files.exec_read(self, path))

    def makedirs(self, path: str, mode: int = 0o700) -> None:
        self._file_call(f"creating {path}", lambda sftp: ssh_files.sftp_makedirs(sftp, path, mode),
                        lambda: ssh_files.exec_makedirs(self, path, mode))

    def probe(self) -> dict:
        """The runner's probe report, with a note when file transfers go over exec channels and one when the
        host's login prints something before every command."""
        report = super().probe()
        notes = [ssh_files.NO_SFTP_NOTE] if not self.connection.check_sftp() else []
        if self.connection.login_noise:
            notes.append(login_note(self.connection.login_noise))
        if notes:
            report["notes"] = [*(report.get("notes") or []), *notes]
        return report

    def close(self) -> None:
        self.connection.close()
