"""A sweep's GPU choice made into its shared settings before it is planned: ``ddpgui sweep --gpus`` and the app's
sweep dialog (whose settings carry the launch form's ``gpus``: indices, or ``"free:N"``) alike.

A serial sweep gives every cell the same GPUs, resolved and checked on one snapshot of each host as a launch
is (:func:`~ddpgui.core.gpus.launching.resolve_gpus`: a busy GPU warns, a missing or lost one refuses).  A
``parallel`` sweep places each cell on GPUs of its own when it starts (ddpgui.core.gpus.placement): indices
name the GPUs the cells are placed on (the cells' CUDA_VISIBLE_DEVICES, which each narrows to its own),
``free:N`` makes every cell N processes on N free GPUs; what the hosts can never meet is refused now.
"""
from __future__ import annotations

from ..gpus.launching import (
    check_env,
    check_nproc,
    pool_snapshot_of,
    refuse_slurm,
    resolve_gpus,
    settings_choice,
    without_gpu_env,
)
from ..gpus.picker import GpuChoice, cuda_environment
from ..gpus.placement import GpuRequest, check_request
from .plan import SweepSpec


def sweep_gpus(spec: SweepSpec, manager, choice: GpuChoice | None = None) -> tuple[dict, list[str]]:
    """``(base, warnings)``: the sweep's shared settings on ``choice`` (``--gpus``), else on its settings' own
    ``gpus``; the base as it is without either.  :class:`~ddpgui.core.gpus.picker.GpuChoiceError` says what
    cannot run (nothing was started)."""
    base = spec.base
    if choice is None:
        base = without_gpu_env(base)
        choice = settings_choice(base)
        if choice is None:
            return base, []
        base = {key: value for key, value in base.items() if key not in ("gpus", "gpu_choice")}
    if spec.parallel:
        return parallel_base(choice, spec.hosts, base, spec.matrix, manager), []
    return resolve_gpus(base, spec.hosts, pool_snapshot_of(manager.targets), manager.is_slurm, choice=choice,
                        nproc=spec.matrix.get("nproc_per_node"))


def parallel_base(choice: GpuChoice, hosts: list[str], base: dict, matrix: dict, manager) -> dict:
    """The shared settings of a parallel sweep on ``choice``, checked on one snapshot of each host: a Slurm
    cluster, a contradiction, a GPU a host lacks or has lost, or more GPUs than it has are refused; busy GPUs
    are waited for when the cells start."""
    refuse_slurm(hosts, manager.is_slurm)
    nproc = matrix.get("nproc_per_node") or base.get("nproc_per_node")
    check_env(choice, base.get("env"))
    if choice.free_count is not None:
        check_nproc(choice, nproc)
        base, request = dict(base, nproc_per_node=choice.free_count), GpuRequest(choice.free_count)
    else:
        env = {**(base.get("env") or {}), **cuda_environment(choice.indices)}
        widest = max(nproc if isinstance(nproc, list) else [nproc or 1])
        base, request = dict(base, env=env), GpuRequest(widest, choice.indices)
    snapshot_of = pool_snapshot_of(manager.targets)
    for host in hosts:
        check_request(host, snapshot_of(host), request)
    return base
