"""Host profiles: where a host is and how to log in, never a secret; their validation, This computer, route hops.

``local`` ("This computer") always exists: it runs the runner through a
subprocess, so only its interpreter, run root, price and notes can be edited.
A profile of kind ``slurm`` is an SSH profile to a cluster's login node plus its
:class:`~ddpgui.core.hosts.slurm_options.SlurmOptions` (its run root is on the
cluster's shared filesystem).
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from remote_runner.config import env_problem

from ..names import HOSTNAME_REFUSED, USER_REFUSED, name_problem
from . import secrets
from .errors import HostError, shown
from .release import ReleasePolicy
from .slurm_options import SlurmOptions

LOCAL = "local"
LOCAL_DISPLAY_NAME = "This computer"


def host_display_name(name: str) -> str:
    """A host as its user reads it: ``This computer`` for the built-in ``local`` (its id stays ``local`` in files,
    the store and the CLI's arguments), any other host by its profile's name."""
    return LOCAL_DISPLAY_NAME if name == LOCAL else name

#: What a profile is: one SSH host, or a Slurm cluster reached over SSH through its login node.
KINDS = ("ssh", "slurm")
AUTH_METHODS = ("agent", "key", "key_passphrase", "password")
#: Who made the machine a profile reaches, when a tool we know did ("" for any other): ``skypilot`` for a cluster
#: whose entry SkyPilot generated (the profile's ``cluster`` names it, as ``sky down CLUSTER`` does).
PROVIDERS = ("", "skypilot")
#: The keyring secret each authentication method needs, if any.
SECRET_KIND = {"key_passphrase": secrets.PASSPHRASE, "password": secrets.PASSWORD}

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HOP = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]\s]+\]|[^:\s@\[\]]+)(?::(?P<port>\d+))?$")


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
    kind: str = "ssh"
    slurm: SlurmOptions | None = None
    provider: str = ""
    cluster: str = ""
    #: What releases the instance when nothing is left to do (core/hosts/release.py); None: it is never released.
    release: ReleasePolicy | None = None

    def __post_init__(self) -> None:
        self.validate()

    @property
    def is_local(self) -> bool:
        return self.name == LOCAL

    @property
    def is_slurm(self) -> bool:
        """A Slurm cluster: runs are jobs submitted through the login node this profile logs into."""
        return self.kind == "slurm"

    @property
    def display_name(self) -> str:
        return host_display_name(self.name)

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
        _check(self.kind in KINDS, "kind", f"must be one of {', '.join(KINDS)}, got {shown(self.kind)}")
        _check(self.provider in PROVIDERS, "provider", f"must be empty or skypilot, got {shown(self.provider)}")
        _check(bool(self.cluster) == bool(self.provider) and "\n" not in self.cluster, "cluster",
               "names the provider's cluster (one line), and only when the profile has a provider")
        _check(self.release is None or isinstance(self.release, ReleasePolicy), "release",
               "must be a release action (command, on, kind, after_min) or empty")
        if self.is_local:
            _check(self.kind == "ssh" and self.slurm is None, "kind",
                   f"{LOCAL_DISPLAY_NAME} runs here, it cannot be a Slurm cluster")
            _check(self.release is None, "release", f"{LOCAL_DISPLAY_NAME} is never released")
            return
        _check(self.release is None or not self.is_slurm, "release",
               "a Slurm cluster is not released: its jobs end by themselves and Slurm frees their nodes")
        if self.is_slurm:
            if not isinstance(self.slurm, SlurmOptions):
                raise HostError("slurm.partition", "a Slurm cluster needs its Slurm options, at least a partition",
                                "e.g. ddpgui hosts edit NAME --kind slurm --partition gpu")
            self.slurm.validate()
        else:
            _check(self.slurm is None, "slurm", "only a profile of kind slurm has Slurm options")
        _check_login("hostname", "the host name", self.hostname, HOSTNAME_REFUSED, empty_ok=False)
        _check(isinstance(self.port, int) and not isinstance(self.port, bool) and 1 <= self.port <= 65535,
               "port", f"must be 1-65535, got {self.port!r}")
        _check_login("user", "the login name", self.user, USER_REFUSED)
        _check(self.auth in AUTH_METHODS, "auth", f"must be one of {', '.join(AUTH_METHODS)}, got {self.auth!r}")
        if self.auth in ("key", "key_passphrase"):
            _check(bool(self.key_file), "key_file", f"authentication {self.auth!r} needs a key file")
        _check(self.key_file is None or (isinstance(self.key_file, str) and "\n" not in self.key_file),
               "key_file", "must be a path")
        _check(isinstance(self.proxy_jump, list) and all(isinstance(h, str) for h in self.proxy_jump),
               "proxy_jump", "must be a list of jump hosts")
        for hop in self.proxy_jump:
            _check(hop != self.name, "proxy_jump", f"{self.name!r} cannot be its own jump host")
            if _NAME.fullmatch(hop):
                continue  # a profile's name: that profile is checked on its own
            _check(bool(_HOP.fullmatch(hop)), "proxy_jump", f"{hop!r} is neither a profile name nor user@host:port")
            user, host, _ = parse_hop(hop)
            whose = f"jump host {shown(hop)}: its"
            _check_login("proxy_jump", "the jump host" if host == hop else f"{whose} host name", host,
                         HOSTNAME_REFUSED, empty_ok=False)
            _check_login("proxy_jump", f"{whose} login name", user, USER_REFUSED)
        _check(bool(self.python.strip()), "python", "must name the remote Python interpreter, e.g. python3")
        _check(self.run_root == "~" or self.run_root.startswith(("/", "~/")), "run_root",
               f"must be an absolute path or start with ~/, got {self.run_root!r}")
        _check(self.rdzv_address is None or (isinstance(self.rdzv_address, str) and bool(_HOP.match(self.rdzv_address))
                                             and "@" not in self.rdzv_address),
               "rdzv_address", f"must be host or host:port, got {self.rdzv_address!r}")
        if self.rdzv_address is not None:
            _check_login("rdzv_address", "the rendezvous host",
                         _HOP.match(self.rdzv_address)["host"].strip("[]"), HOSTNAME_REFUSED, empty_ok=False)

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        if not self.provider:  # written only when set: such a file stays as it was, readable by older versions
            del data["provider"], data["cluster"]
        if self.release is None:
            del data["release"]
        return data

    @classmethod
    def from_json(cls, data: object) -> HostProfile:
        """A profile from its JSON object; a :class:`HostError` names the field at fault."""
        if not isinstance(data, dict):
            raise HostError("hosts", f"each host must be an object, got {shown(data)}")
        unknown = sorted(set(data) - set(_FIELD_TYPES))
        if unknown:
            raise HostError(unknown[0], "unknown field (this version of ddpgui knows "
                                        f"{', '.join(_FIELD_TYPES)})")
        if "name" not in data:
            raise HostError("name", "a host has no name")
        for name, value in data.items():
            kind, ok = _FIELD_TYPES[name]
            if not ok(value):
                raise HostError(name, f"must be {kind} (got {shown(value)})")
        if data.get("slurm") is not None:
            data = dict(data, slurm=SlurmOptions.from_json(data["slurm"]))
        if data.get("release") is not None:
            data = dict(data, release=ReleasePolicy.from_json(data["release"]))
        return cls(**data)


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
    "kind": ("a string", _is_str),
    "slurm": ("an object of Slurm options or null", lambda v: v is None or isinstance(v, dict)),
    "provider": ("a string", _is_str), "cluster": ("a string", _is_str),
    "release": ("an object (command, on, kind, after_min) or null", lambda v: v is None or isinstance(v, dict)),
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


def _check_login(field_name: str, what: str, value: object, refused: str, empty_ok: bool = True) -> None:
    """A host or login name (:func:`~ddpgui.core.names.name_problem`, never starting with '-'); the message is
    ``what``, the value and what is wrong with it."""
    problem = name_problem(value, refused, option_like=False, empty_ok=empty_ok)
    _check(problem is None, field_name, f"{what} {problem}" if value == "" else f"{what} {shown(value)} {problem}")


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


def hop_of(profile: HostProfile) -> Hop:
    """The login into the profile's own host (the last hop of its route)."""
    return Hop(label=profile.name, hostname=profile.hostname, port=profile.port, user=profile.user,
               auth=profile.auth, key_file=profile.key_file, secrets_profile=profile.name)

