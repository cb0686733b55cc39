"""Following runs: one thread per host reads the ``follow`` streams of all that host's active runs.

One :class:`HostFollower` thread per host connection waits on all of the host's
streams (channels multiplexed on one SSH connection, or local pipes) with one
``select``; each read's chunks go to its :class:`FollowSink` (the RunManager's handlers),
which stores them with their offsets in one transaction.  A dropped link is
reconnected with a backoff that grows to a cap; a follow the runner itself ends
with an error is retried a few times and then ends its run with that error.

The store failing is no link failure.  A store that cannot be written at all (its disk full, the file
damaged or read-only) is said once (a :class:`RunUpdate` with ``store`` set, and ``store=""`` once it works
again) while every run waits, with a backoff, at the offsets the store holds: nothing is lost, and following
goes on by itself.  A failure storing one run's data (not the store's) is that run's: tried once more, then
the run ends with the reason, and the host's other runs go on.
"""
from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..store import (
    RunNotFound,
    RunRecord,
    RunStore,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreGapError,
    StoreReadOnlyError,
)
from ..targets.base import ConnectionLost, Stream, TargetError
from ..targets.pool import TargetPool
from .protocol import Chunk, End, FollowDecoder, Heartbeat, ProtocolError, RunnerFailed

log = logging.getLogger(__name__)

#: A stream silent this long (the runner beats every second) counts as a dropped link.
SILENCE_S = 5.0
#: Reconnect delays after a dropped link, in seconds (the last one repeats).  The count of failures
#: goes back to zero only once a stream delivered something, so a link that opens and at once fails
#: again backs off to the cap instead of logging in a few times a second.
BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
#: A run whose follow fails this many times in a row with the runner's own error (not the link's) ends with it.
FOLLOW_FAILURE_LIMIT = 3
#: A run whose data fails to be stored this many times in a row with the same error ends with it.
STORE_FAILURE_LIMIT = 2
#: Failures of the store as a whole: every run waits (at its stored offsets) until the store works again.
STORE_UNUSABLE = (StoreFullError, StoreCorruptError, StoreReadOnlyError)


@dataclass
class RunUpdate:
    """What changed in a run: new records per spool, and its row when its state changed."""

    run_id: str
    node: int = 0
    records: dict[str, list[dict]] = field(default_factory=dict)
    logs: dict[str, bytes] = field(default_factory=dict)
    run: RunRecord | None = None
    host: str | None = None
    connection: str | None = None  # "lost" when the host's link dropped (it is retried)
    store: str | None = None  # why the run store cannot be written (said once); "" once it can again


Listener = Callable[[RunUpdate], None]


@dataclass
class FollowSink:
    """Where a follower hands what its streams deliver (the RunManager's handlers)."""

    chunks: Callable[[str, int, list[Chunk]], None]  # one read's chunks of (run, node): store them, tell listeners
    heartbeat: Callable[[str, Heartbeat], None]  # (run, beat)
    ended: Callable[[str, int, dict], None]  # (run, node, final status)
    emit: Listener  # an update that is no run's records (the host's link dropped)


class _Follow:
    """One (run, node) being followed: its stream and decoder."""

    def __init__(self, run_id: str, node: int, run_dir: str):
        self.run_id, self.node, self.run_dir = run_id, node, run_dir
        self.stream: Stream | None = None
        self.decoder = FollowDecoder()
        self.last_data = time.monotonic()
        self.not_before = 0.0  # monotonic time before which it is not opened again (after a runner error)


