"""The logs a user's script writes to files (TensorBoard event files, CSV logs), found wherever it writes them.

Rank 0 runs the script under our entry, which adds a Python audit hook (:func:`note_written_files`): every
file the process opens for writing whose name is a TensorBoard event file (``events.out.tfevents.*``) or a
CSV file is noted once, by absolute path, in ``script_files.jsonl`` of the run directory.  So a log inside
the script's folder, at an absolute path the script was given (``--logdir /scratch/x``), or one a framework
chose (Lightning's ``lightning_logs/version_3``) is found without the user naming it.  The supervisor's
:class:`LogFileWatcher` reads that list and tails each file with its format's reader, into the sink.
"""
import json
import os
import sys
import threading
import time
from typing import Optional

from .sink import MetricSink

#: The run directory's list of files rank 0 opened for writing (host-side only, not streamed).
WRITTEN_FILES = "script_files.jsonl"
#: Seconds between two looks at the files.
POLL_S = 0.25


def log_kind(path: str) -> Optional[str]:
    """"tensorboard" or "csv" for a file name that may be a metrics log, else None."""
    name = os.path.basename(path)
    if "tfevents" in name:
        return "tensorboard"
    if name.lower().endswith(".csv"):
        return "csv"
    return None


def note_written_files(run_dir: str) -> None:
    """Note, in ``run_dir/script_files.jsonl``, every log file this process (and its forks) opens for writing.

    An audit hook cannot be removed and runs for every audited event of the process, so it returns at once
    for anything but ``open``, never raises (an exception would fail the script's own ``open``), and writes
    with ``os.write`` on a descriptor opened beforehand (``os.write`` raises no audit event: no recursion).
    """
    fd = os.open(os.path.join(run_dir, WRITTEN_FILES), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    seen = set()
    writing = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT

    def hook(event: str, args: tuple) -> None:
        if event != "open":
            return
        try:
            path, mode, flags = args
            if isinstance(path, int) or not (flags & writing or (mode and mode[0] in "wax") or "+" in (mode or "")):
                return
            path = os.fsdecode(os.fspath(path))
            kind = log_kind(path)
            if kind is None:
                return
            path = os.path.abspath(path)
            if path in seen:
                return
            seen.add(path)
            os.write(fd, (json.dumps({"path": path, "kind": kind, "t": time.time()}) + "\n").encode())
        except Exception:  # never the script's problem
            return

    sys.addaudithook(hook)


class LogFileWatcher:
    """Tails every log file rank 0 noted, into the sink, on a thread of its own (:meth:`start`, :meth:`stop`)."""

    def __init__(self, run_dir: str, sink: MetricSink, poll_s: float = POLL_S):
        self.path = os.path.join(run_dir, WRITTEN_FILES)
        self.sink = sink
        self.poll_s = poll_s
        self.tails: list[tuple[str, str, object]] = []  # (kind, path, reader)
        self._offset = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="log-files", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling, then read what the files hold now, once more, to their end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
        self.poll(final=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
                self.sink.release()
            except Exception as exc:  # a reader's bug must not end the run's other readers
                self.sink.event("warning", message="reading the script's log files failed: %s" % exc)
                return

    def poll(self, final: bool = False) -> None:
        with self._lock:
            for path, kind in self._new_files():
                self._open(path, kind)
            for kind, path, reader in self.tails:
                if kind == "tensorboard":
                    self._tensorboard(path, reader, final)
                else:
                    self._csv(path, reader, final)

    def _new_files(self) -> list[tuple[str, str]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self._offset += end
        found = []
        for line in data[:end].splitlines():
            try:
                note = json.loads(line)
                found.append((str(note["path"]), str(note["kind"])))
            except (ValueError, KeyError, TypeError):
                continue
        return found

    def _open(self, path: str, kind: str) -> None:
        if kind == "tensorboard":
            from .tbevents import EventFileTail

            reader = EventFileTail(path)
            if reader.unavailable:
                self.sink.file_found(path, kind, False, reader.unavailable)
                return
        elif kind == "csv":
            from .csvlogs import CsvLogTail

            reader = CsvLogTail(path)
        else:
            return
        self.tails.append((kind, path, reader))
        if kind == "tensorboard":
            self.sink.file_found(path, kind, True)

    def _tensorboard(self, path: str, reader, final: bool) -> None:
        step: Optional[int] = None
        values: dict[str, float] = {}
        wall = None
        for scalar in (reader.finish() if final else reader.read()):
            if scalar.step != step and values:
                self.sink.logged("tensorboard", path, step, values, t=wall)
                values = {}
            step, wall = scalar.step, scalar.wall_time
            values[scalar.tag] = scalar.value
        if values:
            self.sink.logged("tensorboard", path, step, values, t=wall)
        if final:
            self._report_bad(path, reader, "record")

    def _csv(self, path: str, reader, final: bool) -> None:
        announced = getattr(reader, "announced", False)
        for step, values in (reader.finish() if final else reader.read()):
            if not announced:
                self.sink.file_found(path, "csv", True)
                reader.announced = announced = True
            self.sink.logged("csv", path, step, values)
        if final:
            if not announced and getattr(reader, "not_a_log", ""):
                self.sink.file_found(path, "csv", False, reader.not_a_log)
            self._report_bad(path, reader, "row")

    def _report_bad(self, path: str, reader, what: str) -> None:
        bad = getattr(reader, "corrupt", 0)
        if bad:
            self.sink.event("warning", message="skipped %d unreadable %s%s in %s" % (bad, what, "" if bad == 1 else "s",
                                                                                    path), source="host")
        if getattr(reader, "truncated", 0):
            self.sink.event("warning", message="the last record of %s was cut short (%d bytes): it was not read"
                            % (path, reader.truncated_bytes), source="host")
