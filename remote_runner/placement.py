"""Where a parallel sweep's cell runs on a host with GPUs: the rules, one copy for both sides.

The host's queue (remote_runner.queue) places its parallel cells with them on a snapshot it takes itself
(:class:`HostGpus`); the client (ddpgui.core.gpus.placement) places the cells it launches itself (This computer)
with the same functions, on the snapshots of its host monitor.  Both kinds of GPU entry serve: the dicts the
host monitor writes (remote_runner.gpustate) and the client's parsed ``GpuState``; a field is read by its name.

- A GPU is free (:func:`busy_reason` is None) when its state is "ok", no compute process is on it (when its
  processes could be seen) and less than ``FREE_MEMORY_MIB`` of its memory is used: the memory rule catches
  the processes the driver does not list to us; 1 GiB is more than a display server takes and less than a model.
- A cell asks for as many GPUs as it has processes per node (:func:`gpu_request`), among every GPU of the host
  or those its CUDA_VISIBLE_DEVICES names; one whose config names its GPUs (``gpus``) takes exactly those.
- :func:`place` leaves out the GPUs the sweep's running cells hold (a fresh snapshot shows them busy with the
  sweep's own processes, an older one may still show them free), keeps the free ones and takes them in
  ``free:N``'s order (:func:`free_order`: fewest processes, least memory used, lowest utilisation, lowest
  index).  Too few free: the cell waits and :class:`Placement` says why in words; more than the host (or the
  named GPUs) could ever hold: it is refused, in words.  A cell naming its GPUs waits only while a running
  cell of the sweep holds one of them.
- A placed cell's config gets the GPUs (:func:`on_gpus`): ``gpus``, ``nproc_per_node`` and CUDA_VISIBLE_DEVICES
  in nvidia-smi's order (:func:`cuda_environment`).

Standard library only; Python 3.9.
"""
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional

#: A GPU with at least this much memory used is busy, whatever its process list says.
FREE_MEMORY_MIB = 1024
#: Busy GPUs a waiting cell's reason names one by one (the rest are counted).
NAMED_BUSY = 3
#: Who holds the GPUs left out, in a waiting cell's reason.
HELD_BY = "the sweep's running cells"
#: The host queue's looks at its GPUs: a snapshot at most this often, and only while a cell waits for GPUs.
LOOK_S = 2.0
#: How long a newly opened GPU source may take for its first whole table (nvidia-smi without its daemon).
FIRST_LOOK_WAIT_S = 30.0


def _get(entry: object, key: str) -> object:
    """A field of a GPU or process entry: a dict (the runner's) or an object (the client's)."""
    return entry.get(key) if isinstance(entry, dict) else getattr(entry, key, None)


def process_words(process: object) -> str:
    """``alice's python train.py (pid 4242, 15992 MiB)``; an owner that could not be read is "an unknown user"."""
    memory = _get(process, "gpu_mem_mib")
    user = _get(process, "user")
    return "%s's %s (pid %s%s)" % ("an unknown user" if user == "?" else user, _get(process, "command"),
                                   _get(process, "pid"), "" if memory is None else ", %s MiB" % memory)


def busy_reason(gpu: object, memory_threshold_mib: int = FREE_MEMORY_MIB) -> Optional[str]:
    """Why this GPU is not free, in words; None when it is free (the rule is in the module docstring)."""
    state, message = _get(gpu, "state"), _get(gpu, "message")
    if state != "ok":
        said = "it is lost" if state == "lost" else "it reports errors"
        return "%s: %s" % (said, message) if message else said
    processes = _get(gpu, "processes")
    if processes:
        return "; ".join(process_words(p) for p in processes)
    used, total, util = _get(gpu, "mem_used_mib"), _get(gpu, "mem_total_mib"), _get(gpu, "util_pct")
    if used is not None and used >= memory_threshold_mib:
        return "%s MiB%s used%s%s" % (used, "" if total is None else " of %s MiB" % total,
                                      "" if util is None else ", %s%% utilised" % format(util, "g"),
                                      " (its processes are not visible)" if processes is None else "")
    return None


def is_free(gpu: object, memory_threshold_mib: int = FREE_MEMORY_MIB) -> bool:
    return busy_reason(gpu, memory_threshold_mib) is None


def free_order(gpu: object) -> tuple:
    """The sort key of ``free:N``: fewest processes, least memory used, lowest utilisation, lowest index."""
    used, util = _get(gpu, "mem_used_mib"), _get(gpu, "util_pct")
    return (len(_get(gpu, "processes") or ()), float("inf") if used is None else used,
            float("inf") if util is None else util, _get(gpu, "index"))


