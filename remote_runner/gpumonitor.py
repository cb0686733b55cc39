"""The host monitor: ``python -m remote_runner monitor [--interval 2]`` prints a snapshot a line, until told to stop.

Each line is one :func:`remote_runner.gpustate.snapshot` as JSON, flushed.  GPU values come from NVML when
nvidia-ml-py loads, else from two long-lived nvidia-smi processes started once --
``--query-gpu=... -lms N`` and ``--query-compute-apps=timestamp,... -lms N`` -- whose lines are parsed as
they come (nvidia-smi is never spawned per sample; a compute-apps loop that finds no process prints
nothing, so its rows are grouped by their timestamp and a batch older than an interval and a half means
"no processes"), else from nothing (a CPU host: load, memory and top processes from /proc).

It ends within an interval when its stdout is closed or its stdin reaches EOF (the client, or its SSH
channel, went away), or on SIGTERM/SIGHUP, and ends its nvidia-smi processes before it exits; on Linux
they are also told to end by the kernel should the monitor itself be killed (PR_SET_PDEATHSIG).
"""
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Callable, Optional

from .gpustate import (
    APP_FIELDS,
    GPU_FIELDS,
    HostNvml,
    ProcessTable,
    attach_processes,
    bus_key,
    host_cpu,
    parse_app_row,
    parse_gpu_row,
    parse_lost_line,
    snapshot,
)
from .proctree import end_process

#: A stream that ended is started again after this long (a driver reload, nvidia-smi crashing).
RESTART_AFTER_S = 10.0
#: How long the first snapshot waits for nvidia-smi's first whole table (its first GPU line coming again).
FIRST_ROW_WAIT_S = 30.0
#: Fields older drivers do not know; the GPU query goes on without them.
OPTIONAL_GPU_FIELDS = ("mig.mode.current", "pci.bus_id", "power.draw")
_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')
_PR_SET_PDEATHSIG = 1


