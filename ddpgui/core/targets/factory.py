"""Turning a host profile into a Target, and checking that its Python is usable."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from remote_runner import MIN_PYTHON, PYTHON_TOO_OLD, PYTHON_TOO_OLD_HINT
from remote_runner.capabilities import torch_too_old

from ..hosts import HostStore
from ..ssh.auth import AskSecret
from ..ssh.connection import SSHConnection
from ..ssh.known_hosts import ConfirmHostKey, KnownHosts
from .base import Target
from .local import LocalTarget
from .slurm import SlurmTarget
from .ssh import SSHTarget

#: What ``hosts test`` asks the profile's Python; any Python runs it (2.7 included), so an old one is named as such.
_PYTHON_SNIPPET = (
    "import json, platform, sys\n"
    "torch = None\n"
    f"if sys.version_info >= {MIN_PYTHON!r}:\n"
    "    import importlib.util\n"
    "    if importlib.util.find_spec('torch') is not None:\n"
    "        try:\n"
    "            from importlib.metadata import version\n"
    "            torch = version('torch')\n"
    "        except Exception:\n"
    "            torch = 'unknown version'\n"
    "print(json.dumps({'executable': sys.executable, 'python': platform.python_version(), 'torch': torch}))\n"
)


def open_target(name: str, store: HostStore, *, confirm_host_key: ConfirmHostKey | None = None,
                ask_secret: AskSecret | None = None, known_hosts: KnownHosts | None = None) -> Target:
    """``local`` → :class:`LocalTarget`; a Slurm cluster → :class:`SlurmTarget`; any other profile →
    :class:`SSHTarget` (both connect lazily)."""
    profile = store.get(name)
    if profile.is_local:
        return LocalTarget(profile.name, python=os.path.expanduser(profile.python) if profile.python else None,
                           run_root=profile.run_root or None)
    connection = SSHConnection(store.route(name), known_hosts=known_hosts, confirm_host_key=confirm_host_key,
                               ask_secret=ask_secret)
    return SlurmTarget(profile, connection) if profile.is_slurm else SSHTarget(profile, connection)


@dataclass
class PythonCheck:
    """What the profile's interpreter is; ``problems`` are (message, hint) pairs."""

    executable: str = ""
    python: str = ""
    torch: str | None = None
    problems: list[tuple[str, str]] = field(default_factory=list)


def check_python(target: Target) -> PythonCheck:
    """Run the profile's Python on the host: is it there, is it 3.9+, does it have a torch that launch takes?"""
    result = target.exec([target.python, "-c", _PYTHON_SNIPPET], timeout=60)
    try:
        info = result.json()
    except (ValueError, IndexError):
        raise target.python_error(result) from None
    check = PythonCheck(info["executable"], info["python"], info["torch"])
    version = tuple(int(p) for p in check.python.split(".")[:2])
    if version < MIN_PYTHON:
        check.problems.append((PYTHON_TOO_OLD % (version + MIN_PYTHON), PYTHON_TOO_OLD_HINT % MIN_PYTHON))
        return check  # its torch, if any, was not asked: the runner would not start
    if check.torch is None:
        check.problems.append((f"PyTorch is not installed for {check.executable}",
                               "install it there (pip install torch), or point the profile's python at the "
                               "venv/conda env that has it"))
    too_old = torch_too_old(check.torch)
    if too_old:
        check.problems.append((f"{too_old}: launch refuses it",
                               f"upgrade torch in {check.executable} (pip install -U torch), or point the profile's "
                               "python at a venv/conda env with a newer one"))
    return check
