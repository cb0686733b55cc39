"""A launch's GPU choice (``--gpus 0,3`` / ``free:2``) made into run settings, against snapshots of its hosts.

One process per GPU: the number of processes per node follows the choice, and a different ``nproc`` is a
contradiction, refused naming both.  ``free:N`` is resolved on one snapshot of each host (HostMonitor's
:func:`~ddpgui.core.gpus.monitor.snapshot_once`); a run (multi-node, or a sweep over several hosts) gets one
set of indices, so hosts whose free GPUs differ are refused with a hint to name them.  The settings get
``gpus`` (stored with the run) and the matching CUDA_VISIBLE_DEVICES in ``env``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .picker import GpuChoice, GpuChoiceError, cuda_environment, resolve_choice
from .snapshot import HostSnapshot


@dataclass(frozen=True)
class GpuPlan:
    """The GPUs a run gets and the warnings about them (busy GPUs, with who holds them)."""

    indices: tuple[int, ...]
    warnings: list[str] = field(default_factory=list)

    def settings(self, settings: dict) -> dict:
        """``settings`` with these GPUs: ``gpus``, ``nproc_per_node`` and CUDA_VISIBLE_DEVICES in ``env``."""
        return with_gpus(settings, self.indices)


def choice_count(choice: GpuChoice) -> int:
    return choice.free_count if choice.free_count is not None else len(choice.indices)


def check_nproc(choice: GpuChoice, nproc: int | list[int] | None) -> None:
    """Refuse a process count (or a sweep's list of them) other than the number of GPUs chosen."""
    count = choice_count(choice)
    values = nproc if isinstance(nproc, list) else [] if nproc is None else [nproc]
    for value in values:
        if value != count:
            raise GpuChoiceError(f"--nproc {value} and --gpus {choice} disagree: {count} GPU{'s' if count != 1 else ''}"
                                 f" for {value} process{'es' if value != 1 else ''} per node",
                                 f"a run has one process per GPU: leave out --nproc (it follows --gpus), or "
                                 f"choose {value} GPU{'s' if value != 1 else ''}")


def check_env(choice: GpuChoice, env: dict | None) -> None:
    """Refuse an explicit CUDA_VISIBLE_DEVICES beside ``--gpus`` (which of the two would the run get?)."""
    if env and "CUDA_VISIBLE_DEVICES" in env:
        raise GpuChoiceError(f"--gpus {choice} and --env CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} "
                             "both choose the run's GPUs", "give one of them; --gpus sets CUDA_VISIBLE_DEVICES")


def plan_gpus(snapshots: dict[str, HostSnapshot], choice: GpuChoice,
              nproc: int | list[int] | None = None) -> GpuPlan:
    """The run's GPUs on these hosts (one snapshot each), its warnings; :class:`GpuChoiceError` if it cannot."""
    check_nproc(choice, nproc)
    if not snapshots:
        raise GpuChoiceError("no host to choose GPUs on", "name the host")
    picked: dict[str, tuple[int, ...]] = {}
    warnings: list[str] = []
    for host, snapshot in snapshots.items():
        indices, said = resolve_choice(snapshot, choice)
        picked[host] = indices
        prefix = f"{host}: " if len(snapshots) > 1 else ""
        warnings.extend(prefix + warning for warning in said)
    distinct = set(picked.values())
    if len(distinct) > 1:
        found = "; ".join(f"{host}: {','.join(map(str, ids))}" for host, ids in picked.items())
        raise GpuChoiceError(f"--gpus {choice} picks different GPUs on different hosts ({found}), and the run "
                             "gets one choice for all of them", "name the GPUs, e.g. --gpus "
                             + ",".join(map(str, next(iter(picked.values())))) + " (a busy one only warns)")
    return GpuPlan(indices=next(iter(distinct)), warnings=warnings)


def with_gpus(settings: dict, indices: tuple[int, ...] | list[int]) -> dict:
    """``settings`` (the dict ``make_config`` takes) for a run on these GPUs."""
    env = dict(settings.get("env") or {})
    env.update(cuda_environment(tuple(indices)))
    return dict(settings, gpus=list(indices), nproc_per_node=len(indices), env=env)