def _end_with_parent() -> None:
    """In the child, before exec: ask the kernel for SIGTERM when the monitor dies (Linux only)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except Exception:  # not Linux, or no prctl: the monitor's own shutdown still ends the child
        pass


class SmiStream:
    """One long-lived ``nvidia-smi ... -lms N`` process; ``handle(line, monotonic_time)`` runs on its reader."""

    def __init__(self, argv: Sequence[str], handle: Callable[[str, float], None]):
        self.argv = list(argv)
        self._handle = handle
        self.proc: Optional[subprocess.Popen] = None
        self._reader: Optional[threading.Thread] = None
        self.ended_at: Optional[float] = None
        self.last_line = ""

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, universal_newlines=True, bufsize=1,
                                     preexec_fn=_end_with_parent if sys.platform.startswith("linux") else None)
        self.ended_at, self.last_line = None, ""
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True,
                                        name="monitor-" + self.argv[1].split("=")[0].lstrip("-"))
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            if line.strip():
                self.last_line = line.strip()
                self._handle(line, time.monotonic())

    def problem(self) -> Optional[str]:
        """Why this stream gives nothing now (it exited), or None while it runs."""
        if self.proc is None or self.proc.poll() is None:
            return None
        if self.ended_at is None:
            self.ended_at = time.monotonic()
        return "nvidia-smi %s exited with code %s%s" % (self.argv[1].split("=")[0], self.proc.returncode,
                                                         ": " + self.last_line if self.last_line else "")

    def restart_if_due(self) -> None:
        if self.problem() is not None and time.monotonic() - (self.ended_at or 0.0) >= RESTART_AFTER_S:
            self.stop()
            self.start()

    def stop(self) -> None:
        if self.proc is not None:
            end_process(self.proc, 2.0)
            if self._reader is not None:
                self._reader.join(timeout=2.0)
            self.proc.stdout.close()
            self.proc = None


class SmiSource:
    """GPU entries from the two nvidia-smi streams; rows older than ``stale_s`` are no longer shown."""

    name = "nvidia-smi"

    def __init__(self, smi_path: str, interval_s: float):
        period_ms = str(max(100, int(interval_s * 1000)))
        fmt = "--format=csv,noheader,nounits"
        self.gpu_fields = list(GPU_FIELDS)
        self.gpu_stream = SmiStream([smi_path, "--query-gpu=" + ",".join(GPU_FIELDS), fmt, "-lms", period_ms],
                                    self._on_gpu_line)
        self.app_stream = SmiStream([smi_path, "--query-compute-apps=" + ",".join(APP_FIELDS), fmt, "-lms",
                                     period_ms], self._on_app_line)
        self.stale_s = max(3.0 * interval_s, 5.0)
        self.batch_s = 1.5 * interval_s + 1.0
        self._lock = threading.Lock()
        self._rows: dict[int, tuple[dict, float]] = {}
        self._lost: dict[str, tuple[dict, float]] = {}
        self._known: dict[str, dict] = {}  # bus id -> the last row of that GPU, to name a lost GPU by its index
        self._batch: tuple[Optional[str], list[dict], float] = (None, [], float("-inf"))
        # The first table is whole once a GPU's line comes a second time (nvidia-smi's next loop began): a
        # snapshot taken earlier, on a loaded host, can catch the first loop half printed (2 of 8 GPUs).
        self._seen: set = set()
        self._whole = threading.Event()

    def start(self) -> None:
        self.gpu_stream.start()
        self.app_stream.start()

    def ready(self) -> bool:
        """Whether nvidia-smi's first table came whole (or the GPU stream ended): before that a snapshot would
        show none or only some of the GPUs."""
        return self._whole.is_set() or self.gpu_stream.problem() is not None

    def close(self) -> None:
        self.gpu_stream.stop()
        self.app_stream.stop()

    def _on_gpu_line(self, line: str, at: float) -> None:
        lost = parse_lost_line(line)
        with self._lock:
            if lost is not None:
                key = ("lost", bus_key(lost["bus_id"]) or line)
                self._lost[key[1]] = (lost, at)
            else:
                try:
                    gpu = parse_gpu_row(line, self.gpu_fields)
                except ValueError:
                    return
                key = ("gpu", gpu["index"])
                self._rows[gpu["index"]] = (gpu, at)
                if gpu["bus_id"]:
                    self._known[bus_key(gpu["bus_id"])] = gpu
            if key in self._seen:
                self._whole.set()
            self._seen.add(key)

    def _on_app_line(self, line: str, at: float) -> None:
        try:
            app = parse_app_row(line)
        except ValueError:
            return
        with self._lock:
            stamp, rows, _ = self._batch
            self._batch = (app["timestamp"], (rows if stamp == app["timestamp"] else []) + [app], at)

    def sample(self) -> tuple[list[dict], list[dict], list[str]]:
        """(GPU entries with their processes, processes on no listed GPU, problems)."""
        self._drop_unknown_fields()
        for stream in (self.gpu_stream, self.app_stream):
            stream.restart_if_due()
        now = time.monotonic()
        with self._lock:
            gpus = [dict(gpu) for gpu, at in self._rows.values() if now - at <= self.stale_s]
            for lost, at in self._lost.values():
                if now - at > self.stale_s:
                    continue
                entry = dict(lost)
                known = self._known.get(bus_key(lost["bus_id"]))
                if known is not None:
                    entry.update(index=known["index"], uuid=known["uuid"], name=known["name"])
                    gpus = [gpu for gpu in gpus if gpu["index"] != known["index"]]
                gpus.append(entry)
            _, apps, batch_at = self._batch
        gpus.sort(key=lambda gpu: (gpu["index"] is None, gpu["index"] or 0))
        errors = [p for p in (self.gpu_stream.problem(), self.app_stream.problem()) if p]
        if self.app_stream.problem() is not None:
            return gpus, [], errors  # processes unknown: left None, never shown as "none"
        unplaced = attach_processes(gpus, apps if now - batch_at <= self.batch_s else [])
        return gpus, unplaced, errors


    def _drop_unknown_fields(self) -> None:
        """Older drivers refuse newer fields (``Field "mig.mode.current" is not a valid field to query.``): an
        optional one is dropped and the GPU query started again at once without it."""
        refused = _INVALID_FIELD.search(self.gpu_stream.last_line)
        if self.gpu_stream.problem() is None or refused is None:
            return
        field = refused.group(1)
        if field in OPTIONAL_GPU_FIELDS and field in self.gpu_fields:
            self.gpu_fields.remove(field)
            self.gpu_stream.argv[1] = "--query-gpu=" + ",".join(self.gpu_fields)
            self.gpu_stream.stop()
            self.gpu_stream.start()


class NvmlSource:
    """GPU entries from NVML, queried at each sample (about a millisecond for eight GPUs)."""

    name = "nvml"

    def __init__(self, nvml: HostNvml, count: int):
        self.nvml, self.count = nvml, count

    def sample(self) -> tuple[list[dict], list[dict], list[str]]:
        return [self.nvml.gpu(index) for index in range(self.count)], [], []

    def close(self) -> None:
        self.nvml.close()


class NoGpuSource:
    """A host without NVML and without nvidia-smi: no GPU entries."""

    name = "none"

    def sample(self) -> tuple[list[dict], list[dict], list[str]]:
        return [], [], []

    def close(self) -> None:
        pass


def open_source(requested: str, interval_s: float) -> object:
    """NVML when it loads and sees a GPU, else nvidia-smi's streams when it is on PATH, else no GPU source."""
    if requested in ("auto", "nvml"):
        nvml = HostNvml.open()
        count = nvml.device_count() if nvml is not None else 0
        if nvml is not None and count:
            return NvmlSource(nvml, count)
        if nvml is not None:
            nvml.close()
    smi = shutil.which("nvidia-smi") if requested in ("auto", "nvidia-smi") else None
    if smi:
        source = SmiSource(smi, interval_s)
        source.start()
        return source
    return NoGpuSource()


