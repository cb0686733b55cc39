"""Import of ~/.ssh/config: a host profile for every Host alias an OpenSSH config names, following its ``Include``
lines as ssh does, with every file read and every entry skipped said in words.

paramiko's SSHConfig does the look-up (first value wins, tokens, Match) but ignores ``Include``; :func:`read_ssh_config`
follows the Includes itself (ssh_config(5) and OpenSSH's readconf.c: a relative path is under ~/.ssh, ``~`` is the
home folder, glob patterns are read in lexical order, at most 16 deep, a path that matches no file is passed over)
and hands paramiko one flattened text.  An Include inside a Host or Match block applies only under that block's
condition, and a Host line in the included file then only where both hold: such blocks become ``Match`` lines that
join both conditions, and the outer block's header is written again after the included text.
"""
from __future__ import annotations

import glob
import os
import re
import shlex
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from ..ssh.keys import key_is_encrypted
from .profiles import HostError, HostProfile

MAX_INCLUDE_DEPTH = 16  # OpenSSH's READCONF_MAX_DEPTH
_LINE = re.compile(r"(\w+)(?:\s*=\s*|\s+)(.+)")  # as paramiko.SSHConfig.SETTINGS_REGEX reads a line
#: the comment SkyPilot's SSHConfigHelper writes above each node of a cluster in ~/.sky/generated/ssh/CLUSTER
_SKYPILOT_MARK = re.compile(r"#\s*Added by sky \(use `sky stop/down (?P<cluster>[^`\s]+)` to remove\)")
SKYPILOT_SSH_DIR = "~/.sky/generated/ssh"


@dataclass
class ImportReport:
    """What an import read (files), added (profile names) and skipped (with the reason), and notes on files."""

    added: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (Host pattern or Match line, why)
    files: list[str] = field(default_factory=list)  # every config file read, in the order ssh reads them
    notes: list[str] = field(default_factory=list)  # Includes that matched no file, files that could not be read


@dataclass
class HostLine:
    """One pattern of a ``Host`` line: where it is written, the block an Include put it under, its SkyPilot cluster."""

    pattern: str
    where: str  # "~/.ssh/config.d/lab line 3"
    inside: str = ""  # the Host/Match line (and where) of the block its file was included from; "" at top level
    criteria: tuple[str, ...] = ()  # that block's condition as Match criteria
    cluster: str = ""  # the SkyPilot cluster whose generated entry this is
    key_files: list[str] = field(default_factory=list)  # the IdentityFile lines of its own block


@dataclass
class SshConfigFiles:
    """An OpenSSH config with its Includes followed: the paramiko config to look hosts up in, and what was read."""

    config: paramiko.SSHConfig
    hosts: list[HostLine]
    files: list[str]
    notes: list[str]
    matches: list[tuple[str, str]]  # (Match line, where)


def shown_path(path: str | Path) -> str:
    """A path as the user wrote it in a config: under the home folder as ``~/…``."""
    home, text = str(Path.home()), str(path)
    return "~" + text[len(home):] if text == home or text.startswith(home + os.sep) else text


@dataclass(frozen=True)
class _Block:
    header: str | None  # the line that starts it in the flattened text; None: the top of the text (no condition)
    criteria: tuple[str, ...]  # its condition as Match criteria, joined with others when an Include nests it
    label: str = ""  # "Host work (~/.ssh/config line 3)"


_TOP = _Block(None, ())


