"""A host's GPUs and who uses them, right now: the data of the host monitor (``python -m remote_runner monitor``).

A snapshot is one JSON-able dict (``"v": SNAPSHOT_VERSION``, docs/PROTOCOL.md "Host monitor"): per GPU its
index, uuid, name, utilisation, memory used/total (MiB), power, temperature, MIG mode and MIG devices, a
state ("ok", "lost", "error") with nvidia-smi's or NVML's own message, and the processes on it (pid, user,
command, GPU memory); and the host's load, memory, CPU count and top processes from /proc.

GPU values come from NVML (:class:`HostNvml`, nvidia-ml-py) when it loads, else from nvidia-smi's CSV
queries, parsed a line at a time here so that one long-lived ``-lms`` process can feed them
(remote_runner.gpumonitor).  Their values are read with telemetry's nvidia-smi grammar
(``[N/A]``, units or ``nounits``).  A process whose owner or command cannot be read is shown as "?" with
the reason, never an error.
"""
import os
import pwd
import re
import socket
import time
from collections.abc import Sequence
from typing import Optional

from .probe import parse_smi_summary
from .telemetry import Nvml, _proc_usage, _smi_number, smi_header_fields

SNAPSHOT_VERSION = 1
#: What the monitor asks ``nvidia-smi --query-gpu`` for, in this order.
GPU_FIELDS = ("index", "uuid", "name", "pci.bus_id", "utilization.gpu", "memory.used", "memory.total",
              "power.draw", "temperature.gpu", "mig.mode.current")
