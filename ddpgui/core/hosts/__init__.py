"""Hosts: profiles (where a host is, how to log in), their store in hosts.json, ~/.ssh/config import, secrets.

Re-exports the names the rest of the code imports from ``ddpgui.core.hosts``.
"""
from . import secrets
from .profiles import (
    AUTH_METHODS,
    LOCAL,
    Hop,
    HostError,
    HostNotFound,
    HostProfile,
    HostsFileError,
    local_profile,
    parse_hop,
)
from .store import HostStore

__all__ = ["AUTH_METHODS", "LOCAL", "Hop", "HostError", "HostNotFound", "HostProfile", "HostStore", "HostsFileError",
           "local_profile", "parse_hop", "secrets"]
