"""Hosts: profiles (where a host is, how to log in), their store in hosts.json, ~/.ssh/config import, secrets.

Re-exports the names the rest of the code imports from ``ddpgui.core.hosts``.
"""
from . import secrets
from .profiles import (
    AUTH_METHODS,
    KINDS,
    LOCAL,
    Hop,
    HostError,
    HostNotFound,
    HostProfile,
    HostsFileError,
    host_display_name,
    local_profile,
    parse_hop,
)
from .slurm_options import GPU_FLAGS, SlurmOptions, format_time_limit, time_limit_seconds
from .store import HostStore

__all__ = ["AUTH_METHODS", "GPU_FLAGS", "KINDS", "LOCAL", "Hop", "HostError", "HostNotFound", "HostProfile",
           "HostStore", "HostsFileError", "SlurmOptions", "format_time_limit", "host_display_name", "local_profile",
           "parse_hop", "secrets", "time_limit_seconds"]
