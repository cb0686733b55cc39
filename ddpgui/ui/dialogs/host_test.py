"""Testing a host profile as the host dialog's form describes it, before it is saved (Qt-free: a worker runs it).

:func:`check_profile` connects the way a saved profile would (its jump hosts from the saved ones), checks the
host key, deploys the runner and probes; :func:`probe_summary` is the probe in a line or two, as the hosts list
and the dialog show it.
"""
from __future__ import annotations

from collections.abc import Iterator

from ddpgui.core.hosts import HostProfile, HostStore
from ddpgui.core.hosts.profiles import Hop
from ddpgui.core.targets.factory import open_target
from ddpgui.core.targets.zipapp import RunnerPackage, build_runner


def probe_summary(probe: dict | None) -> str:
    """One or two lines: GPUs with model and memory (or CPUs), torch, CUDA, driver."""
    if not probe:
        return "not probed yet"
    gpus = probe.get("gpus") or []
    if gpus:
        names: dict[str, int] = {}
        for gpu in gpus:
            mem = gpu.get("memory_total_gib")
            label = f"{gpu.get('name') or 'GPU'}" + (f" {mem:.0f} GiB" if mem else "")
            names[label] = names.get(label, 0) + 1
        device = ", ".join(f"{n}× {label}" for label, n in names.items())
    else:
        device = f"CPU only, {probe.get('cpu_count') or '?'} cores"
    torch = probe.get("torch") or {}
    parts = [f"torch {torch['version']}" if torch.get("version") else "no torch"]
    if torch.get("cuda_build"):
        parts.append(f"CUDA {torch['cuda_build']}")
    if probe.get("driver_version"):
        parts.append(f"driver {probe['driver_version']}")
    return "\n".join([device, " · ".join(parts), *(probe.get("notes") or [])])


class _WithProfile:
    """The saved hosts as they would be with ``profile`` saved too: what :func:`open_target` reads."""

    def __init__(self, hosts: HostStore, profile: HostProfile):
        self.hosts, self.profile = hosts, profile

    def get(self, name: str) -> HostProfile:
        return self.profile if name == self.profile.name else self.hosts.get(name)

    def route(self, name: str) -> list[Hop]:
        if name != self.profile.name:
            return self.hosts.route(name)
        return self.hosts._route(self.profile, [])  # noqa: SLF001 (the store's route of a profile not in it)


def check_profile(profile: HostProfile, hosts: HostStore, package: RunnerPackage | None = None,
                 **connect: object) -> Iterator[str]:
    """Worker: connect to the host as ``profile`` says (saved or not), check its host key, deploy the runner and
    probe; yields progress text, returns the probe report.  ``connect``: :func:`open_target`'s keyword arguments
    (``confirm_host_key``, ``ask_secret``, ``known_hosts``).  The connection is closed after."""
    yield "connecting"
    target = open_target(profile.name, _WithProfile(hosts, profile), **connect)
    try:
        target.deploy(package or build_runner())
        yield "probing"
        return target.probe()
    finally:
        target.close()


def problems_of(probe: dict) -> list[str]:
    """The probe's errors (what the host cannot run), in words."""
    return [p.get("message", "") for p in probe.get("problems") or [] if p.get("severity") == "error"]


#: What to change when the profile's Python has no torch (the probe's own hint speaks of the host profile).
PYTHON_HINT = ("set Python (above) to the interpreter that has torch, e.g. ~/venv/bin/python or "
               "~/miniconda3/envs/NAME/bin/python, or pip install torch for this one")


def torch_missing(probe: dict | None) -> bool:
    """The probe found no torch for the profile's Python."""
    return any(p.get("code") == "torch_missing" for p in (probe or {}).get("problems") or [])


def problem_lines(probe: dict) -> list[str]:
    """Each error of the probe ("But: …") with what to do ("Hint: …"); no torch: change the Python field."""
    lines = []
    for problem in probe.get("problems") or []:
        if problem.get("severity") != "error":
            continue
        hint = PYTHON_HINT if problem.get("code") == "torch_missing" else problem.get("hint")
        lines += [f"But: {problem.get('message', '')}"] + ([f"Hint: {hint}"] if hint else [])
    return lines
