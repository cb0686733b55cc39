"""One host snapshot of the host monitor (a JSON line of ``remote_runner monitor``), parsed and checked.

The line's format is docs/PROTOCOL.md "Host monitor".  :func:`parse_snapshot_line` turns it into frozen
dataclasses or raises :class:`SnapshotError` naming the field that is wrong.

When is a GPU free?  :meth:`GpuState.busy_reason` is None, that is: its state is "ok" (not lost, no error),
no compute process is on it (when the monitor could see its processes), and less than
``FREE_MEMORY_MIB`` of its memory is used (1 GiB: more than a display server takes, Xorg and a desktop shell
about 130 MiB, and less than any model's weights and activations).  The rule is the runner's
(remote_runner/placement.py), so the host's own queue and this client call the same GPUs free.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from remote_runner import placement
from remote_runner.placement import FREE_MEMORY_MIB

#: The snapshot versions this client reads.
SUPPORTED_VERSIONS = (1,)
GPU_STATES = ("ok", "lost", "error")


class SnapshotError(ValueError):
    """A monitor line that is not a snapshot this client can read; ``hint`` says what to do."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class GpuProcess:
    """A process on a GPU; ``user`` / ``command`` are "?" with ``problem`` saying why when unreadable."""

    pid: int
    user: str
    command: str
    gpu_mem_mib: int | None
    problem: str | None = None

    def describe(self) -> str:
        """``alice's python train.py (pid 4242, 15992 MiB)``; an owner that could not be read is "an unknown user"."""
        return placement.process_words(self)


@dataclass(frozen=True)
class MigDevice:
    """A MIG device of a GPU: GPU instance, compute instance, its index and its memory."""

    gi: int | None
    ci: int | None
    dev: int | None
    mem_used_mib: int | None
    mem_total_mib: int | None


@dataclass(frozen=True)
class GpuState:
    """One GPU of a snapshot; None where the host did not report a value; ``processes`` None when unknown."""

    index: int | None
    uuid: str | None
    name: str | None
    bus_id: str | None
    util_pct: float | None
    mem_used_mib: int | None
    mem_total_mib: int | None
    power_w: float | None
    temp_c: float | None
    mig_mode: str | None
    mig_devices: tuple[MigDevice, ...]
    state: str
    message: str | None
    processes: tuple[GpuProcess, ...] | None

    def busy_reason(self, memory_threshold_mib: int = FREE_MEMORY_MIB) -> str | None:
        """Why this GPU is not free, in words (None when it is free): the runner's rule,
        :func:`remote_runner.placement.busy_reason`."""
        return placement.busy_reason(self, memory_threshold_mib)

    def is_free(self, memory_threshold_mib: int = FREE_MEMORY_MIB) -> bool:
        return self.busy_reason(memory_threshold_mib) is None


@dataclass(frozen=True)
class TopProcess:
    """One of the host's busiest processes (CPU hosts and GPU hosts alike)."""

    pid: int
    user: str
    command: str
    cpu_pct: float | None
    rss_mib: float | None


@dataclass(frozen=True)
class CpuState:
    """The host's load averages, CPU count, memory (MiB) and top processes."""

    load_1m: float | None
    load_5m: float | None
    load_15m: float | None
    cpu_count: int | None
    mem_used_mib: int | None
    mem_total_mib: int | None
    top: tuple[TopProcess, ...]


@dataclass(frozen=True)
class HostSnapshot:
    """A host at one moment: its GPUs (empty on a CPU host) and its CPU side."""

    version: int
    seq: int
    t: float
    host: str
    source: str
    gpus: tuple[GpuState, ...]
    unplaced_processes: tuple[GpuProcess, ...]
    cpu: CpuState | None
    errors: tuple[str, ...]

    def gpu(self, index: int) -> GpuState | None:
        return next((gpu for gpu in self.gpus if gpu.index == index), None)

    def free_gpus(self, memory_threshold_mib: int = FREE_MEMORY_MIB) -> list[GpuState]:
        return [gpu for gpu in self.gpus if gpu.is_free(memory_threshold_mib)]

    def summary(self, memory_threshold_mib: int = FREE_MEMORY_MIB) -> str:
        """``3 of 8 GPUs free`` (``no GPUs`` on a CPU host) for the hosts panel."""
        if not self.gpus:
            return "no GPUs"
        total = len(self.gpus)
        return f"{len(self.free_gpus(memory_threshold_mib))} of {total} GPU{'s' if total != 1 else ''} free"


