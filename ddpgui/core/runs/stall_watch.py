"""Stall detection for every active run of a RunManager: one StallDetector per run, fed from its updates.

:class:`StallWatch` subscribes to the manager (the records and output each update brings, as the GUI and the
CLI get them) and keeps a :class:`~ddpgui.core.runs.stalls.StallDetector` per run, seeded from the store when
it first hears of the run.  The caller asks :meth:`StallWatch.check` on a timer (the GUI every few seconds):
it returns every watched run's decision and tells ``on_change`` when a run's decision changes (became
"stalled?", recovered, entered a phase).  :meth:`StallWatch.stops_due` names the runs the policy's automatic
stop wants stopped; the caller stops them with ``RunManager.stop`` (it blocks: off the GUI thread).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from remote_runner.spools import EVENTS, METRICS, STDERR, STDOUT

from .follower import RunUpdate
from .stalls import ENDED, StallDecision, StallDetector, StallPolicy, auto_stop_due

#: Lines of the stored output tail read when a run is first watched (for the notification's last lines).
SEED_TAIL_BYTES = 4096


class StallWatch:
    """Watches ``manager``'s runs; ``on_change(run_id, decision)`` is called from :meth:`check`'s thread."""

    def __init__(self, manager, policy: StallPolicy | None = None,
                 on_change: Callable[[str, StallDecision], None] | None = None, clock=time.time):
        self.manager, self.policy, self.on_change, self.clock = manager, policy or StallPolicy(), on_change, clock
        self._lock = threading.Lock()
        self._runs: dict[str, StallDetector] = {}
        self._decisions: dict[str, StallDecision] = {}
        self._stops_asked: set[str] = set()
        self._unsubscribe = manager.subscribe(self._on_update)

    def close(self) -> None:
        self._unsubscribe()

    def set_policy(self, policy: StallPolicy) -> None:
        with self._lock:
            self.policy = policy
            for detector in self._runs.values():
                detector.policy = policy

    def watch(self, run_id: str) -> None:
        """Watch a run now (one already active when the watch started; others are watched at their first
        update), seeded from what the store holds of it."""
        with self._lock:
            if run_id not in self._runs:
                self._seed(run_id)

    def decision(self, run_id: str) -> StallDecision | None:
        """The run's last decision from :meth:`check`, or None when it is not watched."""
        with self._lock:
            return self._decisions.get(run_id)

    def detector(self, run_id: str) -> StallDetector | None:
        with self._lock:
            return self._runs.get(run_id)

    def check(self, now: float | None = None) -> dict[str, StallDecision]:
        """Every watched run's decision now (``now`` on this computer's clock); a run that has ended is reported
        once as ended and then no longer watched."""
        now = self.clock() if now is None else now
        changed = []
        with self._lock:
            out = {}
            for run_id, detector in list(self._runs.items()):
                decision = detector.decide(detector.host_now(now))
                out[run_id] = decision
                old = self._decisions.get(run_id)
                if old is None or (old.state, old.kind, old.phase) != (decision.state, decision.kind, decision.phase):
                    changed.append((run_id, decision))
                self._decisions[run_id] = decision
                if decision.state == ENDED:
                    del self._runs[run_id]
                    self._stops_asked.discard(run_id)
        for run_id, decision in changed:
            if self.on_change is not None:
                self.on_change(run_id, decision)
        return out

    def stops_due(self, now: float | None = None) -> list[str]:
        """Runs whose automatic stop is due by the policy (each named once); the caller stops them."""
        now = self.clock() if now is None else now
        with self._lock:
            due = []
            for run_id, detector in self._runs.items():
                decision = self._decisions.get(run_id)
                if decision is not None and run_id not in self._stops_asked \
                        and auto_stop_due(decision, self.policy, detector.host_now(now)):
                    self._stops_asked.add(run_id)
                    due.append(run_id)
            return due

    # ---- feeding ---------------------------------------------------------------------------------------------
    def _on_update(self, update: RunUpdate) -> None:
        if not update.run_id:  # a host's link dropped: the detectors see the silence of its telemetry
            return
        arrived = self.clock()
        with self._lock:
            detector = self._runs.get(update.run_id)
            if detector is None:  # first heard of: the store already holds this update's records
                detector = self._seed(update.run_id)
                if detector is not None:
                    for records in update.records.values():
                        for rec in records:
                            if isinstance(rec.get("t"), (int, float)):
                                detector.lags.append(arrived - rec["t"])
                return
            detector.add_records(update.records, update.node, arrived)
            for spool in (STDOUT, STDERR):
                if update.logs.get(spool):
                    detector.add_output(spool, update.logs[spool], update.node, arrived)
            if update.run is not None and not update.run.active:
                detector.ended = update.run.state

    def _seed(self, run_id: str) -> StallDetector | None:
        """A detector for the run, seeded from the store; None for a run no longer active or not in the store."""
        try:
            record = self.manager.store.get_run(run_id)
        except KeyError:
            return None
        if not record.active:
            return None
        detector = self._runs[run_id] = detector_for_run(self.manager.store, record, self.policy, self.clock)
        return detector


def detector_for_run(store, record, policy: StallPolicy | None = None, clock=time.time) -> StallDetector:
    """A detector for the stored run ``record``, fed what the store holds of it: its events, its metric records'
    times, the last lines of its stdout (telemetry is not read back: the processes' liveness and the GPUs'
    idleness are judged from the records that arrive from now on)."""
    detector = StallDetector.for_config(record.config, policy, clock)
    for node in range(max(1, len(record.run_dirs))):
        for rec in store.records(record.id, EVENTS, node):
            detector.add(EVENTS, rec, node)
    series = store.series(record.id, METRICS, keys=("t", "warmup"))
    for t, warmup in zip(series["t"], series["warmup"]):
        if np.isfinite(t):
            detector.add(METRICS, {"t": float(t), "warmup": bool(warmup == 1)})
    tail = store.log_tail(record.id, STDOUT)
    lines = tail[-SEED_TAIL_BYTES:].decode("utf-8", "replace").splitlines()
    detector.lines.extend(line[:500] for line in lines[len(tail) > SEED_TAIL_BYTES:] if line.strip())
    return detector
