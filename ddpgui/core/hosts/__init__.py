"""Host profiles: where a host is and how to log in, never a secret.

Profiles live in ``hosts.json`` in :func:`~ddpgui.core.paths.config_dir`.
JSON because the standard library both reads and writes it (``tomllib`` only
reads TOML), and with two-space indentation it is easy to read and diff.
Passwords and key passphrases live in the OS keyring (:mod:`ddpgui.core.hosts.secrets`),
keyed by profile name; renaming or removing a profile moves or deletes them.

``local`` ("This computer") always exists: it runs the runner through a
subprocess, so only its interpreter, run root, price and notes can be edited.
"""
from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from remote_runner.config import env_problem
from remote_runner.status import atomic_write

from ..filelock import locked
from ..paths import config_dir

# The key-file names stay importable from here, where they lived before keyfiles.py.
from ..ssh.keys import KeyFileError, KeyNeedsPassphrase, WrongPassphrase, key_is_encrypted, load_private_key  # noqa: F401
from . import secrets

SCHEMA_VERSION = 1
HOSTS_FILE = "hosts.json"
LOCAL = "local"
LOCAL_DISPLAY_NAME = "This computer"

AUTH_METHODS = ("agent", "key", "key_passphrase", "password")
#: The keyring secret each authentication method needs, if any.
SECRET_KIND = {"key_passphrase": secrets.PASSPHRASE, "password": secrets.PASSWORD}

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HOSTNAME = re.compile(r"^[^\s@/\\'\"`$;&|<>()]+$")
_USER = re.compile(r"^[^\s@:/'\"`$;&|<>()]*$")
_HOP = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]\s]+\]|[^:\s@\[\]]+)(?::(?P<port>\d+))?$")


class HostError(ValueError):
    """A profile that cannot be saved or used; ``field`` names the offending field."""

    def __init__(self, field_name: str, message: str, hint: str = ""):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.hint = hint


class HostNotFound(KeyError):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"no host profile named {self.name!r} (ddpgui hosts list shows them)"


