"""Import of ~/.ssh/config: a host profile for every Host alias an OpenSSH config names, and what was skipped why."""
from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from ..ssh.keys import key_is_encrypted
from .profiles import HostError, HostProfile


@dataclass
class ImportReport:
    """What an import added (profile names) and skipped (with the reason)."""

    added: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (Host pattern, why)


def read_ssh_config(path: str | Path | None = None) -> paramiko.SSHConfig:
    """The OpenSSH config at ``path`` (``~/.ssh/config`` when not given)."""
    path = Path(path).expanduser() if path else Path.home() / ".ssh" / "config"
    return paramiko.SSHConfig.from_path(str(path))


def profiles_from_ssh_config(config: paramiko.SSHConfig, taken: Container[str]) -> tuple[list[HostProfile],
                                                                                         ImportReport]:
    """A profile for every alias of ``config`` not named in ``taken``, and the report: those added, the others
    skipped with the reason (wildcards, names taken, ProxyCommand, settings a profile refuses)."""
    profiles: list[HostProfile] = []
    report = ImportReport()
    for alias in sorted(config.get_hostnames()):
        if any(c in alias for c in "*?!"):
            report.skipped.append((alias, "a wildcard pattern, not one host; its settings apply to the "
                                          "aliases it matches"))
            continue
        if alias in taken:
            report.skipped.append((alias, "a host profile with this name exists already"))
            continue
        options = config.lookup(alias)
        if "proxycommand" in options:
            report.skipped.append((alias, "uses ProxyCommand, which ddpgui does not run; use ProxyJump"))
            continue
        try:
            profile = _profile_from_ssh(alias, options)
        except HostError as exc:
            report.skipped.append((alias, str(exc)))
            continue
        profiles.append(profile)
        report.added.append(alias)
    return profiles, report


def _profile_from_ssh(alias: str, options: paramiko.SSHConfigDict) -> HostProfile:
    key_files = options.get("identityfile") or []
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
    return HostProfile(name=alias, hostname=options.get("hostname", alias), port=port,
                       user=options.get("user", ""), auth=auth, key_file=key_file, proxy_jump=hops,
                       notes="imported from ~/.ssh/config")