def parse_snapshot_line(line: str | bytes) -> HostSnapshot:
    """A snapshot from one line the monitor printed; :class:`SnapshotError` says what is wrong with it."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        shown = line[:80] if isinstance(line, str) else line[:80].decode("utf-8", "replace")
        raise SnapshotError(f"the host monitor printed a line that is not JSON ({exc}): {shown!r}",
                            "the runner on that host may be broken; deploy it again (Test connection)") from exc
    return parse_snapshot(obj)


def parse_snapshot(obj: object) -> HostSnapshot:
    """A snapshot from the decoded JSON object."""
    reader = _Reader(obj, "snapshot")
    version = reader.value("v", int)
    if version not in SUPPORTED_VERSIONS:
        raise SnapshotError(f"the host monitor wrote snapshot version {version}; this ddpgui reads "
                            f"{', '.join(map(str, SUPPORTED_VERSIONS))}",
                            "update ddpgui, or deploy this ddpgui's runner to the host again")
    if reader.value("kind", str) != "host_snapshot":
        raise SnapshotError(f"snapshot.kind: expected 'host_snapshot', got {obj.get('kind')!r}")
    cpu = reader.get("cpu")
    return HostSnapshot(
        version=version, seq=reader.value("seq", int), t=reader.value("t", float), host=reader.value("host", str),
        source=reader.value("source", str),
        gpus=tuple(_gpu(_Reader(g, f"gpus[{i}]")) for i, g in enumerate(reader.value("gpus", list))),
        unplaced_processes=tuple(_process(_Reader(p, f"unplaced_processes[{i}]"))
                                 for i, p in enumerate(reader.value("unplaced_processes", list, default=[]))),
        cpu=None if cpu is None else _cpu(_Reader(cpu, "cpu")),
        errors=tuple(str(e) for e in reader.value("errors", list, default=[])))


class _Reader:
    """Typed access to one JSON object; every error names the path of the field."""

    def __init__(self, obj: object, path: str):
        if not isinstance(obj, dict):
            raise SnapshotError(f"{path}: expected an object, got {json.dumps(obj)[:60]}")
        self.obj, self.path = obj, path

    def get(self, key: str) -> object:
        return self.obj.get(key)

    def value(self, key: str, kind: type, optional: bool = False, default: object = ...) -> object:
        if key not in self.obj or (self.obj[key] is None and (optional or default is not ...)):
            if optional:
                return None
            if default is not ...:
                return default
            raise SnapshotError(f"{self.path}.{key} is missing", "the host's runner is older or newer than this "
                                "ddpgui; deploy this ddpgui's runner to the host again")
        value = self.obj[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            expected = {int: "a whole number", float: "a number", str: "text", list: "a list"}.get(kind, str(kind))
            raise SnapshotError(f"{self.path}.{key}: expected {expected}, got {json.dumps(value)[:60]}")
        return value


def _gpu(r: _Reader) -> GpuState:
    state = r.value("state", str)
    if state not in GPU_STATES:
        raise SnapshotError(f"{r.path}.state: expected one of {', '.join(GPU_STATES)}, got {state!r}")
    processes = r.value("processes", list, optional=True)
    return GpuState(
        index=r.value("index", int, optional=True), uuid=r.value("uuid", str, optional=True),
        name=r.value("name", str, optional=True), bus_id=r.value("bus_id", str, optional=True),
        util_pct=r.value("util_pct", float, optional=True), mem_used_mib=r.value("mem_used_mib", int, optional=True),
        mem_total_mib=r.value("mem_total_mib", int, optional=True), power_w=r.value("power_w", float, optional=True),
        temp_c=r.value("temp_c", float, optional=True), mig_mode=r.value("mig_mode", str, optional=True),
        mig_devices=tuple(_mig(_Reader(m, f"{r.path}.mig_devices[{i}]"))
                          for i, m in enumerate(r.value("mig_devices", list, default=[]))),
        state=state, message=r.value("message", str, optional=True),
        processes=None if processes is None else tuple(_process(_Reader(p, f"{r.path}.processes[{i}]"))
                                                       for i, p in enumerate(processes)))


def _mig(r: _Reader) -> MigDevice:
    return MigDevice(*(r.value(key, int, optional=True) for key in ("gi", "ci", "dev", "mem_used_mib",
                                                                     "mem_total_mib")))


def _process(r: _Reader) -> GpuProcess:
    return GpuProcess(pid=r.value("pid", int), user=r.value("user", str), command=r.value("command", str),
                      gpu_mem_mib=r.value("gpu_mem_mib", int, optional=True),
                      problem=r.value("problem", str, optional=True))


def _cpu(r: _Reader) -> CpuState:
    top = tuple(TopProcess(pid=t.value("pid", int), user=t.value("user", str), command=t.value("command", str),
                           cpu_pct=t.value("cpu_pct", float, optional=True),
                           rss_mib=t.value("rss_mib", float, optional=True))
                for t in (_Reader(p, f"cpu.top[{i}]") for i, p in enumerate(r.value("top", list, default=[]))))
    return CpuState(load_1m=r.value("load_1m", float, optional=True), load_5m=r.value("load_5m", float, optional=True),
                    load_15m=r.value("load_15m", float, optional=True),
                    cpu_count=r.value("cpu_count", int, optional=True),
                    mem_used_mib=r.value("mem_used_mib", int, optional=True),
                    mem_total_mib=r.value("mem_total_mib", int, optional=True), top=top)