def _watch_stdin(stop: threading.Event) -> None:
    """Set ``stop`` when stdin reaches EOF: the client closed its end (or its SSH channel went away)."""
    # os.read on the descriptor, not sys.stdin: a daemon thread blocked inside a buffered reader holds its
    # lock, and the interpreter aborts at exit when it finds that lock taken.
    try:
        fd = sys.stdin.fileno()
        while os.read(fd, 65536):
            pass
    except (OSError, ValueError, AttributeError):
        pass
    stop.set()


def run_monitor(interval_s: float = 2.0, requested: str = "auto", out: Optional[IO[str]] = None) -> int:
    """Print snapshots every ``interval_s`` until stdout closes, stdin reaches EOF or a SIGTERM/SIGHUP comes."""
    out = out or sys.stdout
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    source = open_source(requested, interval_s)
    threading.Thread(target=_watch_stdin, args=(stop,), daemon=True, name="monitor-stdin").start()
    table = ProcessTable()
    started = time.monotonic()
    # nvidia-smi can take seconds to answer (no persistence daemon); still, stdin EOF ends the wait at once.
    while not getattr(source, "ready", lambda: True)() and time.monotonic() - started < FIRST_ROW_WAIT_S:
        if stop.wait(0.05):
            break
    seq, due = 0, time.monotonic()
    try:
        while not stop.is_set():
            gpus, unplaced, errors = source.sample()
            line = json.dumps(snapshot(seq, source.name, gpus, host_cpu(table), errors, unplaced), sort_keys=True)
            try:
                out.write(line + "\n")
                out.flush()
            except (OSError, ValueError):  # BrokenPipeError: nobody reads any more
                break
            seq += 1
            due = max(due + interval_s, time.monotonic())
            stop.wait(due - time.monotonic())
    finally:
        source.close()
        _quiet_stdout(out)
    return 0


def _quiet_stdout(out: IO[str]) -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's exit flush does not complain."""
    if out is sys.stdout:
        try:
            out.flush()
        except (OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
