"""HostMonitor: one long-lived ``runner monitor`` per host, over the host's own connection, while somebody looks.

The sampler (``remote_runner monitor --interval N``, docs/PROTOCOL.md "Host monitor") runs on an SSH exec
channel of the target's existing :class:`~ddpgui.core.ssh.connection.SSHConnection` (a subprocess for This
computer) with its stdin held open: closing that stdin is how :meth:`HostMonitor.stop` tells it to end, so
nothing is left on the host.  A worker thread reads its lines, parses each with
:func:`~ddpgui.core.gpus.snapshot.parse_snapshot_line` and hands the latest snapshot to ``on_snapshot``
(called on that worker: a GUI marshals it to its own thread).

Views :meth:`~HostMonitor.acquire` the monitor while they show the host and :meth:`~HostMonitor.release` it
after; the sampler starts with the first watcher and stops ``grace_s`` after the last one left.  A malformed
line is skipped and counted; a sampler or connection that goes away is reported (``on_problem`` and
:attr:`~HostMonitor.problem`, with a hint) and started again on the next :meth:`~HostMonitor.acquire`.
Qt-free.
"""
from __future__ import annotations

import logging
import os
import select
import subprocess
import threading
import time
from collections.abc import Callable

from remote_runner.proctree import end_process

from ..ssh.connection import ChannelStream
from ..targets.base import ConnectionLost, Target, TargetError
from .snapshot import HostSnapshot, SnapshotError, parse_snapshot_line

log = logging.getLogger(__name__)

#: Seconds between snapshots (the issue's "about every 2 s").
DEFAULT_INTERVAL_S = 2.0
#: Seconds the sampler keeps running after the last watcher left (a view closed and opened again soon).
DEFAULT_GRACE_S = 30.0
#: Seconds without a line before the sampler counts as gone (its first snapshot may wait 30 s for nvidia-smi).
SILENCE_S = 60.0
#: Seconds :meth:`HostMonitor.stop` waits for the sampler to end after its stdin closed.
STOP_WAIT_S = 15.0

SnapshotCallback = Callable[[HostSnapshot], None]
ProblemCallback = Callable[["MonitorError"], None]


class MonitorError(TargetError):
    """The host monitor could not run or went away; ``hint`` says what to do."""


class _Sampler:
    """The running ``runner monitor``: its stdout to read, its stdin to close, its stderr's last lines."""

    def read(self, timeout: float) -> bytes:
        """stdout bytes within ``timeout`` (b"" at its end); TimeoutError when silent."""
        raise NotImplementedError

    def close_stdin(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def exit_status(self) -> int | None:
        raise NotImplementedError

    stderr: bytes = b""

    def _keep_stderr(self, data: bytes) -> None:
        self.stderr = (self.stderr + data)[-4000:]


class _ChannelSampler(_Sampler):
    """On an SSH exec channel of the target's connection; stdin stays open until :meth:`close_stdin`."""

    def __init__(self, target: Target, argv: list[str]):
        connection = target.connection
        try:
            self._chan = connection.start(argv, keep_stdin=True)
        except ConnectionLost:
            raise
        except Exception as exc:  # paramiko.SSHException, EOFError, OSError: the link is gone
            raise connection._lost(f"while starting the host monitor ({exc or type(exc).__name__})") from None
        # its stderr is kept (the last 4000 bytes): a sampler that ends by itself is reported in its own words
        self._stream = ChannelStream(self._chan, connection, on_stderr=self._keep_stderr,
                                     doing="monitoring the host")

    def read(self, timeout: float) -> bytes:
        return self._stream.read(timeout)

    def close_stdin(self) -> None:
        try:
            self._chan.shutdown_write()
        except Exception:  # a channel of a dropped link: the sampler sees its stdout closed instead
            pass

    def close(self) -> None:
        self._chan.close()

    def exit_status(self) -> int | None:
        return self._chan.recv_exit_status() if self._chan.exit_status_ready() else None


class _ProcessSampler(_Sampler):
    """A subprocess on this computer (the "This computer" target)."""

    def __init__(self, argv: list[str]):
        try:
            self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise MonitorError(f"cannot start the host monitor ({argv[0]}): {exc}",
                               "check the python of this computer's profile") from None
        self._out, self._err = self._proc.stdout.fileno(), self._proc.stderr.fileno()

    def read(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self._out] + ([self._err] if self._err is not None else []), [], [], left)
            if self._err is not None and self._err in ready:
                data = os.read(self._err, 1 << 16)
                if data:
                    self._keep_stderr(data)
                else:
                    self._err = None
            if self._out in ready:
                return os.read(self._out, 1 << 20)

    def close_stdin(self) -> None:
        try:
            self._proc.stdin.close()
        except OSError:
            pass

    def close(self) -> None:
        end_process(self._proc, STOP_WAIT_S)
        for stream in (self._proc.stdout, self._proc.stderr):
            stream.close()

    def exit_status(self) -> int | None:
        return self._proc.poll()


