"""The host profile store: hosts.json read, validated, changed under its file lock and saved atomically.

Profiles live in ``hosts.json`` in :func:`~ddpgui.core.paths.config_dir`.
JSON because the standard library both reads and writes it (``tomllib`` only
reads TOML), and with two-space indentation it is easy to read and diff.
Passwords and key passphrases live in the OS keyring (:mod:`ddpgui.core.hosts.secrets`),
keyed by profile name; renaming or removing a profile moves or deletes them.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from remote_runner.fsutil import atomic_write

from ..filelock import locked
from ..paths import config_dir
from . import secrets
from .profiles import (
    LOCAL,
    LOCAL_DISPLAY_NAME,
    Hop,
    HostError,
    HostNotFound,
    HostProfile,
    HostsFileError,
    hop_of,
    local_profile,
    parse_hop,
    shown,
)
from .ssh_config import ImportReport, profiles_from_ssh_config, read_ssh_config

SCHEMA_VERSION = 1
HOSTS_FILE = "hosts.json"


class HostStore:
    """The profiles file: load, validate, change, save atomically."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else config_dir() / HOSTS_FILE
        self._profiles: dict[str, HostProfile] = {}
        self.reload()

    # ---- reading ---------------------------------------------------------------------------
    def reload(self) -> None:
        """Read the file again; a :class:`HostsFileError` says what is wrong where (the file is not touched)."""
        profiles = {LOCAL: local_profile()}
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = None
        except (OSError, UnicodeDecodeError) as exc:
            raise HostsFileError(self.path, f"cannot be read ({exc})") from exc
        if text is not None:
            for profile in self._parse(text):
                if profile.name in profiles and not profile.is_local:
                    raise HostsFileError(self.path, f"two hosts are named {profile.name!r}", field_name="name")
                profiles[profile.name] = profile
        self._profiles = profiles

    def _parse(self, text: str) -> list[HostProfile]:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise HostsFileError(self.path, f"is not valid JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise HostsFileError(self.path, f'must be a JSON object with "schema" and "hosts", got {shown(data)}')
        if data.get("schema") != SCHEMA_VERSION:
            raise HostsFileError(self.path, f"has schema {shown(data.get('schema'))}, this version of ddpgui "
                                            f"reads schema {SCHEMA_VERSION}", field_name="schema",
                                 hint="update ddpgui if a newer one wrote the file, or move it aside to "
                                      "start over with no host profiles")
        items = data.get("hosts", [])
        if not isinstance(items, list):
            raise HostsFileError(self.path, f'"hosts" must be a list of host objects, got {shown(items)}')
        profiles = []
        for number, item in enumerate(items, 1):
            name = item.get("name") if isinstance(item, dict) else None
            host = f'"{name}"' if isinstance(name, str) and name else f"#{number}"
            if not isinstance(item, dict):
                raise HostsFileError(self.path, f"must be an object, got {shown(item)}", host=host)
            try:
                profiles.append(HostProfile.from_json(item))
            except HostError as exc:
                message = str(exc).removeprefix(f"{exc.field}: ")
                raise HostsFileError(self.path, message, host=host, field_name=exc.field) from exc
        return profiles

    def names(self) -> list[str]:
        """``local`` first, then the others in alphabetical order."""
        return [LOCAL] + sorted(n for n in self._profiles if n != LOCAL)

    def profiles(self) -> list[HostProfile]:
        return [self._profiles[n] for n in self.names()]

    def get(self, name: str) -> HostProfile:
        try:
            return self._profiles[name]
        except KeyError:
            raise HostNotFound(name) from None

    def __contains__(self, name: object) -> bool:
        return name in self._profiles

    def route(self, name: str) -> list[Hop]:
        """Every login needed to reach ``name``: its jump hosts (expanded recursively), then itself."""
        return self._route(self.get(name), [])

    def _route(self, profile: HostProfile, seen: list[str]) -> list[Hop]:
        if profile.name in seen:
            raise HostError("proxy_jump", "the jump hosts loop: " + " → ".join(seen + [profile.name]))
        hops: list[Hop] = []
        for text in profile.proxy_jump:
            if text in self._profiles and not self._profiles[text].is_local:
                hops += self._route(self._profiles[text], seen + [profile.name])
            else:
                user, host, port = parse_hop(text)
                # An ad-hoc hop logs in with the agent, and with the profile's key file when it has one.
                hops.append(Hop(label=text, hostname=host, port=port, user=user or profile.user, auth="agent",
                                key_file=profile.key_file, secrets_profile=profile.name))
        return hops + [hop_of(profile)]

    # ---- changing --------------------------------------------------------------------------
    @contextmanager
    def _change(self) -> Iterator[None]:
        """A locked read-modify-write: the file read again under its lock, the change, an atomic save.

        Other processes (the app, CLI commands) change the same file; without the lock one of two
        concurrent changes would be lost.  A change that raises saves nothing and leaves the file's state.
        """
        with locked(self.path):
            self.reload()
            try:
                yield
            except BaseException:
                self.reload()
                raise
            self._save_unlocked()

    def add(self, profile: HostProfile) -> None:
        profile.validate()
        with self._change():
            if profile.name in self._profiles:
                raise HostError("name", f"a host named {profile.name!r} exists already")
            self._profiles[profile.name] = profile
            self._check_routes(profile.name)

    def update(self, profile: HostProfile) -> None:
        """Replace the profile of the same name (``local``: only python, run_root, price and notes)."""
        profile.validate()
        if profile.is_local:
            fixed = {f: getattr(local_profile(), f) for f in ("hostname", "port", "user", "auth", "key_file",
                                                               "proxy_jump")}
            if any(getattr(profile, f) != v for f, v in fixed.items()):
                raise HostError("name", f"{LOCAL_DISPLAY_NAME} is not reached over SSH: only its python, run root, "
                                        "price and notes can be changed")
        with self._change():
            old = self.get(profile.name)
            self._profiles[profile.name] = profile
            self._check_routes(profile.name)
            if old.secret_kind and old.secret_kind != profile.secret_kind:
                _keyring(secrets.delete_secret, profile.name, old.secret_kind)
            if (old.release is None) != (profile.release is None):
                self._mark_release_clear(profile.name, old.release is not None)

    # ---- a release action removed while its host keeps it -----------------------------------------
    # The host keeps its release action until told otherwise: one removed while the host was not reached is
    # cleared there at the next connection (the RunManager asks release_clear_pending), so a host never
    # releases itself on an action its profile no longer has.  The names are kept beside hosts.json.
    def _clears_path(self) -> Path:
        return self.path.resolve().with_name("release-clear.json")

    def _clears(self) -> list[str]:
        try:
            names = json.loads(self._clears_path().read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []

    def _mark_release_clear(self, name: str, pending: bool) -> None:
        names = [n for n in self._clears() if n != name] + ([name] if pending else [])
        self._clears_path().parent.mkdir(parents=True, exist_ok=True)
        atomic_write(str(self._clears_path()), json.dumps(names).encode("utf-8"), 0o600)

    def release_clear_pending(self, name: str) -> bool:
        """Whether ``name``'s host may still keep a release action its profile no longer has."""
        return name in self._clears()

    def release_cleared(self, name: str) -> None:
        """The host has been told: it keeps no release action now."""
        with locked(self.path):
            if name in self._clears():
                self._mark_release_clear(name, False)

    def rename(self, old: str, new: str) -> None:
        """Rename a profile, its keyring secrets and every jump-host reference to it."""
        with self._change():
            profile = self.get(old)
            if profile.is_local:
                raise HostError("name", f"{LOCAL_DISPLAY_NAME} cannot be renamed")
            if new in self._profiles:
                raise HostError("name", f"a host named {new!r} exists already")
            renamed = dataclasses.replace(profile, name=new)
            _keyring(secrets.move_secrets, old, new)
            del self._profiles[old]
            self._profiles[new] = renamed
            for name, other in list(self._profiles.items()):
                if old in other.proxy_jump:
                    self._profiles[name] = dataclasses.replace(
                        other, proxy_jump=[new if h == old else h for h in other.proxy_jump])

    def remove(self, name: str) -> None:
        """Remove a profile and delete its keyring secrets."""
        with self._change():
            profile = self.get(name)
            if profile.is_local:
                raise HostError("name", f"{LOCAL_DISPLAY_NAME} cannot be removed")
            users = sorted(n for n, p in self._profiles.items() if name in p.proxy_jump)
            if users:
                raise HostError("name", f"{name!r} is the jump host of {', '.join(users)}",
                                "change their proxy_jump first")
            _keyring(secrets.delete_all, name)
            del self._profiles[name]

    def _check_routes(self, name: str) -> None:
        for other in self._profiles:
            if other != LOCAL and (other == name or name in self._profiles[other].proxy_jump):
                self.route(other)

    def save(self) -> None:
        """Write the profiles as they are here, under the file's lock (changes use ``add``/``update``/...)."""
        with locked(self.path):
            self._save_unlocked()

    def _save_unlocked(self) -> None:
        data = {"schema": SCHEMA_VERSION,
                "hosts": [p.to_json() for p in self.profiles()]}
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        target = self.path.resolve()  # a symbolic link (dotfiles kept in a repository) is written through, as
        target.parent.mkdir(parents=True, exist_ok=True)  # editors do: its target is replaced, the link stays
        atomic_write(str(target), text.encode("utf-8"), 0o600)

    # ---- ~/.ssh/config ---------------------------------------------------------------------
    def import_ssh_config(self, path: str | Path | None = None) -> ImportReport:
        """Add a profile for every ``Host`` alias of an OpenSSH config (wildcards are skipped)."""
        config = read_ssh_config(path)
        with locked(self.path):
            self.reload()
            profiles, report = profiles_from_ssh_config(config, self._profiles)
            for profile in profiles:
                self._profiles[profile.name] = profile
            for alias in list(report.added):
                try:
                    self.route(alias)
                except HostError as exc:
                    del self._profiles[alias]
                    report.added.remove(alias)
                    report.skipped.append((alias, str(exc)))
            if report.added:
                self._save_unlocked()
        return report


def _keyring(operation: Callable[..., object], *args: str) -> None:
    """A keyring clean-up; with no keyring at all nothing can have been stored, so there is nothing to do."""
    try:
        operation(*args)
    except secrets.SecretsUnavailable as exc:
        if not exc.no_backend:
            raise

