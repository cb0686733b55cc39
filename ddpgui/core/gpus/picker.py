"""Which GPUs of a host a run gets: named indices (``--gpus 0,3``) or any N free ones (``--gpus free:2``).

"Free" is :meth:`GpuState.is_free` (ddpgui.core.gpus.snapshot).  Among the free GPUs ``free:N`` takes the
ones with the fewest processes, then the least memory used, ties broken by utilisation, then by index.
Naming a busy GPU is allowed but warns with who holds it; naming a GPU the host does not have, or one that
is lost or in error, is refused.  The run's ranks then see ``CUDA_VISIBLE_DEVICES`` in nvidia-smi's order
(:func:`cuda_environment`).  ``free:N``'s order and the environment are the runner's (remote_runner/placement.py),
shared with the host's own queue.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from remote_runner.placement import cuda_environment, free_order

from .snapshot import FREE_MEMORY_MIB, HostSnapshot

__all__ = ["GpuChoice", "GpuChoiceError", "check_indices", "cuda_environment", "free_order", "parse_gpu_choice",
           "pick_free", "resolve_choice"]


class GpuChoiceError(ValueError):
    """A GPU choice that cannot be used; ``hint`` says what would work."""

    field = "gpus"

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class GpuChoice:
    """``indices`` named by the user, or ``free_count`` GPUs to be chosen when the run starts."""

    indices: tuple[int, ...] = ()
    free_count: int | None = None

    def __str__(self) -> str:
        return f"free:{self.free_count}" if self.free_count is not None else ",".join(map(str, self.indices))


_FORMS_HINT = "write GPU indices as nvidia-smi numbers them, e.g. --gpus 0,3, or any N free ones: --gpus free:2"


def parse_gpu_choice(text: str) -> GpuChoice:
    """``"0,3"`` or ``"free:2"`` (the ``--gpus`` value); :class:`GpuChoiceError` for anything else."""
    value = text.strip()
    if not value:
        raise GpuChoiceError("--gpus is empty", _FORMS_HINT)
    if value.lower().startswith("free"):
        match = re.fullmatch(r"free:(\d+)", value, re.IGNORECASE)
        if match is None:
            raise GpuChoiceError(f"--gpus {text!r}: 'free' needs a count, as in free:2", _FORMS_HINT)
        count = int(match.group(1))
        if count < 1:
            raise GpuChoiceError(f"--gpus {text!r}: a run needs at least one GPU", _FORMS_HINT)
        return GpuChoice(free_count=count)
    parts = [part.strip() for part in value.split(",")]
    bad = [part for part in parts if not part.isdigit()]
    if bad:
        raise GpuChoiceError(f"--gpus {text!r}: {bad[0]!r} is not a GPU index" if bad[0] else
                             f"--gpus {text!r}: an index is missing between two commas", _FORMS_HINT)
    indices = tuple(int(part) for part in parts)
    repeated = sorted({i for i in indices if indices.count(i) > 1})
    if repeated:
        raise GpuChoiceError(f"--gpus {text!r}: GPU {repeated[0]} is named twice", "name each GPU once")
    return GpuChoice(indices=indices)


def pick_free(snapshot: HostSnapshot, count: int, memory_threshold_mib: int = FREE_MEMORY_MIB) -> tuple[int, ...]:
    """The indices of ``count`` free GPUs in :func:`free_order`, or :class:`GpuChoiceError` naming what is busy."""
    free = sorted((gpu for gpu in snapshot.free_gpus(memory_threshold_mib) if gpu.index is not None), key=free_order)
    if len(free) >= count:
        return tuple(gpu.index for gpu in free[:count])
    if not snapshot.gpus:
        raise GpuChoiceError(f"{snapshot.host} has no GPUs", "run on the CPU, or choose a host with GPUs")
    found = ", ".join(str(gpu.index) for gpu in free) or "none"
    busy = "; ".join(f"GPU {gpu.index}: {gpu.busy_reason(memory_threshold_mib)}" for gpu in snapshot.gpus
                     if not gpu.is_free(memory_threshold_mib))
    raise GpuChoiceError(f"free:{count} asks for {count} free GPUs, but {snapshot.host} has "
                         f"{len(free)} of {len(snapshot.gpus)} free ({found}); busy: {busy}",
                         "ask for fewer, name GPUs with --gpus 0,3 (a busy one only warns), or wait for some "
                         "to be freed")


def check_indices(snapshot: HostSnapshot, indices: tuple[int, ...],
                  memory_threshold_mib: int = FREE_MEMORY_MIB) -> list[str]:
    """Warnings, one per busy GPU among ``indices``; :class:`GpuChoiceError` for a GPU that cannot be used."""
    have = sorted(gpu.index for gpu in snapshot.gpus if gpu.index is not None)
    warnings = []
    for index in indices:
        gpu = snapshot.gpu(index)
        if gpu is None:
            listed = ", ".join(map(str, have)) if have else "none"
            lost = [g for g in snapshot.gpus if g.index is None and g.state != "ok"]
            also = "".join(f"; a GPU without an index (bus {g.bus_id or '?'}) {g.busy_reason()}" for g in lost)
            raise GpuChoiceError(f"{snapshot.host} has no GPU {index} (its GPUs: {listed}){also}",
                                 "choose among the GPUs the host monitor shows")
        if gpu.state != "ok":
            raise GpuChoiceError(f"GPU {index} of {snapshot.host} cannot run anything: {gpu.busy_reason()}",
                                 "choose another GPU; a lost GPU comes back only after the host is rebooted")
        reason = gpu.busy_reason(memory_threshold_mib)
        if reason is not None:
            warnings.append(f"GPU {index} is busy: {reason}")
    return warnings


def resolve_choice(snapshot: HostSnapshot, choice: GpuChoice,
                   memory_threshold_mib: int = FREE_MEMORY_MIB) -> tuple[tuple[int, ...], list[str]]:
    """``(indices, warnings)`` of a choice on this snapshot of the host."""
    if choice.free_count is not None:
        return pick_free(snapshot, choice.free_count, memory_threshold_mib), []
    return choice.indices, check_indices(snapshot, choice.indices, memory_threshold_mib)
