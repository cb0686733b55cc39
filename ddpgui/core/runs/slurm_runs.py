"""Runs on Slurm clusters: submit one job per run, watch the queue, end runs in Slurm's words, stop with scancel.

A run's follow streams start at submission (the login node reads every node's
spools on the shared run root; ``follow`` beats "created" until the job starts),
so its records, its start (heartbeats say starting/running) and its nodes' own
ends arrive exactly as on SSH hosts.  Slurm is asked only what the streams
cannot tell (the watcher thread of :class:`SlurmRuns`, one for every cluster, one ``squeue``
per cluster per poll however many runs it has):

- while a job is queued: its pending reason, shown as the run's message;
- once every node recorded its end, or the job left the queue: how Slurm ended
  it (TIMEOUT, CANCELLED by someone else, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED),
  which wins over "stopped" (what the nodes record when Slurm sends SIGTERM);
  a node that never recorded an end (its machine died) is ended here, named;
- a job Slurm requeued (preemption, ``scontrol requeue``): the run ends
  ``stopped`` (failure ``requeued``) and the new attempt is a linked run
  ``<id>-r<N>`` in new run directories (remote_runner.slurm).

The run's Slurm facts live in ``environment["slurm"]``: job_id, state, reason,
nodes, attempt, stop_requested, requeue_of / requeued_as.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from remote_runner.config import RunConfig, config_from_dict
from remote_runner.slurm import attempt_base, node_run_dir
from remote_runner.status import FINAL_STATES

from ..slurm.jobs import LIVE, JobInfo, end_columns, pending_text
from ..store import RunRecord, RunStore
from ..targets.base import Progress, TargetError
from ..targets.pool import TargetPool
from . import launches
from .nodes import node_states, outcome

log = logging.getLogger(__name__)

#: Seconds between squeue calls for a cluster while one of its jobs is queued or ending.
POLL_S = 10.0
#: ... and while all of its jobs run (their streams tell their state): a slow check for ends no stream can see.
RUNNING_POLL_S = 30.0
#: Seconds a job may be gone from the queue (or final) while one of its nodes has recorded no end.
END_GRACE_S = 15.0
#: Slurm end states that say more than the nodes' own records ("stopped" by SIGTERM, lost peers).
SLURM_WINS = frozenset({"TIMEOUT", "CANCELLED", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY", "DEADLINE", "BOOT_FAIL"})


def slurm_of(record: RunRecord) -> dict:
    return dict((record.environment or {}).get("slurm") or {})


class SlurmRuns:
    """The Slurm side of a RunManager: ``emit_end(run_id, node, record)`` tells listeners and wakes waiters,
    ``follow(run_id)`` starts its streams, ``drop_follow(run_id, node)`` ends one."""

    def __init__(self, store: RunStore, targets: TargetPool, emit: Callable[[str, RunRecord], None],
                 emit_end: Callable[[str, int, RunRecord], None], follow: Callable[[str], None],
                 drop_follow: Callable[[str, int], None], poll_s: float = POLL_S,
                 running_poll_s: float = RUNNING_POLL_S, end_grace_s: float = END_GRACE_S):
        self.store, self.targets = store, targets
        self._emit, self._emit_end, self._follow, self._drop_follow = emit, emit_end, follow, drop_follow
        self.poll_s, self.running_poll_s, self.end_grace_s = poll_s, running_poll_s, end_grace_s
        self._lock = threading.RLock()
        self._tracked: dict[str, str] = {}  # run id → host
        self._gone_since: dict[str, float] = {}  # run id → when its job was first seen ended
        self._due: dict[str, float] = {}  # host → monotonic time of its next poll
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- launching -------------------------------------------------------------------------
    def launch(self, host: str, cfg: RunConfig, progress: Progress | None = None,
               sweep_id: str | None = None) -> RunRecord:
        """Create the run, check the request against the partition, prepare its directories and sbatch it."""
        hosts = [host] * cfg.nnodes
        self.store.create_run(cfg.run_id, name=cfg.name, tags=cfg.tags, hosts=hosts, config=cfg.to_dict(),
                              state="launching", total_steps=cfg.steps, sweep_id=sweep_id,
                              environment=launches.launcher(launches.STAGE_CONNECTING))
        def check(target) -> None:  # an impossible request is refused before anything is submitted
            problems = target.check_request(cfg)
            if problems:
                field, message, hint = problems[0]
                raise TargetError(f"{host}: {message}", hint, field=field)

        try:
            target, environment = launches.prepare(self.store, self.targets, host, cfg, progress, check)
            submission = target.submit(cfg)
        except BaseException as exc:
            launches.launch_failed(self.store, cfg.run_id, exc)
            raise
        slurm = {"job_id": submission.job_id, "state": "PENDING", "reason": "", "nodes": "", "attempt": 1,
                 "partition": target.options.partition, "time_limit": target.options.time_limit,
                 "base": target.run_dir(cfg.run_id)}
        record = self.store.update_run(cfg.run_id, state="queued", run_dirs=submission.run_dirs,
                                       environment=dict(environment, slurm=slurm),
                                       message=f"queued in Slurm (job {submission.job_id})")
        self._emit(cfg.run_id, record)
        return record

    # ---- tracking ------------------------------------------------------------------------
    def track(self, record: RunRecord) -> None:
        """Watch the run's job (after a launch, or a reattach after the app restarted)."""
        if not slurm_of(record).get("job_id"):
            return
        with self._lock:
            self._tracked[record.id] = record.host
            self._due[record.host] = 0.0
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="slurm-watch", daemon=True)
                self._thread.start()
        self._wake.set()

    def _update_slurm(self, run_id: str, slurm: dict | None = None, **columns: object) -> RunRecord:
        """Merge ``slurm`` into the run's ``environment["slurm"]`` (re-read under the lock: the watcher, a stop and
        the followers all write it) and store ``columns`` with it."""
        with self._lock:
            record = self.store.get_run(run_id)
            if slurm:
                columns["environment"] = dict(record.environment, slurm={**slurm_of(record), **slurm})
            return self.store.update_run(run_id, **columns) if columns else record

    def _untrack(self, run_id: str) -> None:
        with self._lock:
            self._tracked.pop(run_id, None)
            self._gone_since.pop(run_id, None)

    def poll_now(self, host: str) -> None:
        with self._lock:
            self._due[host] = 0.0
        self._wake.set()

    def close(self) -> None:
        self._halt.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._halt.is_set():
            now = time.monotonic()
            with self._lock:
                hosts = sorted(set(self._tracked.values()))
                due = [h for h in hosts if self._due.get(h, 0.0) <= now]
            for host in due:
                try:
                    self._poll(host)
                except Exception as exc:  # a dropped link: the next poll tries again
                    log.warning("asking Slurm on %s about its jobs: %s", host, exc)
                    with self._lock:
                        self._due[host] = time.monotonic() + self.poll_s
            with self._lock:
                waits = [self._due.get(h, 0.0) - time.monotonic() for h in set(self._tracked.values())]
            self._wake.wait(max(0.05, min(waits)) if waits else 1.0)
            self._wake.clear()

    def _poll(self, host: str) -> None:
        with self._lock:
            runs = [r for r, h in self._tracked.items() if h == host]
        records = {}
        for run_id in runs:
            try:
                records[run_id] = self.store.get_run(run_id)
            except KeyError:  # deleted meanwhile
                self._untrack(run_id)
        jobs = self.targets.target(host).jobs(sorted({slurm_of(r)["job_id"] for r in records.values()}))
        busy = False
        for record in records.values():
            info = jobs.get(slurm_of(record)["job_id"])
            busy |= self._update(record, info)
        with self._lock:
            self._due[host] = time.monotonic() + (self.poll_s if busy else self.running_poll_s)

    # ---- one run, from its job's state ------------------------------------------------------
    def _update(self, record: RunRecord, info: JobInfo | None) -> bool:
        """Bring the run in line with its job; returns whether it needs the short poll interval."""
        if not record.active:
            self._untrack(record.id)
            return False
        slurm = slurm_of(record)
        if info is not None and info.queued:
            if record.state in ("starting", "running") or slurm.get("ending"):
                self._requeued(record, info)
                return True
            message, hint = pending_text(info)
            if (message, info.reason) != (record.message, slurm.get("reason")):
                self._emit(record.id, self._update_slurm(record.id, {"state": info.state, "reason": info.reason},
                                                         state="queued", message=message, hint=hint))
            return True
        if info is not None and info.state in LIVE:
            self._gone_since.pop(record.id, None)
            if slurm.get("ending"):  # the nodes ended but the job runs: requeued and started again at once?
                full = self.targets.target(record.host).scontrol_job(slurm["job_id"])
                if full is not None and full.restarts >= int(slurm.get("attempt") or 1):
                    self._requeued(record, full)
                return True
            if (info.state, info.nodes) != (slurm.get("state"), slurm.get("nodes")):
                changes = {}
                if record.state == "queued":
                    changes.update(state="starting", message="", hint="", started_at=time.time())
                self._emit(record.id, self._update_slurm(record.id, {"state": info.state, "reason": "",
                                                                     "nodes": info.nodes or slurm.get("nodes", "")},
                                                         **changes))
            return bool(slurm.get("ending")) or record.state == "queued"
        # The job has ended (or Slurm forgot it): end the run once its nodes have, or after the grace.
        since = self._gone_since.setdefault(record.id, time.monotonic())
        states = node_states(self.store, record)
        if not all(s.final for s in states) and time.monotonic() - since < self.end_grace_s:
            return True
        self._finish(record, info, states)
        return False

    def _finish(self, record: RunRecord, info: JobInfo | None, states: list) -> None:
        slurm = slurm_of(record)
        requested = bool(slurm.get("stop_requested"))
        said = info.state if info is not None else "unknown to Slurm now"
        for s in states:
            if s.final:
                continue
            self._drop_follow(record.id, s.node)
            ended = self._status_on_disk(record, s.run_dir)
            if ended is not None:  # its end is on the shared disk; the follow stream had not brought it yet
                self.store.add_client_event(record.id, s.node, {
                    "event": ended["state"], "t": ended.get("ended_at") or time.time(),
                    "message": ended.get("message") or "", "hint": ended.get("hint") or "",
                    "failure": ended.get("failure"), "exit_code": ended.get("exit_code"),
                    "rank": ended.get("failed_rank")})
                self._follow(record.id)  # its last records
                continue
            # Slurm ended it (a stop, its time limit, a preemption): not the node's failure; a cancel of ours after
            # another node failed is no reason for this one to have recorded nothing.
            quiet = requested or (info is not None and (info.state in ("TIMEOUT", "PREEMPTED") or (
                info.state == "CANCELLED" and not slurm.get("failure_cancel"))))
            never_started = s.state == "starting" and not self.store.events(record.id, s.node)
            message = ("cancelled before it started" if never_started and requested else
                       "stopped on request" if requested else
                       f"{s.label} ended without recording an outcome (Slurm job {slurm.get('job_id')}: {said})")
            self.store.add_client_event(record.id, s.node, {
                "event": "stopped" if quiet else "failed", "t": time.time(), "message": message,
                "hint": "" if quiet else "look at slurm-%s.out in the run directory" % slurm.get("job_id"),
                "failure": None if quiet else "node_lost", "exit_code": None, "rank": None})
        states = node_states(self.store, record)
        final = outcome(states) or {"state": "failed", "message": "the job ended", "hint": "", "failure": "node_lost"}
        ours = requested or slurm.get("failure_cancel")
        if info is not None and info.state in SLURM_WINS and not (ours and info.state == "CANCELLED"):
            theirs = end_columns(info, requested, slurm.get("time_limit", ""))
            detail = final.get("message") if final.get("state") == "failed" else ""
            if detail and theirs["state"] == "failed":
                theirs["message"] += f"; {detail}"
            final.update(theirs)
        elif requested and final.get("state") != "failed":
            final.update(state="stopped", message=final.get("message") or "stopped on request", failure=None)
        final.setdefault("ended_at", time.time())
        record = self._update_slurm(record.id, {"state": info.state if info is not None else slurm.get("state"),
                                                "ending": None}, **final)
        self._untrack(record.id)
        self._emit_end(record.id, 0, record)

    def _status_on_disk(self, record: RunRecord, run_dir: str) -> dict | None:
        """The node's final status.json as the login node reads it on the shared run root, or None."""
        try:
            status = self.targets.target(record.host).status(run_dir)
        except TargetError:
            return None
        return status if status.get("state") in FINAL_STATES else None

    def _requeued(self, record: RunRecord, info: JobInfo) -> None:
        """Slurm requeued the job: this run ends; its next attempt is the linked run ``<id>-r<N>``, in the run
        directories the job's ``slurm-job`` makes for it (remote_runner.slurm.prepare_attempt)."""
        slurm = slurm_of(record)
        attempt = int(slurm.get("attempt") or 1)
        root_id = slurm.get("requeue_of") or record.id
        new_id = attempt_base(root_id, attempt)
        nnodes = int(record.config.get("nnodes") or 1)
        base = attempt_base(slurm["base"], attempt)
        name = f"{record.name or root_id} (attempt {attempt + 1})"
        config = dict(record.config, run_id=new_id, name=name)
        # Its directories are made now (the job's slurm-job reuses them), so its follow streams find them.
        self.targets.target(record.host).prepare(config_from_dict(config), exist_ok=True)
        for s in node_states(self.store, record):
            if not s.final:
                self._drop_follow(record.id, s.node)
        # The next attempt exists before this run ends: whoever sees the end can find it.
        new_slurm = dict(slurm, attempt=attempt + 1, requeue_of=root_id, state=info.state, reason=info.reason,
                         stop_requested=None, ending=None, requeued_as=None, failure_cancel=None)
        message, hint = pending_text(info) if info.queued else ("", "")
        self.store.create_run(new_id, name=name, tags=record.tags, hosts=record.hosts,
                              config=config, state="queued",
                              total_steps=record.total_steps, sweep_id=record.sweep_id,
                              environment=dict(record.environment, slurm=new_slurm))
        new = self.store.update_run(new_id, message=message, hint=hint,
                                    run_dirs={k: node_run_dir(base, nnodes, k) for k in range(nnodes)})
        ended = self._update_slurm(
            record.id, {"requeued_as": new_id, "ending": None}, state="stopped", failure="requeued",
            ended_at=time.time(), hint=f"its next attempt is run {new_id}",
            message=f"Slurm requeued job {slurm['job_id']} (preemption, a node failure or scontrol requeue): "
                    f"attempt {attempt + 1} runs as {new_id}")
        self._untrack(record.id)
        self._emit(new_id, new)
        self._emit_end(record.id, 0, ended)
        self._follow(new_id)

    # ---- the nodes' own ends, and stopping ----------------------------------------------------
    def nodes_ended(self, record: RunRecord, states: list) -> dict | None:
        """Every node has recorded its end: the final columns to store now, or None when Slurm must say more
        first (the watcher ends the run: a stop nobody asked for is Slurm's, a failure may be a node's)."""
        final = outcome(states)
        current = self.store.get_run(record.id)
        if final is None or not current.active:  # not yet, or ended already (by the watcher, from the disk)
            return None
        slurm = slurm_of(current)
        if final["state"] == "finished" or (final["state"] == "stopped" and slurm.get("stop_requested")):
            self._untrack(record.id)
            return final
        self._update_slurm(record.id, {"ending": final})
        self.poll_now(record.host)
        return None

    def stop(self, record: RunRecord) -> RunRecord:
        """scancel: a queued job at once; a running one with SIGTERM first (ranks flush, nodes record the stop),
        then for good once the run's ``stop_grace_s`` (+ a margin) has passed."""
        return self._cancel(self._update_slurm(record.id, {"stop_requested": time.time()}))

    def cancel_after_failure(self, record: RunRecord) -> RunRecord:
        """A node failed while others run: end the job the same way (a node whose machine died never ends by
        itself, and Slurm keeps the job running while its slurmd lives); the failure stays the run's cause."""
        return self._cancel(self._update_slurm(record.id, {"failure_cancel": time.time()}))

    def _cancel(self, record: RunRecord) -> RunRecord:
        job_id = slurm_of(record)["job_id"]
        grace_s = float(record.config.get("stop_grace_s") or 10.0)
        target = self.targets.target(record.host)
        info = target.jobs([job_id]).get(job_id)
        if info is not None and info.state in LIVE:
            target.cancel(job_id, "TERM")
            deadline = time.monotonic() + grace_s + 15.0
            while time.monotonic() < deadline:
                info = target.jobs([job_id]).get(job_id)
                if info is None or info.final:
                    break
                time.sleep(1.0)
        if info is None or not info.final:
            target.cancel(job_id)
        self._follow(record.id)  # the nodes' last records and ends (a CLI stop follows nothing before)
        self.track(record)
        self.poll_now(record.host)
        return self.store.get_run(record.id)