class HostFollower(threading.Thread):
    """Follows every active run of one host through that host's one connection."""

    def __init__(self, host: str, targets: TargetPool, store: RunStore, sink: FollowSink):
        super().__init__(name=f"follow-{host}", daemon=True)
        self.host, self.targets, self.store, self.sink = host, targets, store, sink
        self._lock = threading.Lock()
        self._pending: list[_Follow] = []
        self._follows: dict[tuple[str, int], _Follow] = {}
        self._halt = threading.Event()
        self._runner_errors: dict[tuple[str, int], tuple[str, int]] = {}  # (run, node) → (last error, times)
        self._store_errors: dict[tuple[str, int], tuple[str, int]] = {}  # (run, node) → (last error, times)
        self._store_problem = ""  # why the store cannot be written, while it cannot (said once)
        self._store_kind: type | None = None
        self._store_failures = 0  # in a row, for the backoff
        self._dropped: set[tuple[str, int]] = set()  # (run, node) to stop following (closed on this thread)

    def add(self, run_id: str, node: int, run_dir: str, not_before: float = 0.0) -> None:
        follow = _Follow(run_id, node, run_dir)
        follow.not_before = not_before
        with self._lock:
            self._pending.append(follow)

    def remove(self, run_id: str, node: int) -> None:
        """Stop following (run, node) (its end was decided elsewhere: a Slurm node that never recorded one)."""
        with self._lock:
            self._pending = [f for f in self._pending if (f.run_id, f.node) != (run_id, node)]
            self._dropped.add((run_id, node))

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        failures = 0
        while not self._halt.is_set():
            try:
                self._open_pending()
                if not self._follows:
                    self._halt.wait(0.05)
                    continue
                if self._read_once():
                    failures = 0
            except STORE_UNUSABLE as exc:  # reading the offsets (or a run) failed: wait, the links are fine
                self._store_unusable(exc)
                self._halt.wait(self._store_backoff())
            except (TargetError, OSError, ProtocolError) as exc:  # ConnectionLost is a TargetError
                failures += 1
                log.warning("following runs on %s: %s (retry %d)", self.host, exc, failures)
                self.sink.emit(RunUpdate(run_id="", host=self.host, connection="lost"))
                self._reset_all()
                self._halt.wait(BACKOFF_S[min(failures, len(BACKOFF_S)) - 1])
            except Exception:  # never let the follower die silently: log and retry
                log.exception("follower for %s crashed; restarting its streams", self.host)
                self._reset_all()
                self._halt.wait(1.0)
        self._close_all()

    def _open_pending(self) -> None:
        """Open a stream for each run waiting to be followed; one that fails stays waiting."""
        with self._lock:
            dropped, self._dropped = self._dropped, set()
            pending = list(self._pending)
        for key in dropped:
            if key in self._follows:
                self._close(self._follows[key])
        if not pending:
            return
        now = time.monotonic()
        pending = [f for f in pending if f.not_before <= now]
        if not pending:
            return
        target = self.targets.target(self.host)
        for follow in pending:
            key = (follow.run_id, follow.node)
            if key not in self._follows:
                offsets = self.store.offsets(follow.run_id, follow.node)
                follow.stream = target.stream(target.follow_command(follow.run_dir, offsets))
                follow.last_data = time.monotonic()
                self._follows[key] = follow
            with self._lock:
                self._pending.remove(follow)

    def _read_once(self) -> bool:
        """One select over every stream; returns whether any stream delivered a message."""
        by_fd = {f.stream.fileno(): f for f in self._follows.values()}
        ready, _, _ = select.select(list(by_fd), [], [], 0.25)
        now = time.monotonic()
        delivered = False
        for fd in ready:
            follow = by_fd[fd]
            try:
                data = follow.stream.read(0.0)
            except TimeoutError:  # woken by something other than stdout (SSH stderr): nothing to read
                continue
            follow.last_data = now
            if not data:
                raise ConnectionLost(f"the follow stream of run {follow.run_id} ended early")
            try:
                messages = follow.decoder.feed(data)
            except RunnerFailed as exc:
                self._runner_failed(follow, exc)
                continue
            if messages:
                delivered = True
                self._runner_errors.pop((follow.run_id, follow.node), None)
            self._handle(follow, messages)
        for follow in list(self._follows.values()):
            if now - follow.last_data > SILENCE_S:
                raise ConnectionLost(f"no data from {self.host} for {SILENCE_S:.0f} s")
        return delivered

    def _runner_failed(self, follow: _Follow, exc: RunnerFailed) -> None:
        """The runner's follow of one run stopped with its own error (the link is fine): try that run again
        later, backing off; the same error FOLLOW_FAILURE_LIMIT times in a row ends the run with it."""
        self._close(follow)
        key = (follow.run_id, follow.node)
        last, times = self._runner_errors.get(key, ("", 0))
        times = times + 1 if str(exc) == last else 1
        self._runner_errors[key] = (str(exc), times)
        log.warning("following run %s on %s: %s (%d time(s))", follow.run_id, self.host, exc, times)
        if times >= FOLLOW_FAILURE_LIMIT:
            self._runner_errors.pop(key, None)
            self.sink.ended(follow.run_id, follow.node, {
                "state": "failed", "failure": exc.failure or "follow_failed", "ended_at": time.time(),
                "message": f"following the run on {self.host} failed {times} times in a row: {exc}",
                "hint": exc.hint or "look at the run directory on the host; ddpgui stop ends the run if it still runs"})
            return
        self.add(follow.run_id, follow.node, follow.run_dir,
                 not_before=time.monotonic() + BACKOFF_S[min(times, len(BACKOFF_S)) - 1])

    def _handle(self, follow: _Follow, messages: list) -> None:
        """Store one read's messages; a failure of the store is kept to this run (see the module's docstring)."""
        key = (follow.run_id, follow.node)
        try:
            self._deliver(follow, messages)
        except STORE_UNUSABLE as exc:
            self._store_unusable(exc)
            self._restart(follow, not_before=time.monotonic() + self._store_backoff())
        except RunNotFound:  # deleted from the store meanwhile (by another ddpgui): nothing to store it in
            log.warning("run %s is no longer in the run store; not following it any more", follow.run_id)
            self._close(follow)
        except (TargetError, OSError, ProtocolError):
            raise
        except Exception as exc:  # a failure of this run's data only: the host's other runs go on
            self._store_failed(follow, exc)
        else:
            self._store_errors.pop(key, None)

    def _deliver(self, follow: _Follow, messages: list) -> None:
        chunks = [m for m in messages if isinstance(m, Chunk)]
        if chunks:
            try:
                self.sink.chunks(follow.run_id, follow.node, chunks)
            except StoreGapError:
                # The stream and the store disagree (e.g. a chunk stored by another follower): start over
                # from what the store holds.
                self._restart(follow)
                return
            if self._store_problem:  # said before the run's end is handled: `follow` exits at the end
                self._store_problem, self._store_failures = "", 0
                log.warning("the run store works again; following goes on")
                self.sink.emit(RunUpdate(run_id="", host=self.host, store=""))
        for message in messages:
            if isinstance(message, End):
                self._finish(follow, message)
            elif isinstance(message, Heartbeat):
                self.sink.heartbeat(follow.run_id, message)

    def _finish(self, follow: _Follow, end: End) -> None:
        self._close(follow)
        if end.ended:
            self.sink.ended(follow.run_id, follow.node, end.status)

    def _restart(self, follow: _Follow, not_before: float = 0.0) -> None:
        self._close(follow)
        self.add(follow.run_id, follow.node, follow.run_dir, not_before=not_before)

    def _store_backoff(self) -> float:
        self._store_failures += 1
        return BACKOFF_S[min(self._store_failures, len(BACKOFF_S)) - 1]

    def _store_unusable(self, exc: Exception) -> None:
        """The store cannot be written at all: say so once (until it works again, or fails another way)."""
        log.warning("following runs on %s: %s (retry %d)", self.host, exc, self._store_failures + 1)
        said, self._store_problem = self._store_problem, str(exc)
        if not said or type(exc) is not self._store_kind:  # its free bytes may change: the kind is what is said
            self.sink.emit(RunUpdate(run_id="", host=self.host, store=str(exc)))
        self._store_kind = type(exc)

    def _store_failed(self, follow: _Follow, exc: Exception) -> None:
        """Storing what one run wrote failed: follow it again from its stored offsets; the same failure
        STORE_FAILURE_LIMIT times in a row ends the run with it (instead of trying forever)."""
        key = (follow.run_id, follow.node)
        text = f"{type(exc).__name__}: {exc}" if not isinstance(exc, StoreError) else str(exc)
        last, times = self._store_errors.get(key, ("", 0))
        times = times + 1 if text == last else 1
        self._store_errors[key] = (text, times)
        log.warning("storing run %s from %s failed: %s (%d time(s))", follow.run_id, self.host, text, times)
        if times < STORE_FAILURE_LIMIT:
            self._restart(follow, not_before=time.monotonic() + BACKOFF_S[0])
            return
        self._close(follow)
        self._store_errors.pop(key, None)
        self.sink.ended(follow.run_id, follow.node, {
            "state": "failed", "failure": "store_failed", "ended_at": time.time(),
            "message": f"ddpgui could not store what the run wrote ({times} times in a row): {text}",
            "hint": "what the run wrote is still in its run directory on the host; ddpgui stop ends the run if it "
                    "still runs; please report this message as a ddpgui bug"})

    def _close(self, follow: _Follow) -> None:
        self._follows.pop((follow.run_id, follow.node), None)
        if follow.stream is not None:
            follow.stream.close()
            follow.stream = None

    def _reset_all(self) -> None:
        """Drop every stream (and the connection); each run is followed again from the stored offsets."""
        follows = list(self._follows.values())
        self._close_all()
        self.targets.drop(self.host)
        with self._lock:
            self._pending = [_Follow(f.run_id, f.node, f.run_dir) for f in follows] + self._pending

    def _close_all(self) -> None:
        for follow in list(self._follows.values()):
            try:
                self._close(follow)
            except Exception:  # a stream on a dead link may fail to close; it is gone either way
                pass
        self._follows.clear()
