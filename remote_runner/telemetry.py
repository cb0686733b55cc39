"""GPU and CPU samples for a run's ``telemetry.jsonl``, taken by a daemon thread in the supervisor.

GPU values come from NVML (nvidia-ml-py, about 0.1 ms a sample) when it loads,
else from one long-lived ``nvidia-smi --query-gpu=... -lms N`` process whose
lines are parsed as they arrive: nvidia-smi is never spawned per sample.  Every
interval also brings one CPU record for the host and for the run's processes,
read from /proc.  A value the hardware does not report is null, never an error
(nvitop's lesson: the NVML wrapper returns None instead of raising).
"""
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import IO, Callable, Optional

from .proctree import end_process
from .spools import TELEMETRY, SpoolWriter

#: The fields the nvidia-smi fallback asks for, in the order its lines carry them.
SMI_FIELDS = ("index", "name", "utilization.gpu", "memory.used", "memory.total", "power.draw",
              "temperature.gpu", "clocks.sm")
#: The keys of a GPU record, after ``kind``.
GPU_KEYS = ("gpu", "name", "util_pct", "mem_used_gib", "mem_total_gib", "power_w", "temp_c", "sm_clock_mhz")
#: The record key of each nvidia-smi field ("clocks.current.sm" is the long name of "clocks.sm").
_SMI_TO_KEY = {"index": "gpu", "name": "name", "utilization.gpu": "util_pct", "memory.used": "mem_used_gib",
               "memory.total": "mem_total_gib", "power.draw": "power_w", "temperature.gpu": "temp_c",
               "clocks.sm": "sm_clock_mhz", "clocks.current.sm": "sm_clock_mhz"}
_MIB_KEYS = ("mem_used_gib", "mem_total_gib")
#: Keys whose values are whole numbers (as NVML gives them).
_INT_KEYS = ("gpu", "util_pct", "temp_c", "sm_clock_mhz")
_GIB = float(1 << 30)


def _gib(n_bytes: Optional[float]) -> Optional[float]:
    return None if n_bytes is None else round(n_bytes / _GIB, 3)