#: What it asks ``nvidia-smi --query-compute-apps`` for; the free-text name last, so commas in it do no harm.
APP_FIELDS = ("timestamp", "gpu_uuid", "pid", "used_memory", "process_name")
#: The top processes a snapshot lists for the host (by CPU use, then resident memory).
TOP_PROCESSES = 10
#: A command line longer than this is cut (with "...") in a snapshot.
COMMAND_CHARS = 300
UNKNOWN = "?"
#: Other spellings nvidia-smi accepts for the same query fields.
_GPU_ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id", "clocks.current.sm": "clocks.sm"}
_APP_ALIASES = {"name": "process_name", "used_gpu_memory": "used_memory"}
_LOST = re.compile(r"Unable to determine the device handle for GPU\s*(?:(\d+):\s*)?"
                   r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*:\s*(.+?)\s*$")
_ERROR_VALUES = ("[Unknown Error]", "[GPU is lost]", "ERR!")


def split_columns(line: str, fields: Sequence[str], free_text: str) -> dict:
    """``{field: raw value}`` of one CSV row; commas inside the ``free_text`` column (a name) are put back.

    Raises ValueError for a row with fewer columns than fields (an error line, a header of another query).
    """
    raw = line.rstrip("\r\n").split(",")
    extra = len(raw) - len(fields)
    if extra < 0 or (extra and free_text not in fields):
        raise ValueError("expected %d comma-separated fields, got %d: %r" % (len(fields), len(raw), line))
    if extra:
        at = list(fields).index(free_text)
        raw[at:at + extra + 1] = [",".join(raw[at:at + extra + 1])]
    return {field: value.strip() for field, value in zip(fields, raw)}


def _text(raw: Optional[str]) -> Optional[str]:
    if raw is None or not raw or raw.startswith("[") or raw.upper() in ("N/A", "NOT SUPPORTED"):
        return None
    return raw


def _int(raw: Optional[str]) -> Optional[int]:
    value = None if raw is None else _smi_number(raw)
    return None if value is None else int(value)


def _mib(raw: Optional[str]) -> Optional[int]:
    """MiB from ``22377``, ``22377 MiB`` or ``22377MiB`` (nvidia-smi prints whole MiB)."""
    if raw is None:
        return None
    return _int(raw[:-3] if raw.endswith("MiB") else raw)


def bus_key(bus_id: Optional[str]) -> Optional[str]:
    """One spelling of a PCI bus id: ``00000000:0B:00.0`` and ``0000:0b:00.0`` are the same GPU."""
    if not bus_id:
        return None
    domain, _, rest = bus_id.partition(":")
    try:
        return "%04x:%s" % (int(domain, 16), rest.lower())
    except ValueError:
        return bus_id.lower()


def new_gpu(index: Optional[int]) -> dict:
    """A GPU entry with every key; values that are not known stay None."""
    return {"index": index, "uuid": None, "name": None, "bus_id": None, "util_pct": None, "mem_used_mib": None,
            "mem_total_mib": None, "power_w": None, "temp_c": None, "mig_mode": None, "mig_devices": [],
            "state": "ok", "message": None, "processes": None}


def canonical_fields(fields: Sequence[str], aliases: dict) -> list[str]:
    return [aliases.get(field, field) for field in fields]


def parse_gpu_row(line: str, fields: Sequence[str] = GPU_FIELDS) -> dict:
    """One GPU entry from a row of ``nvidia-smi --query-gpu=<fields> --format=csv[,noheader][,nounits]``.

    ``[GPU is lost]`` in any field makes the GPU "lost"; ``[Unknown Error]`` or ``ERR!`` in a value the
    monitor needs makes it "error"; the message names the field.  Raises ValueError for a line that is not
    a GPU row (nvidia-smi's "Unable to determine the device handle ..." lines: :func:`parse_lost_line`).
    """
    fields = canonical_fields(fields, _GPU_ALIASES)
    cols = split_columns(line, fields, "name")
    index = _int(cols.get("index")) if "index" in cols else None
    if "index" in cols and index is None:
        raise ValueError("not a GPU row (the index is %r): %r" % (cols["index"], line))
    gpu = new_gpu(index)
    gpu.update(uuid=_text(cols.get("uuid")), name=_text(cols.get("name")), bus_id=_text(cols.get("pci.bus_id")),
               util_pct=_int(cols.get("utilization.gpu")), mem_used_mib=_mib(cols.get("memory.used")),
               mem_total_mib=_mib(cols.get("memory.total")),
               temp_c=_int(cols.get("temperature.gpu")))
    power = _smi_number(cols["power.draw"]) if "power.draw" in cols else None
    gpu["power_w"] = None if power is None else round(power, 2)
    mig = _text(cols.get("mig.mode.current"))
    gpu["mig_mode"] = None if mig is None else mig.lower()
    for field, raw in cols.items():
        if raw == "[GPU is lost]":
            gpu.update(state="lost", message="nvidia-smi reports [GPU is lost]")
            break
        if raw in _ERROR_VALUES and field in ("utilization.gpu", "memory.used", "memory.total", "name", "uuid"):
            gpu.update(state="error", message="nvidia-smi reports %s for %s" % (raw, field))
    return gpu


def parse_lost_line(line: str) -> Optional[dict]:
    """``Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error`` -> a "lost" GPU entry.

    nvidia-smi prints this instead of a row for a GPU that has fallen off the bus ("Unknown Error") or that
    the driver gave up ("GPU is lost. Reboot the system to recover this GPU"); the entry keeps the message
    and the bus id, and the index when the line names it.  None for any other line.
    """
    match = _LOST.search(line)
    if match is None:
        return None
    gpu = new_gpu(int(match.group(1)) if match.group(1) else None)
    gpu.update(bus_id=match.group(2), state="lost", message=match.group(3))
    return gpu


def parse_app_row(line: str, fields: Sequence[str] = APP_FIELDS) -> dict:
    """One process from a row of ``nvidia-smi --query-compute-apps=<fields> --format=csv[,...]``.

    ``name`` is None with ``name_problem`` set when nvidia-smi could not read it (``[Insufficient
    Permissions]``: another user's process; ``[Not Found]``: a pid of another PID namespace).
    """
    fields = canonical_fields(fields, _APP_ALIASES)
    cols = split_columns(line, fields, "process_name")
    pid = _int(cols.get("pid")) if "pid" in cols else None
    if "pid" in cols and pid is None:
        raise ValueError("not a process row (the pid is %r): %r" % (cols["pid"], line))
    name = cols.get("process_name")
    return {"timestamp": cols.get("timestamp"), "gpu_uuid": _text(cols.get("gpu_uuid")), "pid": pid,
            "gpu_mem_mib": _mib(cols.get("used_memory")), "name": _text(name),
            "name_problem": name.strip("[]") if name and name.startswith("[") else None}


def read_query_output(text: str, kind: str, fields: Optional[Sequence[str]] = None) -> tuple[list[dict], list[str]]:
    """Every row of a whole ``--query-gpu`` (``kind`` "gpu") or ``--query-compute-apps`` ("apps") output.

    A header line (``--format=csv``) gives the fields and wins over ``fields``; lines nvidia-smi prints for a
    lost GPU become "lost" entries.  A GPU query without the index field numbers its rows by position
    (nvidia-smi lists GPUs in index order), unless a lost GPU's line is among them.  Returns
    ``(entries, lines that are neither)``.
    """
    parse = parse_gpu_row if kind == "gpu" else parse_app_row
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and not lines[0].split(",")[0].strip()[:1].isdigit() and "," in lines[0] \
            and not lines[0].startswith("GPU-") and parse_lost_line(lines[0]) is None:
        fields = smi_header_fields(lines.pop(0))
    entries, other = [], []
    for line in lines:
        lost = parse_lost_line(line) if kind == "gpu" else None
        if lost is not None:
            entries.append(lost)
            continue
        try:
            entries.append(parse(line, fields or (GPU_FIELDS if kind == "gpu" else APP_FIELDS)))
        except ValueError:
            other.append(line)
    if kind == "gpu" and all(entry["state"] != "lost" or entry["index"] is not None for entry in entries):
        for position, entry in enumerate(entries):
            if entry["index"] is None:
                entry["index"] = position
    return entries, other


_TABLE_GPU = re.compile(r"^\|\s+\d+\s+.+?\s+(?:On|Off)\s+\|\s*(\S+)")
_TABLE_POWER = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*/\s*(\S+)$")
_TABLE_MEMORY = re.compile(r"^(\d+)MiB\s*/\s*(\d+)MiB$")
_TABLE_MIG = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+(\d+)MiB\s*/\s*(\d+)MiB\s+\|")
_TABLE_PROCESS = re.compile(r"^\|\s+(\d+)\s+(?:(\S+)\s+(\S+)\s+)?(\d+)\s+(C|G|C\+G|M|M\+C)\s+(.+?)\s+(\S+)\s*\|$")


def parse_smi_table(text: str) -> dict:
    """GPUs, MIG devices and processes from plain ``nvidia-smi`` output (what people paste).

    The driver/CUDA versions, indices and names come from probe's :func:`parse_smi_summary`; this adds each
    GPU's bus id and its second table line (temperature, power, memory, utilisation; ``ERR!`` makes the GPU
    "error"), the "MIG devices" table, the "Processes" table (the layouts with and without GI/CI columns)
    and the "Unable to determine the device handle" lines of lost GPUs.
    """
    summary = parse_smi_summary(text)
    rows = iter(summary["gpus"])  # the same GPU rows as _TABLE_GPU finds, in the same order
    gpus, mig_devices, processes, lost = [], [], [], []
    current, section = None, None
    for line in text.splitlines():
        if "MIG devices:" in line or "Processes:" in line:
            section, current = ("mig" if "MIG" in line else "processes"), None
        gpu_row = _TABLE_GPU.match(line) if section is None else None
        found = parse_lost_line(line)
        if gpu_row is not None:
            row = next(rows, None)
            current = new_gpu(row["index"] if row else None)
            name = row["name"] if row else None
            current.update(name=None if name == "ERR!" else name, bus_id=gpu_row.group(1))
            gpus.append(current)
        elif current is not None and _fill_from_table(current, line):
            current = None
        elif found is not None:
            lost.append(found)
        elif section == "mig" and _TABLE_MIG.match(line):
            g, gi, ci, dev, used, total = map(int, _TABLE_MIG.match(line).groups())
            mig_devices.append({"gpu": g, "gi": gi, "ci": ci, "dev": dev, "mem_used_mib": used, "mem_total_mib": total})
        elif section == "processes" and _TABLE_PROCESS.match(line):
            g, gi, ci, pid, kind, name, mem = _TABLE_PROCESS.match(line).groups()
            processes.append({"gpu": int(g), "gi": _int(gi), "ci": _int(ci), "pid": int(pid), "type": kind,
                              "name": name, "gpu_mem_mib": _mib(mem)})
    by_index = {gpu["index"]: gpu for gpu in gpus}
    for device in mig_devices:
        if device["gpu"] in by_index:
            by_index[device["gpu"]]["mig_devices"].append(device)
            by_index[device["gpu"]]["mig_mode"] = "enabled"
    return {"driver_version": summary["driver_version"], "cuda_version": summary["cuda_version"], "gpus": gpus,
            "mig_devices": mig_devices, "processes": processes, "lost": lost}


def _fill_from_table(gpu: dict, line: str) -> bool:
    """Fill ``gpu`` from its second table line (``| N/A 28C P0 68W / 400W | 22377MiB / 81920MiB | 0% ...``)."""
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    power = _TABLE_POWER.match(cells[0]) if len(cells) == 3 else None
    if power is None:
        return False
    _fan, temp, _perf, usage, _cap = power.groups()
    memory = _TABLE_MEMORY.match(cells[1])
    util = cells[2].split()[0] if cells[2] else ""
    gpu.update(temp_c=_int(temp.rstrip("C")), power_w=_smi_number(usage.rstrip("W")), util_pct=_int(util.rstrip("%")),
               mem_used_mib=int(memory.group(1)) if memory else None,
               mem_total_mib=int(memory.group(2)) if memory else None)
    bad = [what for what, raw in (("temperature", temp), ("power", usage), ("utilization", util)) if raw == "ERR!"]
    if bad:
        gpu.update(state="error", message="nvidia-smi shows ERR! for %s" % ", ".join(bad))
    return True


# --- processes: who they belong to ------------------------------------------------------------------------------

def process_owner(pid: int) -> tuple[str, Optional[str]]:
    """``(user name, problem)`` of a process, from the real uid in /proc/PID/status; "?" and why when unknown."""
    try:
        with open("/proc/%d/status" % pid, encoding="utf-8", errors="replace") as fh:
            uid = next(int(line.split()[1]) for line in fh if line.startswith("Uid:"))
    except FileNotFoundError:
        return UNKNOWN, ("no process %d on this host: it ended, or it runs in another PID namespace "
                         "(a container)" % pid)
    except (OSError, StopIteration, ValueError, IndexError) as exc:
        return UNKNOWN, "cannot read /proc/%d/status: %s" % (pid, getattr(exc, "strerror", None) or exc)
    try:
        return pwd.getpwuid(uid).pw_name, None
    except KeyError:
        return "uid %d" % uid, "uid %d has no name on this host" % uid


def process_command(pid: int) -> tuple[Optional[str], Optional[str]]:
    """``(command line, problem)`` from /proc/PID/cmdline; None and why when it cannot be read."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            words = [w.decode("utf-8", "replace") for w in fh.read().split(b"\0") if w]
    except OSError as exc:
        return None, "cannot read /proc/%d/cmdline: %s" % (pid, exc.strerror or exc)
    command = " ".join(words)
    command = command if len(command) <= COMMAND_CHARS else command[:COMMAND_CHARS - 3] + "..."
    return (command, None) if words else (None, "process %d has no command line (a zombie)" % pid)


def describe_process(pid: int, gpu_mem_mib: Optional[int], name: Optional[str] = None,
                     name_problem: Optional[str] = None) -> dict:
    """A snapshot's process entry: pid, user, command, GPU memory, and ``problem`` when something is unknown."""
    user, user_problem = process_owner(pid)
    command, command_problem = process_command(pid)
    problems = [user_problem] if user_problem else []
    if command is None:
        command = name or UNKNOWN
        if command == UNKNOWN:
            problems.append("nvidia-smi: %s" % name_problem if name_problem else command_problem)
    return {"pid": pid, "user": user, "command": command, "gpu_mem_mib": gpu_mem_mib,
            "problem": "; ".join(problems) or None}


def attach_processes(gpus: list[dict], apps: list[dict]) -> list[dict]:
    """Put each process of ``apps`` (parse_app_row entries) on its GPU by uuid; returns the ones on no GPU here."""
    by_uuid = {gpu["uuid"]: gpu for gpu in gpus if gpu["uuid"]}
    for gpu in gpus:
        if gpu["state"] != "lost":
            gpu["processes"] = []
    unplaced = []
    for app in apps:
        if app["pid"] is None:  # a query without the pid field: nothing to say who it is
            continue
        entry = describe_process(app["pid"], app["gpu_mem_mib"], app["name"], app["name_problem"])
        gpu = by_uuid.get(app["gpu_uuid"])
        (gpu["processes"] if gpu is not None else unplaced).append(entry)
    return unplaced


# --- the host's CPU side: /proc --------------------------------------------------------------------------------

class ProcessTable:
    """The host's top processes by CPU use (from /proc tick deltas between calls), then resident memory."""

    def __init__(self) -> None:
        self._ticks: dict[int, int] = {}
        self._at: Optional[float] = None
        self._hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def top(self, count: int = TOP_PROCESSES) -> list[dict]:
        """The ``count`` busiest processes; ``cpu_pct`` (100 = one core) is None on the first call."""
        now = time.monotonic()
        seen: dict[int, tuple[int, int]] = {}
        for entry in os.listdir("/proc") if os.path.isdir("/proc/self") else ():
            usage = _proc_usage(int(entry)) if entry.isdigit() else None
            if usage is not None:  # None: not a process, or it ended while we looked
                seen[int(entry)] = usage
        elapsed = None if self._at is None else now - self._at
        rows = []
        for pid, (ticks, rss_pages) in seen.items():
            cpu = None
            if elapsed:
                cpu = round(100.0 * max(0, ticks - self._ticks.get(pid, ticks)) / self._hz / elapsed, 1)
            rows.append((cpu or 0.0, rss_pages, pid, cpu))
        self._ticks, self._at = {pid: usage[0] for pid, usage in seen.items()}, now
        rows.sort(key=lambda row: (-row[0], -row[1], row[2]))
        top = []
        for _, rss_pages, pid, cpu in rows[:count]:
            user, problem = process_owner(pid)
            command, _ = process_command(pid)
            top.append({"pid": pid, "user": user, "command": command or "[%s]" % _comm(pid), "cpu_pct": cpu,
                        "rss_mib": round(rss_pages * self._page / float(1 << 20), 1), "problem": problem})
        return top


def _comm(pid: int) -> str:
    """The kernel's short name of a process (a kernel thread or zombie has no command line)."""
    try:
        with open("/proc/%d/comm" % pid, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return UNKNOWN


def host_cpu(table: ProcessTable) -> dict:
    """Load averages, CPU count, memory used/total (MiB; used = total - available) and the top processes."""
    cpu = {"load_1m": None, "load_5m": None, "load_15m": None, "cpu_count": os.cpu_count(),
           "mem_used_mib": None, "mem_total_mib": None, "top": []}
    try:
        cpu["load_1m"], cpu["load_5m"], cpu["load_15m"] = (round(v, 2) for v in os.getloadavg())
    except (AttributeError, OSError):
        pass
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as fh:
            info = {line.split(":")[0]: int(line.split()[1]) for line in fh if line.split()[1:2] and
                    line.split()[1].isdigit()}
        cpu["mem_total_mib"] = info["MemTotal"] // 1024
        cpu["mem_used_mib"] = (info["MemTotal"] - info.get("MemAvailable", info.get("MemFree", 0))) // 1024
    except (OSError, KeyError, ValueError, IndexError):
        pass
    cpu["top"] = table.top()
    return cpu


def snapshot(seq: int, source: str, gpus: list[dict], cpu: dict, errors: Sequence[str] = (),
             unplaced: Sequence[dict] = ()) -> dict:
    """One snapshot of the host, as the monitor prints it (one JSON line)."""
    return {"v": SNAPSHOT_VERSION, "kind": "host_snapshot", "seq": seq, "t": round(time.time(), 3),
            "host": socket.gethostname(), "source": source, "gpus": gpus, "unplaced_processes": list(unplaced),
            "cpu": cpu, "errors": list(errors)}


class HostNvml(Nvml):
    """The monitor's NVML queries: uuid, exact MiB, MIG and processes besides telemetry's values."""

    def _try(self, name: str, *args: object) -> tuple[object, Optional[str]]:
        try:
            return getattr(self._nv, name)(*args), None
        except Exception as exc:  # NVMLError_GpuIsLost, NVMLError_Unknown, a function this driver lacks
            return None, str(exc) or type(exc).__name__

    def gpu(self, index: int) -> dict:
        """One GPU entry; a handle NVML cannot give makes the GPU "lost" with NVML's message."""
        gpu = new_gpu(index)
        handle, problem = self._try("nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            gpu.update(state="lost", message=problem or "NVML gives no handle for GPU %d" % index)
            return gpu
        pci = self._call("nvmlDeviceGetPciInfo", handle)
        bus = getattr(pci, "busId", None)
        util = self._call("nvmlDeviceGetUtilizationRates", handle)
        mem = self._call("nvmlDeviceGetMemoryInfo", handle)
        power_mw = self._call("nvmlDeviceGetPowerUsage", handle)
        gpu.update(uuid=_nvml_text(self._call("nvmlDeviceGetUUID", handle)), name=self.name(index),
                   bus_id=_nvml_text(bus), util_pct=None if util is None else util.gpu,
                   mem_used_mib=None if mem is None else mem.used >> 20,
                   mem_total_mib=None if mem is None else mem.total >> 20,
                   power_w=None if power_mw is None else round(power_mw / 1000.0, 2),
                   temp_c=self._call("nvmlDeviceGetTemperature", handle, getattr(self._nv, "NVML_TEMPERATURE_GPU", 0)))
        mode = self._call("nvmlDeviceGetMigMode", handle)
        if isinstance(mode, (tuple, list)) and mode:
            gpu["mig_mode"] = "enabled" if mode[0] else "disabled"
        holders = [handle]
        if gpu["mig_mode"] == "enabled":
            holders = self._mig_devices(handle, gpu)
        processes = [self._call("nvmlDeviceGetComputeRunningProcesses", h) for h in holders]
        if all(p is None for p in processes):
            return gpu
        gpu["processes"] = [describe_process(int(p.pid), _nvml_mib(getattr(p, "usedGpuMemory", None)))
                            for found in processes for p in found or ()]
        return gpu

    def _mig_devices(self, handle: object, gpu: dict) -> list[object]:
        handles = []
        for at in range(int(self._call("nvmlDeviceGetMaxMigDeviceCount", handle) or 0)):
            mig = self._call("nvmlDeviceGetMigDeviceHandleByIndex", handle, at)
            if mig is None:
                continue
            mem = self._call("nvmlDeviceGetMemoryInfo", mig)
            gpu["mig_devices"].append({"gpu": gpu["index"], "gi": self._call("nvmlDeviceGetGpuInstanceId", mig),
                                       "ci": self._call("nvmlDeviceGetComputeInstanceId", mig), "dev": at,
                                       "mem_used_mib": None if mem is None else mem.used >> 20,
                                       "mem_total_mib": None if mem is None else mem.total >> 20})
            handles.append(mig)
        return handles


def _nvml_text(value: object) -> Optional[str]:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value if isinstance(value, str) else None


def _nvml_mib(n_bytes: object) -> Optional[int]:
    """NVML's per-process memory in MiB; None when not available (MIG without privileges, WDDM)."""
    return n_bytes >> 20 if isinstance(n_bytes, int) and 0 <= n_bytes < (1 << 60) else None
