"""Host-key verification the way OpenSSH does it.

Keys are looked up in the files shared with OpenSSH (``~/.ssh/known_hosts``,
``/etc/ssh/ssh_known_hosts``; hashed ``|1|`` entries and ``[host]:port`` names
included) and in the app's own ``known_hosts`` in the config dir, where keys
the user accepts are saved.  A key of a known type that differs is refused with
OpenSSH's warning, naming the file and line; there is no override.  An unknown
key is shown to a ``confirm`` callback (a dialog in the app, a prompt in the CLI).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import paramiko

from ..filelock import locked
from ..paths import config_dir
from ..targets.base import TargetError

APP_FILE = "known_hosts"


@dataclass(frozen=True)
class HostKeyInfo:
    """What the user is asked to confirm."""

    host: str
    port: int
    key_type: str
    sha256_fingerprint: str
    #: key types already known for this host (OpenSSH mentions them: a new type is unusual)
    other_known_types: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return known_hosts_name(self.host, self.port)


ConfirmHostKey = Callable[[HostKeyInfo], bool]


class HostKeyChanged(TargetError):
    """The host sent a different key than the one on record: possibly a man-in-the-middle."""


class HostKeyUnknown(TargetError):
    """The key is not on record and nobody could be asked (no confirm callback)."""


class HostKeyRejected(TargetError):
    """The user declined the unknown key."""


@dataclass(frozen=True)
class KnownKey:
    path: Path
    line: int
    key_type: str
    blob: str
    marker: str | None  # None, "@revoked" or "@cert-authority"


def known_hosts_name(host: str, port: int) -> str:
    """How OpenSSH names a host in known_hosts: ``host`` on port 22, else ``[host]:port``."""
    host = host.lower()
    return host if port == 22 else f"[{host}]:{port}"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint (``ssh-keygen -lf``)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _glob(pattern: str, name: str) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name) is not None


def _hashed_match(entry: str, name: str) -> bool:
    parts = entry.split("|")
    if len(parts) != 4 or parts[1] != "1":
        return False
    try:
        salt, wanted = base64.b64decode(parts[2]), base64.b64decode(parts[3])
    except ValueError:
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), wanted)


def _hosts_match(field: str, name: str) -> bool:
    if field.startswith("|"):
        return _hashed_match(field, name)
    matched = False
    for pattern in field.split(","):
        if pattern.startswith("!"):
            if _glob(pattern[1:].lower(), name):
                return False
        elif _glob(pattern.lower(), name):
            matched = True
    return matched


def _rsa_algorithms(key_type: str) -> list[str]:
    return ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"] if key_type == "ssh-rsa" else [key_type]


class KnownHosts:
    """The known-hosts files: OpenSSH's (read only) and the app's own (accepted keys are appended)."""

    def __init__(self, shared_files: list[Path] | None = None, app_file: Path | None = None):
        if shared_files is None:
            shared_files = [Path.home() / ".ssh" / "known_hosts", Path("/etc/ssh/ssh_known_hosts")]
        self.shared_files = [Path(p) for p in shared_files]
        self.app_file = Path(app_file) if app_file else config_dir() / APP_FILE

    def lookup(self, host: str, port: int) -> list[KnownKey]:
        """Every line of every file that names this host, in file order."""
        name = known_hosts_name(host, port)
        found = []
        for path in [*self.shared_files, self.app_file]:
            try:
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue
            for number, line in enumerate(lines, 1):
                fields = line.split()
                if not fields or fields[0].startswith("#"):
                    continue
                marker = fields.pop(0) if fields[0].startswith("@") else None
                if len(fields) < 3 or not _hosts_match(fields[0], name):
                    continue
                found.append(KnownKey(path, number, fields[1], fields[2], marker))
        return found

    def preferred_algorithms(self, host: str, port: int) -> list[str]:
        """Host-key algorithms to offer first, so a host known by one key type is not asked for another."""
        out: list[str] = []
        for entry in self.lookup(host, port):
            if entry.marker is None:
                out += [a for a in _rsa_algorithms(entry.key_type) if a not in out]
        return out

    def verify(self, host: str, port: int, key: paramiko.PKey, confirm: ConfirmHostKey | None) -> None:
        """Accept a known key; refuse a changed or revoked one; ask ``confirm`` about an unknown one."""
        key_type, blob = key.get_name(), key.get_base64()
        entries = self.lookup(host, port)
        name = known_hosts_name(host, port)
        for entry in entries:
            if entry.marker == "@revoked" and entry.blob == blob:
                raise HostKeyChanged(f"the host key of {name} ({key_type} {fingerprint(key)}) is marked as "
                                     f"revoked in {entry.path}:{entry.line}", "ddpgui refuses to connect to it")
        same_type = [e for e in entries if e.marker is None and e.key_type == key_type]
        if any(e.blob == blob for e in same_type):
            return
        if same_type:
            raise HostKeyChanged(_changed_warning(name, key, same_type[0]), _changed_hint(name, same_type[0]),
                                 field="hostname")
        info = HostKeyInfo(host, port, key_type, fingerprint(key),
                           tuple(sorted({e.key_type for e in entries if e.marker is None})))
        if confirm is None:
            raise HostKeyUnknown(f"the {key_type} host key of {name} ({info.sha256_fingerprint}) is not known",
                                 "connect once where you can confirm it, or add it to ~/.ssh/known_hosts "
                                 "after checking its fingerprint")
        if not confirm(info):
            raise HostKeyRejected(f"the host key of {name} ({info.sha256_fingerprint}) was not accepted")
        self.add(host, port, key)

    def add(self, host: str, port: int, key: paramiko.PKey) -> None:
        """Append ``[host]:port type key`` to the app's known-hosts file (once, under its lock: other
        ddpgui processes may accept keys at the same time)."""
        line = f"{known_hosts_name(host, port)} {key.get_name()} {key.get_base64()}\n"
        with locked(self.app_file):
            try:
                text = self.app_file.read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                text = ""
            if line not in text.splitlines(True):
                fd = os.open(self.app_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                with os.fdopen(fd, "a", encoding="utf-8") as fh:
                    fh.write(("\n" if text and not text.endswith("\n") else "") + line)
            self.app_file.chmod(0o600)


def _changed_warning(name: str, key: paramiko.PKey, entry: KnownKey) -> str:
    kind = entry.key_type.removeprefix("ssh-").split("-")[0].upper()
    return "\n".join([
        "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@",
        "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @",
        "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@",
        "IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!",
        "Someone could be eavesdropping on you right now (man-in-the-middle attack)!",
        "It is also possible that a host key has just been changed.",
        f"The fingerprint for the {kind} key sent by the remote host is",
        f"{fingerprint(key)}.",
        f"Offending {kind} key in {entry.path}:{entry.line}",
        f"Host key for {name} has changed and ddpgui refuses to connect.",
    ])


def _changed_hint(name: str, entry: KnownKey) -> str:
    return (f"if you know the host was reinstalled or its key rotated, remove line {entry.line} of {entry.path} "
            f"(ssh-keygen -R '{name}' -f '{entry.path}') and connect again to confirm the new key")


class ConfirmHostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """paramiko's hook for keys the client holds none of: here, every key (the client holds none).

    Verification is done by :meth:`KnownHosts.verify` against the files, so a changed
    key is reported with its file and line instead of paramiko's ``BadHostKeyException``.
    """

    def __init__(self, known_hosts: KnownHosts, host: str, port: int, confirm: ConfirmHostKey | None):
        self.known_hosts = known_hosts
        self.host = host
        self.port = port
        self.confirm = confirm

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        self.known_hosts.verify(self.host, self.port, key, self.confirm)