def _text(value: object) -> Optional[str]:
    """NVML strings are bytes in old nvidia-ml-py releases and str in new ones."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def smi_header_fields(header: str) -> list[str]:
    """Field names from an nvidia-smi CSV header: ``power.draw [W]`` becomes ``power.draw``."""
    return [re.sub(r"\s*\[[^\]]*\]$", "", part.strip()) for part in header.split(",")]


def _smi_number(raw: str) -> Optional[float]:
    """``67.97 W``, ``67.97``, ``0 %`` -> a number; ``[N/A]``, ``[Not Supported]``, ``N/A`` -> None."""
    raw = raw.strip()
    if not raw or raw.startswith("[") or raw.upper() in ("N/A", "NOT SUPPORTED"):
        return None
    try:
        return float(raw.split()[0])
    except ValueError:
        return None


def parse_smi_line(line: str, fields: Sequence[str] = SMI_FIELDS) -> dict:
    """One GPU record from a line of ``nvidia-smi --query-gpu=<fields> --format=csv[,noheader][,nounits]``.

    Values with units ("22377 MiB") and without (nounits) both parse; bracketed
    values ([N/A], [Not Supported], [Unknown Error]) become None.  A GPU name
    with commas in it is put back together.  Fields without a record key are
    ignored and record keys without a field are None.  Raises ValueError for a
    line that is not a data row (an error message, a header).
    """
    parts = [part.strip() for part in line.strip().split(",")]
    extra = len(parts) - len(fields)
    if extra < 0 or (extra > 0 and "name" not in fields):
        raise ValueError("expected %d comma-separated fields, got %d: %r" % (len(fields), len(parts), line))
    if extra:
        at = list(fields).index("name")
        parts[at:at + extra + 1] = [", ".join(parts[at:at + extra + 1])]
    record = {"kind": "gpu", **dict.fromkeys(GPU_KEYS)}
    for field, raw in zip(fields, parts):
        key = _SMI_TO_KEY.get(field)
        if key == "name":
            record["name"] = None if raw.startswith("[") else raw
        elif key is not None:
            value = _smi_number(raw)
            if value is not None and key in _MIB_KEYS:
                value = round(value / 1024.0, 3)
            elif value is not None and key in _INT_KEYS and value.is_integer():
                value = int(value)
            record[key] = value
    if "index" in fields and not isinstance(record["gpu"], int):
        raise ValueError("not a GPU row (the index is %r): %r" % (parts[list(fields).index("index")], line))
    return record


class Nvml:
    """NVML through nvidia-ml-py (``pynvml``); every query returns None instead of raising."""

    def __init__(self, module: object):
        self._nv = module
        self._handles: dict[int, object] = {}
        self._names: dict[int, Optional[str]] = {}

    @classmethod
    def open(cls) -> Optional["Nvml"]:
        """NVML when ``pynvml`` imports and ``nvmlInit`` succeeds, else None (no driver, no GPU, no package)."""
        try:
            import pynvml
        except Exception:  # ImportError, or a broken install
            return None
        try:
            pynvml.nvmlInit()
        except Exception:  # NVMLError: driver not loaded, library not found
            return None
        return cls(pynvml)

    def close(self) -> None:
        self._call("nvmlShutdown")

    def _call(self, name: str, *args: object) -> object:
        try:
            return getattr(self._nv, name)(*args)
        except Exception:  # NVMLError_NotSupported and friends: the value is unknown
            return None

    def _handle(self, index: int) -> object:
        if self._handles.get(index) is None:
            self._handles[index] = self._call("nvmlDeviceGetHandleByIndex", index)
        return self._handles[index]

    def device_count(self) -> int:
        """How many GPUs the driver sees (``nvidia-smi --query-gpu=count``)."""
        return int(self._call("nvmlDeviceGetCount") or 0)

    def driver_version(self) -> Optional[str]:
        """The driver version, e.g. "535.104.05" (``nvidia-smi --query-gpu=driver_version``)."""
        return _text(self._call("nvmlSystemGetDriverVersion"))

    def cuda_driver_version(self) -> Optional[str]:
        """The newest CUDA the driver supports, e.g. "12.2" (the ``CUDA Version`` in nvidia-smi's header)."""
        version = self._call("nvmlSystemGetCudaDriverVersion")
        if not isinstance(version, int):
            return None
        return "%d.%d" % (version // 1000, version % 1000 // 10)

    def name(self, index: int) -> Optional[str]:
        """The product name, e.g. "NVIDIA A100-SXM4-80GB" (``nvidia-smi --query-gpu=name``)."""
        if index not in self._names:
            self._names[index] = _text(self._call("nvmlDeviceGetName", self._handle(index)))
        return self._names[index]

    def compute_capability(self, index: int) -> Optional[tuple[int, int]]:
        """(major, minor), e.g. (8, 0) (``nvidia-smi --query-gpu=compute_cap``)."""
        cap = self._call("nvmlDeviceGetCudaComputeCapability", self._handle(index))
        return (int(cap[0]), int(cap[1])) if isinstance(cap, (tuple, list)) and len(cap) == 2 else None

    def memory_total_gib(self, index: int) -> Optional[float]:
        """Total memory in GiB (``nvidia-smi --query-gpu=memory.total``)."""
        mem = self._call("nvmlDeviceGetMemoryInfo", self._handle(index))
        return None if mem is None else _gib(mem.total)

    def sample(self, index: int) -> dict:
        """One GPU record.

        util_pct: ``utilization.gpu``; mem_used_gib / mem_total_gib: ``memory.used`` /
        ``memory.total``; power_w: ``power.draw``; temp_c: ``temperature.gpu``;
        sm_clock_mhz: ``clocks.sm``.  A value the GPU does not report is None (a
        GB10's memory, a consumer card's power).
        """
        handle = self._handle(index)
        util = self._call("nvmlDeviceGetUtilizationRates", handle)
        mem = self._call("nvmlDeviceGetMemoryInfo", handle)
        power_mw = self._call("nvmlDeviceGetPowerUsage", handle)
        return {"kind": "gpu", "gpu": index, "name": self.name(index),
                "util_pct": None if util is None else util.gpu,
                "mem_used_gib": None if mem is None else _gib(mem.used),
                "mem_total_gib": None if mem is None else _gib(mem.total),
                "power_w": None if power_mw is None else round(power_mw / 1000.0, 2),
                "temp_c": self._call("nvmlDeviceGetTemperature", handle,
                                     getattr(self._nv, "NVML_TEMPERATURE_GPU", 0)),
                "sm_clock_mhz": self._call("nvmlDeviceGetClockInfo", handle, getattr(self._nv, "NVML_CLOCK_SM", 1))}


def choose_gpu_source(requested: str, nvml_gpus: Optional[int], smi_path: Optional[str]) -> str:
    """Where GPU samples come from: "nvml", "nvidia-smi" or "none".

    ``requested`` is "auto" or one of those; ``nvml_gpus`` is how many GPUs NVML
    sees (None when NVML did not load); ``smi_path`` is nvidia-smi on PATH.
    When NVML loads, its GPU count is trusted: nvidia-smi reads the same driver.
    """
    if requested in ("auto", "nvml") and nvml_gpus:
        return "nvml"
    if requested == "nvidia-smi" or (requested == "auto" and nvml_gpus is None):
        return "nvidia-smi" if smi_path else "none"
    return "none"


class CpuSampler:
    """CPU use of the host and of the run's processes, from /proc deltas between calls.

    ``proc_cpu_pct`` counts one busy core as 100.  Without /proc (macOS) only the
    1-minute load average and the process count are known; the rest is None.
    """

    def __init__(self, pids: Callable[[], list[int]]):
        self._pids = pids
        self._linux = os.path.isfile("/proc/stat")
        self._ticks_per_s = os.sysconf("SC_CLK_TCK") if self._linux else 100
        self._page = os.sysconf("SC_PAGE_SIZE") if self._linux else 4096
        self._host: Optional[tuple[int, int]] = None
        self._proc_ticks: dict[int, int] = {}
        self._at: Optional[float] = None

    def sample(self) -> dict:
        """One CPU record; the first call only sets the baseline for the percentages."""
        pids = sorted(set(self._pids()))
        record = {"kind": "cpu", "cpu_pct": None, "proc_cpu_pct": None, "rss_gib": None, "nprocs": len(pids),
                  "load_1m": _load_1m()}
        if not self._linux:
            return record
        now = time.monotonic()
        host = _host_ticks()
        if host is not None and self._host is not None and host[0] > self._host[0]:
            busy = (host[0] - self._host[0]) - (host[1] - self._host[1])
            record["cpu_pct"] = round(100.0 * busy / (host[0] - self._host[0]), 1)
        self._host = host
        ticks: dict[int, int] = {}
        rss_pages = 0
        for pid in pids:
            usage = _proc_usage(pid)
            if usage is not None:  # None: the process ended between pids() and now
                ticks[pid], pages = usage
                rss_pages += pages
        if self._at is not None and now > self._at:
            # A pid first seen now starts from its current ticks, so a new process adds
            # only what it uses from here on, and a reused pid never counts negative.
            used = sum(max(0, t - self._proc_ticks.get(pid, t)) for pid, t in ticks.items())
            record["proc_cpu_pct"] = round(100.0 * used / self._ticks_per_s / (now - self._at), 1)
        record["rss_gib"] = _gib(rss_pages * self._page)
        record["nprocs"] = len(ticks)
        self._proc_ticks, self._at = ticks, now
        return record


def _load_1m() -> Optional[float]:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # Windows has no load average
        return None


def _host_ticks() -> Optional[tuple[int, int]]:
    """(all, idle) jiffies from the first line of /proc/stat; iowait counts as idle."""
    try:
        with open("/proc/stat", "rb") as fh:
            fields = [int(v) for v in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return sum(fields), fields[3] + fields[4]


def _proc_usage(pid: int) -> Optional[tuple[int, int]]:
    """(utime + stime in clock ticks, resident pages) of one process, from its /proc/PID/stat alone (one open
    per process: the monitor reads every process of a crowded host at each snapshot; its ``rss`` is the kernel's
    resident set as statm gives it, give or take the few pages the kernel's per-CPU counters lag)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            # The command name may hold spaces and parentheses: fields start after the last ')'.
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[11]) + int(fields[12]), int(fields[21])
    except (OSError, IndexError, ValueError):
        return None


class TelemetrySampler:
    """Writes GPU and CPU records to ``<run_dir>/telemetry.jsonl`` every ``interval_s`` on a daemon thread.

    ``pids()`` returns the pids of the run's processes now.  ``gpu_source`` is
    "auto" (NVML, else nvidia-smi, else none), "nvml", "nvidia-smi" or "none".
    A sampling error is written once as a ``telemetry_error`` record and never
    ends the thread.
    """

    def __init__(self, run_dir: str, interval_s: float, pids: Callable[[], list[int]], gpu_source: str = "auto"):
        self.run_dir = run_dir
        self.interval_s = interval_s
        self.source = "none"
        self._requested = gpu_source
        self._cpu = CpuSampler(pids)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._writer: Optional[SpoolWriter] = None
        self._nvml: Optional[Nvml] = None
        self._nvml_gpus = 0
        self._smi: Optional[subprocess.Popen] = None
        self._smi_reader: Optional[threading.Thread] = None
        self._fresh: dict[int, dict] = {}
        self._fresh_lock = threading.Lock()
        self._last_error: Optional[str] = None

    def start(self) -> None:
        """Pick the GPU source, start nvidia-smi if that is it, and start sampling."""
        self._writer = SpoolWriter(os.path.join(self.run_dir, TELEMETRY))
        nvml = Nvml.open() if self._requested in ("auto", "nvml") else None
        nvml_gpus = None if nvml is None else nvml.device_count()
        smi_path = shutil.which("nvidia-smi") if self._requested in ("auto", "nvidia-smi") else None
        self.source = choose_gpu_source(self._requested, nvml_gpus, smi_path)
        if self.source == "nvml":
            self._nvml, self._nvml_gpus = nvml, nvml_gpus or 0
        elif nvml is not None:
            nvml.close()
        if self.source == "nvidia-smi":
            self._start_smi(smi_path or "nvidia-smi")
        self._cpu.sample()
        self._thread = threading.Thread(target=self._run, name="telemetry-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling, end nvidia-smi, release NVML and close the spool."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 10.0)
        if self._smi is not None:
            end_process(self._smi, 2.0)
            if self._smi_reader is not None:
                self._smi_reader.join(timeout=2.0)
            self._smi.stdout.close()
            self._smi = None
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None
        if self._writer is not None:
            self._writer.close()

    def _start_smi(self, path: str) -> None:
        period_ms = max(100, int(self.interval_s * 1000))
        self._smi = subprocess.Popen(
            [path, "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits", "-lms", str(period_ms)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True)
        self._smi_reader = threading.Thread(target=self._read_smi, args=(self._smi.stdout,),
                                            name="telemetry-nvidia-smi", daemon=True)
        self._smi_reader.start()

    def _read_smi(self, stream: IO[str]) -> None:
        """Keep the newest row of each GPU until the sampler takes it."""
        for line in stream:
            try:
                record = parse_smi_line(line)
            except ValueError:  # an error line ("Unable to determine the device handle ...")
                continue
            with self._fresh_lock:
                self._fresh[record["gpu"]] = record

    def _run(self) -> None:
        due = time.monotonic()
        while True:
            # On the interval's grid; after a stall (a suspended host) resume at once, without a burst.
            due = max(due + self.interval_s, time.monotonic())
            if self._stop.wait(due - time.monotonic()):
                return
            self._sample_once()

    def _sample_once(self) -> None:
        for records in (self._gpu_records, self._cpu_records):
            try:
                for record in records():
                    self._writer.write(record)
            except Exception as exc:  # telemetry must never take the run down
                self._report(exc)

    def _report(self, exc: Exception) -> None:
        """Write an error once, not once per interval."""
        message = "%s: %s" % (type(exc).__name__, exc)
        if message == self._last_error:
            return
        self._last_error = message
        try:
            self._writer.write({"kind": "telemetry_error", "message": message})
        except OSError:  # the disk is full: nothing more to say
            pass

    def _cpu_records(self) -> list[dict]:
        return [self._cpu.sample()]

    def _gpu_records(self) -> list[dict]:
        if self._nvml is not None:
            return [self._nvml.sample(i) for i in range(self._nvml_gpus)]
        if self._smi is not None and self._smi.poll() is not None:
            raise RuntimeError("nvidia-smi exited with code %s; no more GPU samples" % self._smi.returncode)
        with self._fresh_lock:
            records = [self._fresh[gpu] for gpu in sorted(self._fresh)]
            self._fresh.clear()
        return records