def monitor_command(target: Target, interval_s: float = DEFAULT_INTERVAL_S, source: str | None = None) -> list[str]:
    """The argv of the host's sampler (the runner must be deployed to the target)."""
    return target.runner("monitor", "--interval", f"{interval_s:g}", *(["--source", source] if source else []))


def start_sampler(target: Target, argv: list[str]) -> _Sampler:
    """The sampler on the target's own connection: an exec channel over SSH, else a local subprocess."""
    connection = getattr(target, "connection", None)
    if connection is not None and hasattr(connection, "transport"):
        return _ChannelSampler(target, argv)
    from ..targets.local import LocalTarget

    if isinstance(target, LocalTarget):
        return _ProcessSampler(argv)
    raise MonitorError(f"{target.name} cannot run the host monitor (a {type(target).__name__})",
                       "the host monitor runs on SSH hosts and on this computer")


class HostMonitor:
    """The snapshots of one host, sampled while at least one watcher looks; thread-safe.

    ``open_target()`` gives the host's target with the runner deployed (a TargetPool's ``target(host)``); it
    is called on the worker, so a slow connection never blocks the caller.
    """

    def __init__(self, host: str, open_target: Callable[[], Target], *, interval_s: float = DEFAULT_INTERVAL_S,
                 grace_s: float = DEFAULT_GRACE_S, source: str | None = None,
                 on_snapshot: SnapshotCallback | None = None, on_problem: ProblemCallback | None = None,
                 silence_s: float = SILENCE_S):
        self.host = host
        self._open_target = open_target
        self.interval_s, self.grace_s, self.source, self.silence_s = interval_s, grace_s, source, silence_s
        self.on_snapshot, self.on_problem = on_snapshot, on_problem
        self._cond = threading.Condition()
        self._watchers = 0
        self._worker: threading.Thread | None = None
        self._sampler: _Sampler | None = None
        self._stopping = False
        self._restart = False  # a watcher came while the sampler was ending
        self._idle_timer: threading.Timer | None = None
        self.latest: HostSnapshot | None = None
        self.problem: MonitorError | None = None
        #: Lines that were not snapshots (skipped), and the last one's error.
        self.skipped_lines = 0
        self.last_skip: SnapshotError | None = None

    # ---- watchers ----------------------------------------------------------------------------
    @property
    def watchers(self) -> int:
        return self._watchers

    @property
    def running(self) -> bool:
        worker = self._worker
        return worker is not None and worker.is_alive()

    def acquire(self) -> None:
        """One more watcher: the sampler starts (again, after a problem) unless it runs."""
        with self._cond:
            self._watchers += 1
            self._cancel_idle()
            if not self.running:
                self._start_worker()
            elif self._stopping:  # the sampler is ending (an idle stop): a new one starts when it has ended
                self._restart = True

    def _start_worker(self) -> None:
        self._stopping = self._restart = False
        self.problem = None
        self.latest = None  # a new sampler: its snapshots start again at seq 0
        self._worker = threading.Thread(target=self._work, name=f"host-monitor-{self.host}", daemon=True)
        self._worker.start()

    def release(self) -> None:
        """One watcher less: the last one leaving stops the sampler after ``grace_s`` (at once for 0)."""
        with self._cond:
            if self._watchers == 0:
                return
            self._watchers -= 1
            if self._watchers or not self.running:
                return
            if self.grace_s <= 0:
                stop_now = True
                self._stopping = True  # as in _idle_stop: a watcher coming meanwhile gets a new sampler
            else:
                stop_now = False
                self._idle_timer = threading.Timer(self.grace_s, self._idle_stop)
                self._idle_timer.daemon = True
                self._idle_timer.start()
        if stop_now:
            self.stop(idle=True)

    def _cancel_idle(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _idle_stop(self) -> None:
        with self._cond:
            if self._watchers:
                return
            self._stopping = True  # under the lock: a watcher coming from now on waits for a new sampler
        self.stop(idle=True)

    def stop(self, timeout: float = STOP_WAIT_S, idle: bool = False) -> None:
        """End the sampler: its stdin closes, it exits within an interval; nothing of it is left on the host.
        ``idle``: the last watcher left (a watcher coming while it ends gets a new sampler after it)."""
        with self._cond:
            self._cancel_idle()
            self._stopping = True
            # an idle stop lets a watcher who came meanwhile have a new sampler; an explicit stop ends it all
            self._restart = self._restart and self._watchers > 0 and idle
            sampler, worker = self._sampler, self._worker
            self._cond.notify_all()
        if sampler is not None:
            sampler.close_stdin()
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout + self.interval_s)
        if sampler is not None and worker is not None and worker.is_alive():
            sampler.close()  # it did not end by itself: the channel (or the process) is ended

    # ---- snapshots ---------------------------------------------------------------------------
    def wait_snapshot(self, timeout: float, after_seq: int | None = None) -> HostSnapshot:
        """The latest snapshot (newer than ``after_seq``), waiting up to ``timeout`` s; raises the problem
        that ended the sampler, or :class:`MonitorError` when none came in time."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                latest = self.latest
                if latest is not None and (after_seq is None or latest.seq > after_seq):
                    return latest
                if self.problem is not None:
                    raise self.problem
                left = deadline - time.monotonic()
                if left <= 0:
                    raise MonitorError(f"no snapshot from the host monitor on {self.host} within {timeout:.0f} s",
                                       "the host may be overloaded or its connection slow; try again")
                self._cond.wait(min(left, 1.0))

    # ---- the worker --------------------------------------------------------------------------
    def _work(self) -> None:
        sampler = None
        try:
            target = self._open_target()
            sampler = start_sampler(target, monitor_command(target, self.interval_s, self.source))
            with self._cond:
                self._sampler = sampler
                stopping = self._stopping
            if stopping:
                sampler.close_stdin()
            self._read(sampler)
        except TargetError as exc:
            self._report(exc if isinstance(exc, MonitorError) else
                         MonitorError(f"the host monitor on {self.host} stopped: {exc.args[0] if exc.args else exc}",
                                      (exc.hint + "; " if exc.hint else "") + "it starts again when the host is "
                                      "looked at again"))
        except Exception as exc:  # never let the worker die silently
            log.exception("host monitor for %s crashed", self.host)
            self._report(MonitorError(f"the host monitor on {self.host} failed: {exc}",
                                      "it starts again when the host is looked at again; if this repeats, "
                                      "report this message"))
        finally:
            if sampler is not None:
                sampler.close()
            with self._cond:
                self._sampler = None
                self._cond.notify_all()
                if self._restart and self._watchers:  # watched again while it was ending
                    self._start_worker()

    def _read(self, sampler: _Sampler) -> None:
        buffer = b""
        while True:
            try:
                data = sampler.read(self.silence_s)
            except TimeoutError:
                if self._stopping:
                    return
                raise MonitorError(f"the host monitor on {self.host} printed nothing for {self.silence_s:.0f} s",
                                   "the host or its connection may hang; it starts again when the host is looked "
                                   "at again") from None
            if not data:
                if not self._stopping:
                    self._report(self._ended(sampler))
                return
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    self._line(line)

    def _line(self, line: bytes) -> None:
        try:
            snapshot = parse_snapshot_line(line)
        except SnapshotError as exc:
            with self._cond:
                self.skipped_lines += 1
                self.last_skip = exc
            log.warning("host monitor on %s: skipped a line: %s", self.host, exc)
            return
        with self._cond:
            self.latest = snapshot
            self._cond.notify_all()
        if self.on_snapshot is not None:
            try:
                self.on_snapshot(snapshot)
            except Exception:
                log.exception("a host monitor listener failed")

    def _ended(self, sampler: _Sampler) -> MonitorError:
        for _ in range(20):  # the exit status follows the end of stdout by a moment
            status = sampler.exit_status()
            if status is not None:
                break
            time.sleep(0.1)
        err = sampler.stderr.decode("utf-8", "replace").strip()
        last = err.splitlines()[-1].strip() if err else ""
        said = f" (exit {status})" if status is not None else ""
        return MonitorError(f"the host monitor on {self.host} ended by itself{said}" + (f": {last}" if last else ""),
                            "it starts again when the host is looked at again; if it keeps ending, deploy the "
                            "runner again (Test connection)")

    def _report(self, problem: MonitorError) -> None:
        with self._cond:
            self.problem = problem
            self._cond.notify_all()
        log.warning("%s", problem)
        if self.on_problem is not None:
            try:
                self.on_problem(problem)
            except Exception:
                log.exception("a host monitor listener failed")


def snapshot_once(host: str, open_target: Callable[[], Target], timeout: float = 90.0,
                  source: str | None = None) -> HostSnapshot:
    """One snapshot of the host (``--gpus free:2`` at launch, ``ddpgui gpus``); the sampler ends after it."""
    monitor = HostMonitor(host, open_target, grace_s=0, source=source)
    monitor.acquire()
    try:
        return monitor.wait_snapshot(timeout)
    finally:
        monitor.release()


class HostMonitors:
    """One :class:`HostMonitor` per host over the connections of a TargetPool (``pool.target(host)``), for the
    views that show hosts (a hosts panel's "3 of 8 GPUs free", device panels, a fleet view); thread-safe."""

    def __init__(self, pool, **options):
        self._pool = pool
        self._options = options
        self._monitors: dict[str, HostMonitor] = {}
        self._lock = threading.Lock()

    def get(self, host: str) -> HostMonitor:
        """The host's monitor (made on first use; acquire it to start sampling)."""
        with self._lock:
            monitor = self._monitors.get(host)
            if monitor is None:
                monitor = self._monitors[host] = HostMonitor(host, lambda: self._pool.target(host), **self._options)
            return monitor

    def close(self) -> None:
        """Stop every sampler (the app quits)."""
        with self._lock:
            monitors = list(self._monitors.values())
        for monitor in monitors:
            monitor.stop()