class _Follower:
    """Reads a config file by file, writing the flattened text for paramiko and noting what it read and passed over."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.header: str | None = None
        self.hosts: list[HostLine] = []
        self.files: list[str] = []
        self.notes: list[str] = []
        self.matches: list[tuple[str, str]] = []

    def read(self, path: Path, block: _Block, depth: int, check_owner: bool) -> None:
        shown = shown_path(path)
        try:
            with open(path, encoding="utf-8", errors="replace") as file:
                text = file.read()
        except IsADirectoryError:
            return  # ssh reads a folder a glob matched as an empty file
        except FileNotFoundError:
            return  # a dangling link: ssh passes over it as over a path that matches nothing
        except OSError as exc:
            self.notes.append(f"{shown} could not be read ({exc.strerror or exc}); ssh stops with an error on it too")
            return
        if shown not in self.files:
            self.files.append(shown)
        if check_owner:
            self._check_owner(path, shown)
        current, cluster = block, ""
        hosts: list[HostLine] = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            where = f"{shown} line {number}"
            if not line or line.startswith("#"):
                mark = _SKYPILOT_MARK.match(line)
                cluster = mark["cluster"] if mark else cluster
                continue
            match = _LINE.fullmatch(line)
            if not match:
                raise HostError("ssh_config", f"{where}: ssh cannot read {line!r}", "fix the line or remove it")
            key, value = match[1].lower(), match[2].strip()
            if key == "host":
                current = self._host_block(value, block, where)
                hosts = [HostLine(p, where, block.label, block.criteria, cluster or _skypilot_file(path))
                         for p in _split(value, where)]
                self.hosts.extend(hosts)
                cluster = ""
            elif key == "match":
                current, hosts = self._match_block(value, block, where), []
                self.matches.append((f"Match {value}", where))
            elif key == "include":
                self._include(value, current, depth, where)
            else:
                self._enter(current)
                self.lines.append(line)
                if key == "identityfile":
                    for host in hosts:
                        host.key_files.append(value.strip('"'))

    def _host_block(self, value: str, outer: _Block, where: str) -> _Block:
        criterion = "originalhost " + shlex.quote(",".join(_split(value, where)))
        if outer.criteria:
            criteria = outer.criteria + (criterion,)
            return self._start(_Block("Match " + " ".join(criteria), criteria, f"Host {value} ({where})"))
        return self._start(_Block(f"Host {value}", (criterion,), f"Host {value} ({where})"))

    def _match_block(self, value: str, outer: _Block, where: str) -> _Block:
        own = " ".join(shlex.quote(t) for t in _split(value, where) if t.lower() != "all")
        criteria = outer.criteria + ((own,) if own else ())
        header = f"Match {value}" if not outer.criteria else "Match " + (" ".join(criteria) or "all")
        return self._start(_Block(header, criteria, f"Match {value} ({where})"))

    def _start(self, block: _Block) -> _Block:
        self.lines.append(block.header)
        self.header = block.header
        return block

    def _enter(self, block: _Block) -> None:
        """Write ``block``'s header again where the flattened text is in another block (after an Include)."""
        if self.header != block.header:
            self.lines.append(block.header or "Match all")
            self.header = block.header

    def _include(self, value: str, block: _Block, depth: int, where: str) -> None:
        if depth >= MAX_INCLUDE_DEPTH:
            self.notes.append(f"Include {value} ({where}) not followed: Includes nest more than {MAX_INCLUDE_DEPTH} "
                              "deep (does a file include itself?); ssh refuses the whole config "
                              "('Too many recursive configuration includes')")
            return
        for pattern in _split(value, where):
            full = os.path.expanduser(pattern)
            if not os.path.isabs(full):
                full = str(Path.home() / ".ssh" / full)
            paths = sorted(glob.glob(full))
            if not paths:
                self.notes.append(f"Include {pattern} ({where}) matches no file; ssh passes over it too")
            for path in paths:
                self.read(Path(path), block, depth + 1, check_owner=True)

    def _check_owner(self, path: Path, shown: str) -> None:
        """ssh refuses an included file (and ~/.ssh/config) that others may write to, or that another user owns."""
        info = path.stat()
        if (info.st_uid not in (0, os.getuid())) or info.st_mode & 0o022:
            self.notes.append(f"ssh refuses {shown} ('Bad owner or permissions'): it is owned by another user or "
                              f"others may write to it (mode {info.st_mode & 0o777:04o}); chmod go-w {shown}")