@dataclass
class HostProfile:
    """How to reach one host; several profiles may name the same machine with different interpreters."""

    name: str
    hostname: str = ""
    port: int = 22
    user: str = ""
    auth: str = "agent"
    key_file: str | None = None
    proxy_jump: list[str] = field(default_factory=list)
    python: str = "python3"
    run_root: str = "~/.ddpgui"
    price_per_hour: float | None = None
    notes: str = ""
    nccl_env: dict[str, str] = field(default_factory=dict)
    rdzv_address: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    @property
    def is_local(self) -> bool:
        return self.name == LOCAL

    @property
    def display_name(self) -> str:
        return LOCAL_DISPLAY_NAME if self.is_local else self.name

    @property
    def secret_kind(self) -> str | None:
        """The keyring secret this profile's authentication needs (``password``/``passphrase``)."""
        return None if self.is_local else SECRET_KIND.get(self.auth)

    def validate(self) -> None:
        _check(isinstance(self.name, str) and bool(_NAME.fullmatch(self.name)), "name",
               f"must be 1-64 letters, digits, '.', '_' or '-' and start with a letter or digit, got {self.name!r}")
        _check(isinstance(self.notes, str), "notes", "must be text")
        _check(self.price_per_hour is None or (isinstance(self.price_per_hour, (int, float))
                                               and not isinstance(self.price_per_hour, bool)
                                               and self.price_per_hour >= 0),
               "price_per_hour", f"must be a number >= 0 or empty, got {self.price_per_hour!r}")
        _check(isinstance(self.nccl_env, dict), "nccl_env", "must map environment variable names to text values")
        for key, value in self.nccl_env.items():
            problem = env_problem(key, value)
            _check(problem is None, "nccl_env", problem)
        _check(isinstance(self.python, str) and "\n" not in self.python, "python", "must be one line")
        _check(isinstance(self.run_root, str) and "\n" not in self.run_root, "run_root", "must be one line")
        if self.is_local:
            return
        _check(isinstance(self.hostname, str) and bool(_HOSTNAME.match(self.hostname))
               and not self.hostname.startswith("-"), "hostname",
               f"must be a host name or address without spaces, got {self.hostname!r}")
        _check(isinstance(self.port, int) and not isinstance(self.port, bool) and 1 <= self.port <= 65535,
               "port", f"must be 1-65535, got {self.port!r}")
        _check(isinstance(self.user, str) and bool(_USER.match(self.user)) and not self.user.startswith("-"),
               "user", f"must be a login name without spaces, got {self.user!r}")
        _check(self.auth in AUTH_METHODS, "auth", f"must be one of {', '.join(AUTH_METHODS)}, got {self.auth!r}")
        if self.auth in ("key", "key_passphrase"):
            _check(bool(self.key_file), "key_file", f"authentication {self.auth!r} needs a key file")
        _check(self.key_file is None or (isinstance(self.key_file, str) and "\n" not in self.key_file),
               "key_file", "must be a path")
        _check(isinstance(self.proxy_jump, list) and all(isinstance(h, str) for h in self.proxy_jump),
               "proxy_jump", "must be a list of jump hosts")
        for hop in self.proxy_jump:
            _check(hop != self.name, "proxy_jump", f"{self.name!r} cannot be its own jump host")
            _check(bool(_NAME.fullmatch(hop)) or bool(_HOP.fullmatch(hop)), "proxy_jump",
                   f"{hop!r} is neither a profile name nor user@host:port")
        _check(bool(self.python.strip()), "python", "must name the remote Python interpreter, e.g. python3")
        _check(self.run_root == "~" or self.run_root.startswith(("/", "~/")), "run_root",
               f"must be an absolute path or start with ~/, got {self.run_root!r}")
        _check(self.rdzv_address is None or (isinstance(self.rdzv_address, str) and bool(_HOP.match(self.rdzv_address))
                                             and "@" not in self.rdzv_address),
               "rdzv_address", f"must be host or host:port, got {self.rdzv_address!r}")

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: object) -> HostProfile:
        """A profile from its JSON object; a :class:`HostError` names the field at fault."""
        if not isinstance(data, dict):
            raise HostError("hosts", f"each host must be an object, got {_shown(data)}")
        unknown = sorted(set(data) - set(_FIELD_TYPES))
        if unknown:
            raise HostError(unknown[0], "unknown field (this version of ddpgui knows "
                                        f"{', '.join(_FIELD_TYPES)})")
        if "name" not in data:
            raise HostError("name", "a host has no name")
        for name, value in data.items():
            kind, ok = _FIELD_TYPES[name]
            if not ok(value):
                raise HostError(name, f"must be {kind} (got {_shown(value)})")
        return cls(**data)


def _shown(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, (int, float, str, list, dict, type(None))) \
        else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: The JSON type of each profile field: (what the message calls it, the check).
_FIELD_TYPES: dict[str, tuple[str, Callable[[object], bool]]] = {
    "name": ("a string", _is_str), "hostname": ("a string", _is_str), "port": ("an integer", _is_int),
    "user": ("a string", _is_str), "auth": ("a string", _is_str),
    "key_file": ("a string or null", lambda v: v is None or _is_str(v)),
    "proxy_jump": ("a list of strings", lambda v: isinstance(v, list) and all(map(_is_str, v))),
    "python": ("a string", _is_str), "run_root": ("a string", _is_str),
    "price_per_hour": ("a number or null", lambda v: v is None or (isinstance(v, (int, float))
                                                                   and not isinstance(v, bool))),
    "notes": ("a string", _is_str),
    "nccl_env": ("an object of strings", lambda v: isinstance(v, dict) and all(map(_is_str, v.values()))),
    "rdzv_address": ("a string or null", lambda v: v is None or _is_str(v)),
}