def cuda_environment(indices: Iterable[int]) -> dict:
    """The environment that gives a run these GPUs, numbered as nvidia-smi numbers them.

    CUDA's own order is fastest first; ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes it nvidia-smi's (bus) order,
    so index 3 here is the GPU nvidia-smi calls 3.
    """
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(map(str, indices))}


def on_gpus(config: dict, indices: Iterable[int]) -> dict:
    """``config`` (config.json's keys, or the client's run settings) for a run on these GPUs, one process each."""
    indices = list(indices)
    env = dict(config.get("env") or {})
    env.update(cuda_environment(indices))
    return dict(config, gpus=indices, nproc_per_node=len(indices), env=env)


@dataclass(frozen=True)
class GpuRequest:
    """What a cell asks of a GPU host: ``count`` GPUs among ``pool`` (None: any of the host's);
    ``fixed``: the cell's config names its GPUs, so ``pool`` is exactly what it takes."""

    count: int
    pool: Optional[tuple] = None
    fixed: bool = False


def gpu_request(config: dict) -> Optional[GpuRequest]:
    """The GPUs a parallel sweep's cell asks for, from its config (``gpus`` as a list of indices); None when it
    places itself (CUDA_VISIBLE_DEVICES naming UUIDs or MIG devices, or none at all: a CPU run)."""
    gpus = config.get("gpus")
    if gpus:
        return GpuRequest(len(gpus), tuple(gpus), fixed=True)
    count = int(config.get("nproc_per_node") or 1)
    visible = (config.get("env") or {}).get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return GpuRequest(count)
    parts = [part.strip() for part in str(visible).split(",")]
    if not all(part.isdigit() for part in parts):
        return None
    return GpuRequest(count, tuple(int(part) for part in parts))


@dataclass(frozen=True)
class Placement:
    """A decision for one cell: launch on ``gpus``, or wait (``waiting`` says why; empty while the host's first
    snapshot is on its way), or never on this host (``refused``); ``room``: the GPUs it could run on at all."""

    gpus: tuple = ()
    waiting: str = ""
    refused: str = ""
    hint: str = ""
    room: int = 0


def plural(count: int, word: str, words: str = "") -> str:
    return "%d %s" % (count, word if count == 1 else words or word + "s")


def among(pool: Optional[tuple]) -> str:
    return "" if pool is None else " (among GPUs %s)" % ",".join(map(str, pool))


def usable(gpus: Iterable[object], pool: Optional[tuple]) -> tuple:
    """(the pool's GPUs that can run something, those lost or in error: a lost one may have lost its index)."""
    mine = []
    for gpu in gpus:
        index = _get(gpu, "index")
        if (index is None and _get(gpu, "state") != "ok" and pool is None) or \
                (index is not None and (pool is None or index in pool)):
            mine.append(gpu)
    return [g for g in mine if _get(g, "state") == "ok"], [g for g in mine if _get(g, "state") != "ok"]


def gpu_name(gpu: object) -> str:
    index = _get(gpu, "index")
    return "GPU %s" % index if index is not None else \
        "a GPU without an index (bus %s)" % (_get(gpu, "bus_id") or "?")


def refusal(host: str, gpus: Iterable[object], request: GpuRequest) -> Optional[tuple]:
    """(how few GPUs the host has for the request, a hint) when it has too few; None when it has enough."""
    good, lost = usable(gpus, request.pool)
    if len(good) >= request.count:
        return None
    said = "".join("; %s: %s" % (gpu_name(g), busy_reason(g)) for g in lost)
    hint = ("name more GPUs with --gpus, or give the cells fewer processes (--nproc)" if request.pool is not None
            else "give the cells fewer processes (--nproc), or sweep on a host with more GPUs")
    return "%s has %d%s that can run it%s" % (host, len(good), among(request.pool), said), hint


