"""RunManager: launch runs, follow every active one into the store, reattach, stop and delete them, tell listeners.

Connections, the runner's deployment and probes are its :class:`~ddpgui.core.targets.pool.TargetPool`'s
(shared with multi-node launch, ddpgui.core.runs.multinode).
One :class:`~ddpgui.core.runs.follower.HostFollower` thread per host connection reads the ``follow``
streams of all that host's active runs (channels multiplexed on one SSH
connection, or local pipes), waiting on all of them with one ``select``.  Each
read's chunks are stored with their offsets in one transaction, so nothing is
lost or duplicated whatever happens to the link or the app; then listeners get
the new records (the GUI and the CLI consume the same stream).
"""
from __future__ import annotations

import dataclasses
import logging
import posixpath
import threading
import time
from collections.abc import Callable, Iterable

from remote_runner.config import ConfigError, RunConfig, config_from_dict
from remote_runner.spools import EVENTS, METRICS
from remote_runner.status import FINAL_STATES

from ..gpus.launching import pool_snapshot_of, resolve_gpus, settings_choice
from ..hosts import LOCAL, HostStore
from ..store import RunRecord, RunStore
from ..targets.base import Progress, TargetError
from ..targets.pool import OpenTarget, TargetPool
from ..targets.zipapp import RunnerPackage
from . import launches, multinode
from .collect import Collector
from .config import make_config, relaunch_settings
from .follower import FollowSink, HostFollower, Listener, RunUpdate  # noqa: F401 (RunUpdate, Listener re-exported)
from .live import records_summary
from .multinode import Preflight
from .nodes import failure_columns, first_failure, node_states, outcome
from .protocol import Chunk, Heartbeat
from .slurm_runs import SlurmRuns

log = logging.getLogger(__name__)