def _split(value: str, where: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise HostError("ssh_config", f"{where}: ssh cannot read {value!r} ({exc})") from None


def _skypilot_file(path: Path) -> str:
    """The cluster whose file SkyPilot generated at ``path`` (~/.sky/generated/ssh/CLUSTER), else ""."""
    return path.name if path.parent == Path(os.path.expanduser(SKYPILOT_SSH_DIR)) else ""


def read_ssh_config(path: str | Path | None = None) -> SshConfigFiles:
    """The OpenSSH config at ``path`` (``~/.ssh/config`` when not given) with its Includes followed as ssh does.
    Raises OSError when that file cannot be read, HostError on a line ssh cannot read either."""
    follower = _Follower()
    top = Path(path).expanduser() if path else Path.home() / ".ssh" / "config"
    with open(top, encoding="utf-8"):  # the config itself must exist; what it includes may not
        pass
    follower.read(top, _TOP, 0, check_owner=not path)
    try:
        config = paramiko.SSHConfig.from_text("\n".join(follower.lines))
    except paramiko.ssh_exception.ConfigParseError as exc:
        raise HostError("ssh_config", f"{shown_path(top)} or a file it includes: {exc}") from None
    return SshConfigFiles(config, follower.hosts, follower.files, follower.notes, follower.matches)


def _pattern_skip(pattern: str) -> str | None:
    """Why a Host pattern is no host of its own, or None for a plain alias."""
    if pattern == "*":
        return ("Host * is the default block for every host, not a host itself (its User, Port, key and jump host "
                "reach each imported profile)")
    if pattern.startswith("!"):
        return (f"a negated pattern: it keeps its Host block from applying to {pattern[1:]}, it names no host")
    if any(c in pattern for c in "*?"):
        return "a wildcard pattern, not one host: its settings apply to the hosts whose names it matches"
    return None


def _applies(host: HostLine) -> bool:
    """Whether ssh applies the block ``host`` is written in to its own name (always, unless an Include inside a
    Host or Match block put it there and that block's condition excludes the name)."""
    if not host.criteria:
        return True
    if any(t.lstrip("!").lower() == "exec" for c in host.criteria for t in shlex.split(c)):
        return False  # a command decides: not run at import
    probe = paramiko.SSHConfig.from_text(f"Match {' '.join(host.criteria)}\n  HostName ddpgui-probe\n")
    return probe.lookup(host.pattern).get("hostname") == "ddpgui-probe"


def profiles_from_ssh_config(loaded: SshConfigFiles, taken: Container[str]) -> tuple[list[HostProfile],
                                                                                     ImportReport]:
    """A profile for every alias of ``loaded`` not named in ``taken``, and the report: the files read, the profiles
    added, the entries skipped with the reason (patterns, Match blocks, names taken, ProxyCommand, refused
    settings) and notes on Includes that matched nothing or files that could not be read."""
    profiles: list[HostProfile] = []
    report = ImportReport(files=list(loaded.files), notes=list(loaded.notes))
    report.skipped += [(line, f"a Match block ({where}): its settings apply where its condition holds, it names "
                              "no host") for line, where in loaded.matches]
    seen: set[str] = set()
    not_applied: dict[str, str] = {}
    for host in loaded.hosts:
        alias = host.pattern
        if alias in seen:
            continue  # a later Host line of the same name adds settings; the look-up has them all
        why = _pattern_skip(alias)
        if why is None and not _applies(host):
            not_applied.setdefault(alias, f"its Host line ({host.where}) is in a file included inside {host.inside}; "
                                          f"ssh uses it only for names that block matches too, so 'ssh {alias}' "
                                          "does not")
            continue
        seen.add(alias)
        if why is None and alias in taken:
            why = "a host profile with this name exists already"
        if why is not None:
            report.skipped.append((alias, why))
            continue
        options = loaded.config.lookup(alias)
        if "proxycommand" in options and options["proxycommand"] is not None:
            report.skipped.append((alias, "uses ProxyCommand, which ddpgui does not run; use ProxyJump"
                                   + (f" (SkyPilot cluster {host.cluster}: SkyPilot reaches a cluster in a container "
                                      "or on Kubernetes through a ProxyCommand)" if host.cluster else "")))
            continue
        try:
            profile = _profile_from_ssh(host, options)
        except HostError as exc:
            report.skipped.append((alias, str(exc)))
            continue
        profiles.append(profile)
        report.added.append(alias)
    report.skipped += [(alias, why) for alias, why in not_applied.items() if alias not in seen]
    return profiles, report


def _profile_from_ssh(host: HostLine, options: paramiko.SSHConfigDict) -> HostProfile:
    key_files = options.get("identityfile") or []
    if host.cluster and host.key_files:  # the key SkyPilot wrote for this cluster, before any default one
        key_files = [os.path.expanduser(host.key_files[0])]
    key_file = key_files[0] if key_files else None
    auth = "agent"
    if key_file:
        auth = "key_passphrase" if key_is_encrypted(key_file) else "key"
    jump = options.get("proxyjump", "")
    hops = [] if not jump or jump.lower() == "none" else [h.strip() for h in jump.split(",") if h.strip()]
    try:
        port = int(options.get("port", 22))
    except ValueError:
        raise HostError("port", f"Port {options.get('port')!r} is not a number") from None
    source = host.where.rsplit(" line ", 1)[0]
    notes = (f"SkyPilot cluster {host.cluster}, imported from {source}" if host.cluster
             else f"imported from {source}")
    return HostProfile(name=host.pattern, hostname=options.get("hostname", host.pattern), port=port,
                       user=options.get("user", ""), auth=auth, key_file=key_file, proxy_jump=hops, notes=notes,
                       provider="skypilot" if host.cluster else "", cluster=host.cluster)