def place(host: str, gpus: Iterable[object], request: GpuRequest, held: Iterable[int] = (),
          memory_threshold_mib: int = FREE_MEMORY_MIB, held_by: str = HELD_BY) -> Placement:
    """The GPUs of ``host`` (as the client names it) for a cell asking ``request``, among ``gpus`` (one snapshot
    of them), leaving out ``held`` (the GPUs running cells hold there: ``held_by`` says whose)."""
    gpus, held = list(gpus), frozenset(held)
    good, lost = usable(gpus, request.pool)
    room = len(good)
    refused = refusal(host, gpus, request)
    if refused is not None:
        return Placement(refused="not launched: it needs %s, but %s" % (plural(request.count, "GPU"), refused[0]),
                         hint=refused[1], room=room)
    if request.fixed:
        taken = [i for i in request.pool if i in held]
        if not taken:
            return Placement(gpus=tuple(request.pool), room=room)
        return Placement(waiting="waiting for GPUs %s on %s: %s %s held by %s" % (
            ",".join(map(str, request.pool)), host, "GPU" if len(taken) == 1 else "GPUs", ",".join(map(str, taken)),
            held_by), hint="it starts when they end", room=room)
    candidates = [g for g in good if _get(g, "index") not in held]
    free = [g for g in candidates if is_free(g, memory_threshold_mib)]
    if len(free) >= request.count:
        return Placement(gpus=tuple(_get(g, "index") for g in sorted(free, key=free_order)[:request.count]),
                         room=room)
    busy = [g for g in candidates if not is_free(g, memory_threshold_mib)]
    parts = ["%d free" % len(free) + (" (%s)" % ",".join(str(_get(g, "index")) for g in free) if free else "")]
    if len(good) > len(candidates):
        parts.append("%d held by %s" % (len(good) - len(candidates), held_by))
    if busy:
        named = "; ".join("GPU %s: %s" % (_get(g, "index"), busy_reason(g, memory_threshold_mib))
                          for g in busy[:NAMED_BUSY])
        more = "; %d more" % (len(busy) - NAMED_BUSY) if len(busy) > NAMED_BUSY else ""
        parts.append("%d busy (%s%s)" % (len(busy), named, more))
    if lost:
        parts.append("%d lost or in error" % len(lost))
    return Placement(waiting="waiting for %s on %s%s: %s" % (plural(request.count, "free GPU"), host,
                                                             among(request.pool), ", ".join(parts)),
                     hint="it starts when GPUs are freed; see who holds them with: ddpgui gpus %s" % host, room=room)


def unseen(host: str, message: str, hint: str = "") -> Placement:
    """A cell that waits because the host's GPUs could not be looked at (``message`` says why)."""
    return Placement(waiting="waiting to see which GPUs of %s are free: %s" % (host, message),
                     hint=hint or "it is tried again in a few seconds")


class HostGpus:
    """This host's GPUs as the queue process sees them: a GPU source of the host monitor (NVML, else nvidia-smi's
    two streams: remote_runner.gpumonitor) opened while a cell waits for GPUs and closed when none does, looked at
    at most every ``look_s``; a look older than the last time GPUs were let go is not used (it may still show the
    ended cell's processes).  ``count``: the GPUs the first look found; a host where it found none (no NVML, no
    nvidia-smi, or no GPU listed) is a CPU host for the process's life, as the client looks at one once."""

    def __init__(self, look_s: float = LOOK_S):
        self.look_s = look_s
        self.source = None
        self.opened_at = 0.0
        self.at = float("-inf")
        self.gpus: Optional[list] = None
        self.errors: list = []
        self.count: Optional[int] = None
        self.released_at = float("-inf")

    def release(self) -> None:
        """GPUs were let go: the next decision waits for a look taken since."""
        self.released_at = time.monotonic()

    def look(self) -> Optional[tuple]:
        """(GPU entries, problems); None while the first whole table, or one newer than the last release, is on
        its way.  ``([], [])`` on a CPU host."""
        if self.count == 0:
            return [], []
        now = time.monotonic()
        if self.source is None:
            from .gpumonitor import open_source

            self.source, self.opened_at, self.gpus = open_source("auto", self.look_s), now, None
        if not getattr(self.source, "ready", lambda: True)() and now - self.opened_at < FIRST_LOOK_WAIT_S:
            return None
        fresh = self.released_at + (self.look_s if self.source.name == "nvidia-smi" else 0.0)
        if self.gpus is None or now - self.at >= self.look_s or self.at < fresh <= now:
            self.gpus, _, self.errors = self.source.sample()
            self.at = now
        if self.at < fresh:
            return None
        if self.count is None:
            self.count = len(self.gpus)
        if not self.count:
            self.close()
        return self.gpus, self.errors

    def close(self) -> None:
        if self.source is not None:
            self.source.close()
            self.source, self.gpus = None, None


def capacity(gpu_count: int) -> int:
    """Processes a host runs side by side when its cells are not placed on GPUs: its GPUs, else its CPUs."""
    return max(1, gpu_count or os.cpu_count() or 1)