class RunManager:
    """Everything the app and the CLI do with runs; Qt-free and thread-safe."""

    def __init__(self, store: RunStore, hosts: HostStore, open_target: OpenTarget,
                 package: RunnerPackage | None = None):
        self.store, self.hosts = store, hosts
        self.targets = TargetPool(open_target, package)
        self._followers: dict[str, HostFollower] = {}
        self._listeners: list[Listener] = []
        self._lock = threading.RLock()
        self._ended = threading.Condition(self._lock)
        self._sink = FollowSink(self._store_chunks, self._heartbeat, self._run_ended, self._emit)
        self.collector = Collector(store, self.targets, lambda host: host == LOCAL)
        self.targets.on_connect = self._host_connected
        self.slurm = SlurmRuns(store, self.targets, lambda run_id, record: self._emit(RunUpdate(run_id, run=record)),
                               self._announce_end, self.follow, self._drop_follow)

    def _host_connected(self, host: str, release: dict | None) -> None:
        """A new connection: collect what the host waits for; clear a release action its profile no longer has."""
        self.collector.host_connected(host, release)
        if host != LOCAL and self.hosts.release_clear_pending(host):
            threading.Thread(target=self._clear_release, args=(host,), daemon=True, name=f"unrelease-{host}").start()

    def _clear_release(self, host: str) -> None:
        try:
            if self.hosts.get(host).release is None:
                self.targets.target(host).release_set(None)
            self.hosts.release_cleared(host)
        except (TargetError, KeyError, OSError) as exc:
            log.warning("%s: its old release action is still set on the host: %s", host, exc)

    def config_for(self, host: str, settings: dict | RunConfig) -> RunConfig:
        """The validated config of a run on ``host``: on a Slurm cluster a job (``scheduler`` slurm), whose nodes'
        rendezvous the job finds itself, so several nodes need no endpoint yet."""
        if not self.is_slurm(host):
            return settings if isinstance(settings, RunConfig) else make_config(settings)
        if isinstance(settings, RunConfig):
            return dataclasses.replace(settings, scheduler="slurm")
        return make_config(dict(settings, scheduler="slurm"))

    def is_slurm(self, host: str) -> bool:
        """Whether ``host`` is a Slurm cluster (runs there are jobs: ddpgui.core.runs.slurm_runs)."""
        try:
            return self.hosts.get(host).is_slurm
        except KeyError:  # a profile removed since: its runs are followed as SSH runs
            return False

    # ---- listeners -----------------------------------------------------------------------
    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` (on the follower's thread) for every update; returns an unsubscribe function."""
        with self._lock:
            self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _emit(self, update: RunUpdate) -> None:
        for listener in list(self._listeners):
            try:
                listener(update)
            except Exception:
                log.exception("a run listener failed")

    # ---- launching -----------------------------------------------------------------------
    def launch(self, host: str, settings: dict | RunConfig, progress: Progress | None = None,
               follow: bool = True, sweep_id: str | None = None) -> RunRecord:
        """Deploy, write the config and start the run detached; the run is in the store from the start."""
        cfg = self.config_for(host, settings)
        if self.is_slurm(host):  # one Slurm job, on as many nodes as the run asks for
            record = self.slurm.launch(host, cfg, progress, sweep_id)
            if follow:
                self.follow(cfg.run_id)
            return record
        if cfg.nnodes > 1:
            raise ConfigError("nnodes", f"a run on {cfg.nnodes} nodes is launched on as many hosts: use launch_nodes "
                                        "(ddpgui launch --nodes A,B)")
        self.hosts.get(host)  # an unknown profile fails here, before anything is created
        # The row names this process as its launcher: should it die mid-launch, the run is known abandoned
        # (ddpgui.core.runs.launches), while another process launching a run is left alone.
        record = self.store.create_run(cfg.run_id, name=cfg.name, tags=cfg.tags, hosts=[host], config=cfg.to_dict(),
                                       state="launching", total_steps=cfg.steps, sweep_id=sweep_id,
                                       environment=launches.launcher(launches.STAGE_CONNECTING))
        # A dropped link does not end the launch: it goes on from the stage it reached once the link is back.
        attempt = launches.HostLaunch(self.store, self.targets, host, cfg, progress)
        try:
            result, environment = attempt.run()
        except BaseException as exc:
            attempt.failed(exc)
            raise
        record = self.store.update_run(cfg.run_id, state="starting", run_dirs={0: result.run_dir}, message="",
                                       environment=environment, started_at=time.time())
        self._emit(RunUpdate(cfg.run_id, run=record))
        if follow:
            self.follow(cfg.run_id)
        return record

    def preflight(self, hosts: list[str], settings: dict | RunConfig,
                  say: Callable[[str], None] | None = None) -> Preflight:
        """Check a multi-node run before launching it (every node reachable, processes, rendezvous port);
        raises TargetError naming the node; the result's ``warnings`` (e.g. torch versions differ) are for the user.
        ``say`` hears each check as it starts (progress text)."""
        return multinode.preflight(self.targets, self.hosts, hosts,
                                   settings if isinstance(settings, RunConfig) else make_config(settings), say)

    def launch_nodes(self, hosts: list[str], settings: dict | RunConfig, progress: Progress | None = None,
                     follow: bool = True, checked: Preflight | None = None, sweep_id: str | None = None) -> RunRecord:
        """One run across ``hosts`` (node 0 first, it hosts the rendezvous): preflight unless ``checked``,
        then launch every node; nothing is created when the preflight fails (see ddpgui.core.runs.multinode)."""
        record = multinode.launch_nodes(self.targets, self.store, self.hosts, hosts, settings, progress, checked,
                                        sweep_id)
        self._emit(RunUpdate(record.id, run=record))
        if follow:
            self.follow(record.id)
        return record

    def rerun(self, run_id: str, progress: Progress | None = None,
              warn: Callable[[str], None] | None = None) -> RunRecord:
        """Launch again with the same config (a new run id and the same name).  A run given GPUs has them
        checked again on a fresh snapshot of its hosts (any N free ones picked again): a busy one is ``warn``-ed
        about, a lost or missing one refused (GpuChoiceError)."""
        old = self.store.get_run(run_id)
        settings = relaunch_settings(old.config)
        if settings_choice(settings) is not None and not self.is_slurm(old.host):
            settings, warnings = resolve_gpus(settings, list(dict.fromkeys(old.hosts)), pool_snapshot_of(self.targets),
                                              self.is_slurm)
            for warning in warnings:
                if warn is not None:
                    warn(warning)
        if len(old.hosts) > 1 and not self.is_slurm(old.host):
            return self.launch_nodes(old.hosts, settings, progress)
        return self.launch(old.host, settings, progress)

    def duplicate(self, run_id: str, **changes: object) -> dict:
        """The run's settings with ``changes`` applied, validated, ready to edit and launch."""
        old = self.store.get_run(run_id)
        settings = dict(relaunch_settings(old.config), name=f"{old.name} (copy)", **changes)
        config_from_dict(settings)
        return settings

    # ---- following -----------------------------------------------------------------------
    def follow(self, run_id: str) -> None:
        """Stream the run's records into the store in the background (until it has ended)."""
        record = self.store.get_run(run_id)
        if launches.unconfirmed(record):  # its start was sent, the answer lost: the host says how it went
            record = self.store.update_run(run_id, state="starting", ended_at=None, message="", hint="")
        for node, run_dir in record.run_dirs.items():
            host = record.hosts[int(node)]
            with self._lock:
                follower = self._followers.get(host)
                if follower is None or not follower.is_alive():
                    follower = self._followers[host] = HostFollower(host, self.targets, self.store, self._sink)
                    follower.start()
            follower.add(run_id, int(node), run_dir)
        if self.is_slurm(record.host):
            self.slurm.track(record)

    def _drop_follow(self, run_id: str, node: int) -> None:
        record = self.store.get_run(run_id)
        with self._lock:
            follower = self._followers.get(record.hosts[node])
        if follower is not None:
            follower.remove(run_id, node)

    def reattach(self, run_ids: Iterable[str] | None = None) -> list[str]:
        """Follow every run the store says is still active (after an app restart), or those of ``run_ids``
        among them; returns their ids.  One whose launcher died mid-launch is marked failed
        ("launch_incomplete"); one another live process is launching is left to it."""
        ids, only = [], None if run_ids is None else set(run_ids)
        for record in self.store.active_runs():
            if only is not None and record.id not in only:
                continue
            if record.run_dirs:
                self.follow(record.id)
                ids.append(record.id)
            elif not launches.launcher_of(record) and record.state == "launching":  # a row of an older version
                self.store.update_run(record.id, state="failed", failure="launch_incomplete", ended_at=time.time(),
                                      message="the launch did not finish (the app was closed while launching it)",
                                      hint=f"rerun it (ddpgui rerun {record.id}) or delete it")
            else:
                launches.settle(self.store, record)
        return ids

    def _store_chunks(self, run_id: str, node: int, chunks: list[Chunk]) -> None:
        """Store one read's chunks (the store also keeps the run's last step) and tell the listeners."""
        result = self.store.store_chunks(run_id, node, chunks)
        logs = {}
        for chunk in chunks:
            if chunk.spool.endswith(".log"):
                logs[chunk.spool] = logs.get(chunk.spool, b"") + chunk.data
        changes = {}
        for rec in result.new.get(EVENTS, ()):
            if rec.get("event") == "train_start":
                changes["state"] = "running"
            elif rec.get("event") == "summary":
                changes["summary"] = rec
        record = None
        if changes:
            record = self.store.update_run(run_id, **changes)
        elif result.new.get(METRICS):
            record = self.store.get_run(run_id)  # its last step moved
        if result.new or logs:
            self._emit(RunUpdate(run_id, node, records=result.new, logs=logs, run=record))

    def _heartbeat(self, run_id: str, beat: Heartbeat) -> None:
        record = self.store.get_run(run_id)
        if beat.state in ("running", "starting") and record.state in ("starting", "launching") and beat.state != record.state:
            self._emit(RunUpdate(run_id, run=self.store.update_run(run_id, state=beat.state)))
        elif beat.state in ("running", "starting") and record.state == "queued":  # a Slurm job has started
            self._emit(RunUpdate(run_id, run=self.store.update_run(run_id, state=beat.state, message="", hint="",
                                                                   started_at=time.time())))

    def _run_ended(self, run_id: str, node: int, status: dict) -> None:
        record = self.store.get_run(run_id)
        if status.get("failure") == "run_dir_missing" and record.failure == launches.UNCONFIRMED:
            status = dict(status, message=f"the run never started on {record.host}: its start was cut off by the "
                                          "dropped link before the host made its directory",
                          hint=f"rerun it (ddpgui rerun {run_id})")
        elif status.get("failure") == "run_dir_missing":  # the runner cannot know the host's profile name
            status = dict(status, message=f"the run's directory {record.run_dirs.get(node, '')} is gone from "
                                          f"{record.hosts[node] if node < len(record.hosts) else record.host}")
        if len(record.run_dirs) > 1 or self.is_slurm(record.host):
            self._node_ended(run_id, node, status)
        else:
            changes = {"state": status.get("state", "failed"), "ended_at": status.get("ended_at") or time.time(),
                       "message": status.get("message") or "", "hint": status.get("hint") or "",
                       "exit_code": status.get("exit_code"), "failure": status.get("failure"),
                       "failed_rank": status.get("failed_rank")}
            self._announce_end(run_id, node, self.store.update_run(run_id, **changes))
        if status.get("failure") != "run_dir_missing":
            self.collector.run_ended(self.store.get_run(run_id), node)  # the host may wait for it (a release)

    def _node_ended(self, run_id: str, node: int, status: dict) -> None:
        """A node of a multi-node run ended: a failure stops the other nodes (belt and braces: torchrun ends
        them too) and is named at once; the run ends, in the worst of its nodes' states, when every node has."""
        # The node's end as its follow stream reported it, kept with its events: its supervisor's own final
        # event can be written after the stream's last read, and the node states are read from the events.
        self.store.add_client_event(run_id, node, {
            "event": status.get("state", "failed"), "t": status.get("ended_at") or time.time(),
            "message": status.get("message") or "", "hint": status.get("hint") or "",
            "failure": status.get("failure"), "exit_code": status.get("exit_code"), "rank": status.get("failed_rank")})
        record = self.store.get_run(run_id)
        states = node_states(self.store, record, {node: status})
        slurm = self.is_slurm(record.host)
        if status.get("state") == "failed":
            running = [s.node for s in states if not s.final]
            if running:
                stop = self._stop_slurm_job if slurm else self._stop_nodes
                threading.Thread(target=stop, args=(record, running), daemon=True).start()
            record = self.store.update_run(run_id, **failure_columns(first_failure(states)))
        final = self.slurm.nodes_ended(record, states) if slurm else outcome(states)
        if final is not None:
            record = self.store.update_run(run_id, **final)
        self._announce_end(run_id, node, record)

    def _announce_end(self, run_id: str, node: int, record: RunRecord) -> None:
        """Tell the listeners a run's (or node's) end, and wake every :meth:`wait`.  A run that ended without the
        runner's summary event (stopped, failed, a script's) gets the summary its stored records give
        (:func:`~ddpgui.core.runs.live.records_summary`, ``source`` "records"): the runs table shows its
        throughput and peak memory as its dashboard header does."""
        if record.state in FINAL_STATES and not record.summary:
            summary = records_summary(self.store, run_id)
            if summary:
                record = self.store.update_run(run_id, summary=dict(summary, source="records"))
        self._emit(RunUpdate(run_id, node, run=record))
        with self._ended:
            self._ended.notify_all()

    def _stop_nodes(self, record: RunRecord, nodes: list[int]) -> None:
        try:
            multinode.stop_nodes(self.targets, record, nodes)
        except TargetError as exc:
            log.warning("run %s: %s", record.id, exc)

    def _stop_slurm_job(self, record: RunRecord, nodes: list[int]) -> None:
        """A node of a Slurm run failed: end the job, so the other nodes end now, recording why."""
        try:
            self.slurm.cancel_after_failure(record)
        except (TargetError, KeyError) as exc:
            log.warning("run %s: %s", record.id, exc)

    def wait(self, run_id: str, timeout: float | None = None) -> RunRecord:
        """Block until the run has ended and all its records are stored."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._ended:
            while True:
                record = self.store.get_run(run_id)
                if record.state in FINAL_STATES:
                    return record
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"run {run_id} is still {record.state}")
                self._ended.wait(min(left, 1.0) if left is not None else 1.0)

    # ---- stopping and deleting -----------------------------------------------------------
    def stop(self, run_id: str) -> RunRecord:
        """End every process of the run on its host(s); the follower records the final state."""
        record = self.store.get_run(run_id)
        status = {}
        if not record.run_dirs:  # its launch never completed: nothing runs on a host, it ends at once
            if launches.in_progress(record):
                raise TargetError(f"run {run_id} is being launched right now by {launches.being_launched(record)}",
                                  "wait until its launch has finished and stop it then, or end that process")
            if record.active:
                record = self.store.update_run(run_id, state="stopped", ended_at=time.time(), hint="",
                                               message="stopped before its launch had finished")
                self._announce_end(run_id, 0, record)
            return record
        if self.is_slurm(record.host) and (record.environment or {}).get("slurm"):
            return self.slurm.stop(record)
        if len(record.run_dirs) > 1:  # every node at once: none outlives the others long enough to fail
            multinode.stop_nodes(self.targets, record, list(record.run_dirs))
            status = {"state": "stopped"}
        else:
            for node, run_dir in record.run_dirs.items():
                try:
                    status = self.targets.target(record.hosts[int(node)]).stop(run_dir)
                except TargetError as exc:
                    if exc.failure != "run_dir_missing":
                        raise
                    self._run_ended(run_id, int(node), {"state": "failed", "failure": "run_dir_missing",
                                                        "hint": "the records received so far are kept; rerun the "
                                                                "experiment to run it again"})
                    return self.store.get_run(run_id)
        if record.state not in FINAL_STATES and status.get("state") in FINAL_STATES:
            self.follow(run_id)  # make sure the final records and state arrive
        return self.store.get_run(run_id)

    def delete(self, run_id: str, remote: bool = True) -> None:
        """Delete the run from the store and (``remote``) its run directory on the host(s).

        Callers confirm with the user first; a run still active is stopped before.
        """
        record = self.store.get_run(run_id)
        if launches.in_progress(record):
            raise TargetError(f"run {run_id} is being launched right now by {launches.being_launched(record)}",
                              "wait until its launch has finished (or end that process), then delete it")
        if (record.active or launches.unconfirmed(record)) and record.run_dirs:
            self.stop(run_id)
        if remote:
            for node, run_dir in record.run_dirs.items():
                target = self.targets.target(record.hosts[int(node)])
                if posixpath.dirname(run_dir) != posixpath.join(target.run_root(), "runs"):
                    raise TargetError(f"refusing to delete {run_dir}: it is not a run directory under "
                                      f"{target.run_root()}")
                result = target.exec(["rm", "-rf", "--", run_dir], timeout=120)
                if result.rc != 0:
                    raise TargetError(f"could not delete {run_dir} on {record.hosts[int(node)]}: "
                                      f"{result.stderr.decode(errors='replace').strip()}")
        self.store.delete_run(run_id)

    # ---- shutting down -------------------------------------------------------------------
    def __enter__(self) -> RunManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop following (runs go on on their hosts) and close every connection."""
        with self._lock:
            followers = list(self._followers.values())
            self._followers.clear()
        for follower in followers:
            follower.stop()
        for follower in followers:
            follower.join(timeout=5)
        self.collector.wait(timeout=30.0)  # a host waiting to be released hears what was collected
        self.slurm.close()
        self.targets.close()