class HostsFileError(HostError):
    """The hosts file cannot be used as it is: the message names the file, and the host and field at fault."""

    def __init__(self, path: Path, message: str, host: str | None = None, field_name: str = "hosts",
                 hint: str = ""):
        super().__init__(field_name, message, hint or f"fix {path} by hand, or move it aside (for example to "
                                                      f"{path.name}.broken) to start over with no host profiles")
        where = f"hosts file {path}" + (f": host {host}" if host else "")
        where += f", field \"{field_name}\"" if host and field_name != "hosts" else ""
        self.args = (f"{where}: {message}",)
        self.path = path
        self.host = host


def _check(ok: bool, field_name: str, message: str) -> None:
    if not ok:
        raise HostError(field_name, message)


def local_profile() -> HostProfile:
    """The built-in "This computer": the app's own Python, runs under the data dir."""
    return HostProfile(name=LOCAL, hostname="localhost", python="", run_root="")


@dataclass(frozen=True)
class Hop:
    """One SSH login on the way to a host (jump hosts first, the host itself last)."""

    label: str
    hostname: str
    port: int
    user: str
    auth: str
    key_file: str | None
    #: the profile whose keyring secrets this hop uses (for an ad-hoc hop: the profile that lists it)
    secrets_profile: str


def parse_hop(text: str) -> tuple[str, str, int]:
    """``[user@]host[:port]`` (IPv6 in brackets) as (user, host, port)."""
    m = _HOP.match(text)
    if not m:
        raise HostError("proxy_jump", f"{text!r} is not user@host:port")
    host = m["host"][1:-1] if m["host"].startswith("[") else m["host"]
    port = int(m["port"]) if m["port"] else 22
    if not 1 <= port <= 65535:
        raise HostError("proxy_jump", f"port {port} in {text!r} is not 1-65535")
    return m["user"] or "", host, port


def _hop_of(profile: HostProfile) -> Hop:
    return Hop(label=profile.name, hostname=profile.hostname, port=profile.port, user=profile.user,
               auth=profile.auth, key_file=profile.key_file, secrets_profile=profile.name)


@dataclass
class ImportReport:
    added: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (Host pattern, why)


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
            raise HostsFileError(self.path, f'must be a JSON object with "schema" and "hosts", got {_shown(data)}')
        if data.get("schema") != SCHEMA_VERSION:
            raise HostsFileError(self.path, f"has schema {_shown(data.get('schema'))}, this version of ddpgui "
                                            f"reads schema {SCHEMA_VERSION}", field_name="schema",
                                 hint="update ddpgui if a newer one wrote the file, or move it aside to "
                                      "start over with no host profiles")
        items = data.get("hosts", [])
        if not isinstance(items, list):
            raise HostsFileError(self.path, f'"hosts" must be a list of host objects, got {_shown(items)}')
        profiles = []
        for number, item in enumerate(items, 1):
            name = item.get("name") if isinstance(item, dict) else None
            host = f'"{name}"' if isinstance(name, str) and name else f"#{number}"
            if not isinstance(item, dict):
                raise HostsFileError(self.path, f"must be an object, got {_shown(item)}", host=host)
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
        return hops + [_hop_of(profile)]

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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(str(self.path), text.encode("utf-8"), 0o600)

    # ---- ~/.ssh/config ---------------------------------------------------------------------
    def import_ssh_config(self, path: str | Path | None = None) -> ImportReport:
        """Add a profile for every ``Host`` alias of an OpenSSH config (wildcards are skipped)."""
        path = Path(path).expanduser() if path else Path.home() / ".ssh" / "config"
        config = paramiko.SSHConfig.from_path(str(path))
        report = ImportReport()
        with locked(self.path):
            self.reload()
            for alias in sorted(config.get_hostnames()):
                if any(c in alias for c in "*?!"):
                    report.skipped.append((alias, "a wildcard pattern, not one host; its settings apply to the "
                                                  "aliases it matches"))
                    continue
                if alias in self._profiles:
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
                self._profiles[alias] = profile
                report.added.append(alias)
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
