"""A launch's GPU choice (``--gpus 0,3`` / ``free:2``) made into run settings, against snapshots of its hosts.

One process per GPU: the number of processes per node follows the choice, and a different ``nproc`` is a
contradiction, refused naming both.  ``free:N`` is resolved on one snapshot of each host (HostMonitor's
:func:`~ddpgui.core.gpus.monitor.snapshot_once`); a run (multi-node, or a sweep over several hosts) gets one
set of indices, so hosts whose free GPUs differ are refused with a hint to name them.  The settings get
``gpus`` (stored with the run) and the matching CUDA_VISIBLE_DEVICES in ``env``.

:func:`resolve_gpus` is the whole check, shared by ``ddpgui launch/sweep --gpus`` and the app's launch and
rerun.  The app's launch form stores its choice in the settings as ``gpus``: a list of indices ("Choose…"),
or ``"free:N"`` ("Any N free", resolved when the run starts); "All visible" leaves ``gpus`` out.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from remote_runner.placement import on_gpus

from .monitor import snapshot_once
from .picker import GpuChoice, GpuChoiceError, cuda_environment, parse_gpu_choice, resolve_choice
from .snapshot import HostSnapshot


@dataclass(frozen=True)
class GpuPlan:
    """The GPUs a run gets and the warnings about them (busy GPUs, with who holds them)."""

    indices: tuple[int, ...]
    warnings: list[str] = field(default_factory=list)
    #: What was asked for (``free:2`` is kept with the run as ``gpu_choice``).
    choice: GpuChoice | None = None

    def settings(self, settings: dict) -> dict:
        """``settings`` with these GPUs: ``gpus``, ``nproc_per_node`` and CUDA_VISIBLE_DEVICES in ``env``."""
        return with_gpus(settings, self.indices, self.choice)


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
    return GpuPlan(indices=next(iter(distinct)), warnings=warnings, choice=choice)


def with_gpus(settings: dict, indices: tuple[int, ...] | list[int], choice: GpuChoice | None = None) -> dict:
    """``settings`` (the dict ``make_config`` takes) for a run on these GPUs; chosen as ``free:N`` (``choice``),
    that is kept as ``gpu_choice``, so a rerun or a duplicate picks free GPUs again."""
    chosen = {"gpu_choice": str(choice)} if choice is not None and choice.free_count is not None else {}
    kept = {key: value for key, value in settings.items() if key != "gpu_choice"}
    return dict(on_gpus(kept, indices), **chosen)  # the runner's, as the host's queue places a cell


def settings_choice(settings: dict) -> GpuChoice | None:
    """The GPU choice stored in run settings as ``gpus``: a list of indices (a stored run's, the launch form's
    "Choose…"), or the text ``"free:N"`` / ``"0,3"`` (the form's "Any N free"); None without one."""
    if isinstance(settings.get("gpu_choice"), str):  # a run whose GPUs were any N free ones: free ones again
        return parse_gpu_choice(settings["gpu_choice"])
    value = settings.get("gpus")
    if value is None:
        return None
    if isinstance(value, str):
        return parse_gpu_choice(value)
    if not isinstance(value, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise GpuChoiceError(f"gpus: expected GPU indices or 'free:N', got {value!r}",
                             "a list of nvidia-smi's indices such as [0, 3], or free:2 for any 2 free GPUs")
    return parse_gpu_choice(",".join(map(str, value))) if value else GpuChoice()


def without_gpu_env(settings: dict) -> dict:
    """``settings`` without the environment :func:`with_gpus` wrote for its ``gpus`` (a stored run's, rerun or
    duplicated: that CUDA_VISIBLE_DEVICES came from the choice, not from the user); anything else is kept."""
    gpus, env = settings.get("gpus"), settings.get("env")
    if not isinstance(gpus, list) or not env or env.get("CUDA_VISIBLE_DEVICES") != ",".join(map(str, gpus)):
        return settings
    written = cuda_environment(tuple(gpus))
    kept = {key: value for key, value in env.items() if written.get(key) != value}
    return dict(settings, env=kept or None)


def resolve_gpus(settings: dict, hosts: list[str], snapshot_of: Callable[[str], HostSnapshot],
                 is_slurm: Callable[[str], bool], choice: GpuChoice | None = None,
                 nproc: int | list[int] | None = None) -> tuple[dict, list[str]]:
    """``(settings, warnings)`` for a launch on the chosen GPUs of ``hosts``: the CLI's ``--gpus`` and the app's
    launch (and rerun) alike.

    The choice is ``choice`` (``--gpus``), else the settings' ``gpus`` (:func:`settings_choice`; the environment a
    stored run's ``gpus`` wrote is dropped first, so a rerun checks its GPUs again); without either the settings
    come back as they are.  Each host is snapshotted once (``snapshot_of``); :class:`GpuChoiceError` refuses a
    Slurm cluster (its scheduler gives the GPUs), a process count (``nproc``, else the settings') or a
    CUDA_VISIBLE_DEVICES that contradicts the choice, and GPUs that are missing, lost or not free enough.  The
    warnings name who holds a busy GPU chosen by index; they do not block."""
    settings = without_gpu_env(settings)  # what a stored run's own ``gpus`` wrote is never a second choice
    if choice is None:
        choice = settings_choice(settings)
        if choice is None:
            return settings, []
    refuse_slurm(hosts, is_slurm)
    check_nproc(choice, settings.get("nproc_per_node") if nproc is None else nproc)
    check_env(choice, settings.get("env"))
    plan = plan_gpus({host: snapshot_of(host) for host in hosts}, choice)
    return plan.settings(settings), plan.warnings


def refuse_slurm(hosts: list[str], is_slurm: Callable[[str], bool]) -> None:
    """A GPU choice on a Slurm cluster is refused: there the scheduler gives a job its GPUs."""
    slurm = [host for host in hosts if is_slurm(host)]
    if slurm:
        raise GpuChoiceError(f"--gpus on {slurm[0]}, a Slurm cluster: there the scheduler gives a job its GPUs",
                             "leave out --gpus; set the GPUs per node in the host profile's Slurm options")


def pool_snapshot_of(pool) -> Callable[[str], HostSnapshot]:
    """``snapshot_of`` for :func:`resolve_gpus` over a TargetPool's connections (``pool.target(host)``)."""
    return lambda host: snapshot_once(host, lambda: pool.target(host))
