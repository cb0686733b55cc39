"""Remote commands that work whatever the user's login shell is, and whatever its start-up files print.

sshd hands every command to the user's login shell: bash, dash, zsh, fish or tcsh/csh, each with its own
quoting rules, and each reading start-up files (~/.bashrc, ~/.zshenv, config.fish, ~/.cshrc) that may print a
banner on stdout or stderr before the command runs.  :func:`remote_command` gives that shell one line it can
only run one way, and has ``/bin/sh`` print a marker before the command; :class:`AfterMarker` drops what came
before the marker from the command's output (and keeps it, to be shown once in ``hosts test``).
"""
from __future__ import annotations

import shlex
import string

#: Bytes that stand for themselves in :func:`remote_command`'s printf format; every other byte is written as an
#: octal escape: quotes, ``!`` (csh history), newlines (csh ends a command there), ``\\`` (fish's single
#: quotes), ``$``, backquote, ``%`` and anything outside printable ASCII.
_PRINTF_PLAIN = frozenset((string.ascii_letters + string.digits + " _-+=.,/:@^~#&;|<>(){}[]*?").encode())


def remote_command(argv: list[str], marker: str) -> str:
    """The command line that runs ``argv`` under ``/bin/sh`` whatever the login shell is (bash, dash, zsh, fish,
    tcsh/csh), after printing ``marker`` on a line of its own on stdout and on stderr.

    The login shell only reads ``exec /bin/sh -c '...'``: one line, and within the single quotes nothing that
    any of those shells treats specially.  The script itself travels as a printf format of plain characters
    and octal escapes, which sh turns back into ``shlex.join(argv)`` and ``eval``s: the command's own process
    replaces sh, as it replaced the login shell before.
    """
    script = f"echo {marker}; echo {marker} >&2; exec {shlex.join(argv)}".encode()
    escaped = "".join(chr(b) if b in _PRINTF_PLAIN else f"\\{b:03o}" for b in script)
    return f"exec /bin/sh -c 'eval \"$(printf \"{escaped}\")\"'"


class AfterMarker:
    """One output of a remote command started by :func:`remote_command`: the bytes up to the marker line are the
    login's (:attr:`noise`); :meth:`feed` passes on only what follows it."""

    def __init__(self, marker: str):
        self._marker = marker.encode() + b"\n"
        self._before = bytearray()
        self.found = False
        self.noise = b""

    def feed(self, data: bytes) -> bytes:
        """The command's part of ``data`` (b"" while the marker has not come yet)."""
        if self.found:
            return data
        seen = bytes(self._before + data) if self._before else data
        at = seen.find(self._marker)
        if at < 0:
            self._before += data
            return b""
        self.found = True
        self.noise = seen[:at]
        self._before.clear()
        return seen[at + len(self._marker):]

    def end(self) -> bytes:
        """At the end of the output: what never reached a marker (the login shell failed before the command
        started) counts as the command's output, so its error is not lost."""
        rest = bytes(self._before)
        self._before.clear()
        return rest


def login_note(noise: str, limit: int = 200) -> str:
    """What ``hosts test`` and the probe say about a login that prints something before every command."""
    text = " | ".join(line.strip() for line in noise.splitlines() if line.strip())
    if len(text) > limit:
        text = text[:limit] + "…"
    return (f"the host's login prints \"{text}\" before every command: ddpgui skips it (to quiet it, print it only "
            "in interactive shells, e.g. under `[ -t 1 ] &&` in ~/.bashrc or `status is-interactive` in config.fish)")
