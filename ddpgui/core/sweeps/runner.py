"""The sweep runner: runs a sweep's cells through the RunManager, one worker thread per host, resumable.

One worker thread per host takes that host's cells in order, one at a time (so runs do not disturb each other's
timing) or, for a ``parallel`` sweep, side by side: on a host with GPUs each cell on free GPUs of its own
(ddpgui.core.gpus.placement; a cell waits, saying why in its reason, until enough are free), on a host without as many
at once as its CPUs hold. On a Slurm cluster every cell is a job: up to the profile's ``max_queued_jobs`` of the sweep
are queued at once. An SSH host runs the cells in its own queue (ddpgui.core.sweeps.hostqueue), placing a parallel
sweep's itself: the host launches them, the runner follows. Everything the runner knows is in the store (``sweeps``
and ``sweep_cells``), so after a restart :meth:`SweepRunner.resume` carries on: a cell whose run is still going is
reattached and waited for, one caught before its run existed is launched again.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from remote_runner.config import ConfigError, RunConfig
from remote_runner.status import FINAL_STATES

from ..errors import describe
from ..gpus.launching import with_gpus
from ..gpus.placement import HostLooks, Placement, decide, gpu_request
from ..runs.manager import RunManager, RunUpdate
from ..store import CELL_FINAL_STATES, RunNotFound, RunRecord, SweepCell, SweepRecord
from . import hostqueue
from .plan import SweepSpec, plan_sweep
from .progress import SweepProgress, summary_line, sweep_progress

log = logging.getLogger(__name__)

#: How often a host worker looks at the store when nothing woke it.
POLL_S = 0.5
#: Progress ticks while runs log steps come at most this often per sweep.
TICK_S = 0.5
#: A host worker that fails this many times in a row gives up (the sweep stays resumable).
MAX_WORKER_ERRORS = 10


ProgressListener = Callable[[SweepProgress], None]


class _Job:
    """One sweep being run by this runner: its worker threads and how to halt them."""

    def __init__(self, sweep: SweepRecord):
        self.sweep = sweep
        self.halt = threading.Event()  # stop or detach: the workers return at their next look
        self.wake = threading.Condition()
        self.done = threading.Event()
        self.slots: dict[str, int] = {}
        self.launching: set[int] = set()
        self.placed: dict[int, tuple[int, ...]] = {}  # cell index → the GPUs it was launched on
        self.looks: HostLooks | None = None
        self.probed_gpus: dict[str, int] = {}  # host → the GPUs its probe found (once its monitor failed)
        self.last_tick = 0.0
        self.thread: threading.Thread | None = None

    def poke(self) -> None:
        with self.wake:
            self.wake.notify_all()


class SweepRunner:
    """Runs sweeps through a RunManager; Qt-free and thread-safe.

    ``start(spec)`` plans, stores and starts a sweep; ``resume(id)`` continues one
    (after a restart too); ``stop(id)`` stops its running cells and cancels the
    rest; ``wait(id)`` blocks until it has ended; ``close()`` detaches (the runs
    go on on their hosts and the sweep can be resumed).  Listeners added with
    :meth:`subscribe` get a :class:`SweepProgress` (on a worker or follower
    thread) whenever a cell changes state and, at most every TICK_S, while runs log steps.
    """

    def __init__(self, manager: RunManager):
        self.manager, self.store = manager, manager.store
        self._jobs: dict[str, _Job] = {}
        self._listeners: list[ProgressListener] = []
        self._lock = threading.Lock()
        self._closed = False
        self._unsubscribe = manager.subscribe(self._on_run_update)

    # ---- listeners -----------------------------------------------------------------------
    def subscribe(self, listener: ProgressListener) -> Callable[[], None]:
        """Call ``listener`` with every progress of every sweep this runner runs; returns an unsubscribe function."""
        with self._lock:
            self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def progress(self, sweep_id: str) -> SweepProgress:
        job = self._jobs.get(sweep_id)
        return sweep_progress(self.store, sweep_id, job.slots if job else None)

    def emit(self, job: _Job, changed: int | None = None) -> None:
        try:
            progress = sweep_progress(self.store, job.sweep.id, job.slots, changed)
        except Exception:
            log.exception("could not read the progress of sweep %s", job.sweep.id)
            return
        for listener in list(self._listeners):
            try:
                listener(progress)
            except Exception:
                log.exception("a sweep listener failed")

    def _on_run_update(self, update: RunUpdate) -> None:
        run = update.run
        job = self._jobs.get(run.sweep_id) if run is not None and run.sweep_id else None
        if job is None:
            return
        if run.state in FINAL_STATES:
            job.poke()  # its worker settles the cell and reports it
        elif time.monotonic() - job.last_tick >= TICK_S:
            job.last_tick = time.monotonic()
            self.emit(job)

    # ---- starting ------------------------------------------------------------------------
    def create(self, spec: SweepSpec) -> SweepRecord:
        """Plan and store a sweep (state ``queued``); nothing is stored when a cell is refused."""
        sweep, cells = plan_sweep(spec, self.manager.hosts)
        return self.store.create_sweep(sweep, cells)

    def start(self, spec: SweepSpec | str) -> SweepRecord:
        """Start a new sweep (a spec) or a stored one (its id); returns its record."""
        sweep_id = spec if isinstance(spec, str) else self.create(spec).id
        return self.resume(sweep_id)

    def resume(self, sweep_id: str) -> SweepRecord:
        """Run the sweep's unfinished cells; runs that are still going are waited for, not launched again.

        A stopped sweep gets its cancelled cells back; a sweep that has ended
        (``done``/``failed``) is returned as it is.
        """
        with self._lock:
            job = self._jobs.get(sweep_id)
            if job is not None and job.thread is not None and job.thread.is_alive():
                return self.store.get_sweep(sweep_id)
            sweep = self.store.get_sweep(sweep_id)
            if sweep.state in ("done", "failed"):
                return sweep
            self._recover_running(sweep_id)
            if sweep.state in ("stopped", "cancelled", "stopping"):
                self.store.update_cells(sweep_id, expect="cancelled", state="pending", run_id=None, reason="",
                                        hint="", started_at=None, ended_at=None)
            sweep = self.store.update_sweep(sweep_id, state="running", message="", ended_at=None,
                                            started_at=sweep.started_at or time.time())
            job = self._jobs[sweep_id] = _Job(sweep)
            job.looks = HostLooks(open_target=self.manager.targets.target, on_look=job.poke)
            job.thread = threading.Thread(target=self._supervise, args=(job,), name=f"sweep-{sweep_id}", daemon=True)
            job.thread.start()
        return sweep

    def _recover_running(self, sweep_id: str) -> None:
        """After a restart: follow the running cells' runs again; a cell with no run (it was being launched) is
        pending again, one whose run has ended gets its outcome."""
        running = [c for c in self.store.sweep_cells(sweep_id) if c.state == "running"]
        self.manager.reattach([c.run_id for c in running if c.run_id])
        for cell in running:
            run = self.run_of(cell)
            if run is None or run.failure == "launch_interrupted":
                self.store.update_cells(sweep_id, cell.index, expect="running", state="pending", run_id=None,
                                        started_at=None)
            elif not run.active:
                self.settle(cell, run, stopping=False)

    # ---- the workers ---------------------------------------------------------------------
    def _supervise(self, job: _Job) -> None:
        workers = [threading.Thread(target=self._host_worker, args=(job, host), name=f"sweep-{host}", daemon=True)
                   for host in job.sweep.hosts]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        job.looks.close()  # every host's monitor ends first: no sampler outlives the sweep
        if not job.halt.is_set():
            self._finish(job)
        self.emit(job)  # before done: whoever waits has had the final progress
        job.done.set()

    def _finish(self, job: _Job) -> None:
        cells = self.store.sweep_cells(job.sweep.id)
        if any(c.state not in CELL_FINAL_STATES for c in cells):
            return  # a worker gave up or the sweep was stopped: it stays resumable
        counts = Counter(c.state for c in cells)
        state = "done" if counts["done"] == len(cells) else "failed"
        self.store.update_sweep(job.sweep.id, expect="running", state=state, ended_at=time.time(),
                                message=summary_line(counts, len(cells)))

    def _host_worker(self, job: _Job, host: str) -> None:
        errors = 0
        queued = hostqueue.on_host(self.manager, job.sweep, host)
        while not job.halt.is_set():
            try:
                if not (hostqueue.step(self, job, host) if queued else self._host_step(job, host)):
                    return
                errors = 0
            except Exception as exc:
                errors += 1
                log.exception("sweep %s on %s (error %d)", job.sweep.id, host, errors)
                if errors >= MAX_WORKER_ERRORS:
                    message, _ = describe(exc)
                    self.store.update_sweep(job.sweep.id, expect="running",
                                            message=f"the sweep stopped launching on {host}: {message}; "
                                                    "resume it to carry on")
                    return
                job.halt.wait(POLL_S)

    def _host_step(self, job: _Job, host: str) -> bool:
        """Settle the host's ended cells and launch what fits; False when the host has nothing left to do."""
        if self.store.get_sweep(job.sweep.id).state != "running":
            return False  # stopped (perhaps by another process)
        cells = [c for c in self.store.sweep_cells(job.sweep.id) if c.host == host]
        running = []
        for cell in (c for c in cells if c.state == "running"):
            run = None if cell.index in job.launching else self.run_of(cell)
            if run is not None and not run.active:
                self.settle(cell, run, stopping=False)
                self.emit(job, cell.index)
            else:
                running.append(cell)
        pending = [c for c in cells if c.state == "pending"]
        if not pending:
            job.looks.release(host)  # nothing waits for GPUs there: its monitor may end
            if not running:
                return False
        for cell in pending:
            gpus = None if job.halt.is_set() else self._fits(job, host, cell, running)
            if gpus is None:
                break
            if self._launch(job, cell, gpus):
                running.append(cell)
        else:
            if pending:
                return True  # look again at once: the last launch may have skipped cells
        with job.wake:
            job.wake.wait(POLL_S)
        return True

    def _fits(self, job: _Job, host: str, cell: SweepCell, running: list[SweepCell]) -> tuple[int, ...] | None:
        """Whether the cell launches now: None when not, else the GPUs it gets (``()``: as its settings say).

        Serial: when nothing runs.  Parallel, on a host with GPUs: when enough of them are free and not held by
        the sweep's running cells (:meth:`_placement`); on a host without: when its CPUs hold this cell's
        processes too.  A Slurm cluster: while fewer of the sweep's jobs than the profile's ``max_queued_jobs``
        are queued or running there (Slurm decides when and where they run)."""
        if self.manager.is_slurm(host):
            return () if len(running) < self.manager.hosts.get(host).slurm.max_queued_jobs else None
        if job.sweep.parallel:
            placement = self._placement(job, host, cell, running)
            if placement is not None:
                return self._placed(job, host, cell, placement)
        if not running:
            return ()
        if not job.sweep.parallel:
            return None
        capacity = self._capacity(job, host)
        return () if sum(_processes(c) for c in running) + _processes(cell) <= capacity else None

    def _placement(self, job: _Job, host: str, cell: SweepCell, running: list[SweepCell]) -> Placement | None:
        """The cell's GPUs on the latest snapshot of the host; None on a host without GPUs (or a cell whose
        CUDA_VISIBLE_DEVICES places it)."""
        request = gpu_request(cell.settings)
        if request is None:
            return None
        held: set[int] = set()
        for other in running:
            gpus = job.placed.get(other.index)
            if gpus is None:  # launched by an earlier runner (resumed): its run's config says
                run = self.run_of(other)
                gpus = (run.config.get("gpus") if run is not None else None) or ()
            held.update(gpus)
        if job.probed_gpus.get(host) == 0:
            return None  # its monitor failed, and its probe found no GPUs: a CPU host
        look = job.looks.look(host, held)
        return decide(host, look, request, held, self._probed_gpus(job, host) if look.error else None)

    def _probed_gpus(self, job: _Job, host: str) -> int | None:
        """The GPUs the host's probe found (None when it cannot say; kept once known): a host whose monitor
        failed but whose probe found none runs its cells as a CPU host does."""
        if host not in job.probed_gpus:
            try:
                count = self.manager.targets.environment(host).get("gpu_count")
            except Exception as exc:  # unreachable: the look's error says so, and it is asked again later
                log.debug("no probe of %s: %s", host, exc)
                return None
            if count is None:
                return None
            job.probed_gpus[host] = count
            if count == 0:
                job.looks.release(host)  # nothing to place there: its monitor is not started again
        return job.probed_gpus[host]

    def _placed(self, job: _Job, host: str, cell: SweepCell, placement: Placement) -> tuple[int, ...] | None:
        """The placement's GPUs; a cell that waits shows why (its reason), one that can never run here fails."""
        if placement.room:
            job.slots[host] = max(1, placement.room // self._widest(job, host))
        if placement.refused:
            self.end_cell(job, cell, "failed", placement.refused, placement.hint, expect="pending")
            return None
        if placement.waiting and (cell.reason, cell.hint) != (placement.waiting, placement.hint):
            if self.store.update_cells(job.sweep.id, cell.index, expect="pending", reason=placement.waiting,
                                       hint=placement.hint):
                self.emit(job, cell.index)
        return placement.gpus or None

    def _widest(self, job: _Job, host: str) -> int:
        return max(_processes(c) for c in self.store.sweep_cells(job.sweep.id) if c.host == host)

    def _capacity(self, job: _Job, host: str) -> int:
        """Processes the host runs side by side: its GPUs, or its CPUs when it has none (from its probe)."""
        env = self.manager.targets.environment(host)
        capacity = max(1, env.get("gpu_count") or env.get("cpu_count") or 1)
        job.slots[host] = max(1, capacity // self._widest(job, host))
        return capacity

    def _launch(self, job: _Job, cell: SweepCell, gpus: tuple[int, ...] = ()) -> bool:
        """Launch the cell's run (on ``gpus`` when given); False when it did not start (failed or taken meanwhile)."""
        sweep = job.sweep
        try:
            cfg = self.cell_config(sweep, cell, gpus=gpus)
        except ConfigError as exc:  # validated when planned; a newer runner could still refuse it
            self.end_cell(job, cell, "failed", *describe(exc), expect="pending")
            return False
        job.launching.add(cell.index)
        try:
            if not self.store.update_cells(sweep.id, cell.index, expect="pending", state="running",
                                           run_id=cfg.run_id, started_at=time.time(), ended_at=None, reason="",
                                           hint=""):
                return False
            job.placed[cell.index] = gpus
            self.emit(job, cell.index)
            try:
                self.manager.launch(cell.host, cfg, sweep_id=sweep.id)
            except Exception as exc:  # refused by the host, or the host is unreachable: the sweep goes on
                self.end_cell(job, cell, "failed", *describe(exc))
                if getattr(exc, "field", None):
                    self._skip_alike(job, cell, describe(exc)[0])
                return False
        finally:
            job.launching.discard(cell.index)
        if self.store.get_sweep(sweep.id).state != "running":  # stopped while it was being launched
            self.manager.stop(cfg.run_id)
        return True

    def cell_config(self, sweep: SweepRecord, cell: SweepCell, run_id: str | None = None, gpus=()) -> RunConfig:
        """The config of the cell's run: its settings, named after the sweep and tagged with its name."""
        settings = {**cell.settings, "name": f"{sweep.name}: {cell.label}",
                    "tags": list(dict.fromkeys([*cell.settings.get("tags", []), sweep.name]))}
        cfg = self.manager.config_for(cell.host, with_gpus(settings, gpus) if gpus else settings)
        return dataclasses.replace(cfg, run_id=run_id) if run_id else cfg  # not in settings: see given_settings

    def _skip_alike(self, job: _Job, refused: SweepCell, message: str) -> None:
        """The host refused a setting: its other repeats on that host would be refused too."""
        same = {k: v for k, v in refused.settings.items() if k != "seed"}
        for cell in self.store.sweep_cells(job.sweep.id):
            if cell.state == "pending" and cell.host == refused.host and \
                    {k: v for k, v in cell.settings.items() if k != "seed"} == same:
                self.end_cell(job, cell, "skipped", f"not launched: {refused.label} was refused: {message}",
                               expect="pending")

    def end_cell(self, job: _Job, cell: SweepCell, state: str, reason: str, hint: str = "",
                  expect: str = "running") -> None:
        if self.store.update_cells(job.sweep.id, cell.index, expect=expect, state=state, reason=reason, hint=hint,
                                   ended_at=time.time()):
            self.emit(job, cell.index)

    def run_of(self, cell: SweepCell) -> RunRecord | None:
        try:
            return self.store.get_run(cell.run_id) if cell.run_id else None
        except RunNotFound:
            return None

    def settle(self, cell: SweepCell, run: RunRecord, stopping: bool) -> None:
        """Record the outcome of the cell's ended run."""
        hint = ""
        if run.state == "finished":
            state, reason = "done", ""
        elif run.state == "stopped":
            state = "cancelled"
            reason = "stopped with the sweep" if stopping else "the run was stopped before it finished"
        else:
            state, hint = "failed", run.hint
            reason = run.message or f"the run {run.state}" + (f" ({run.failure})" if run.failure else "")
        self.store.update_cells(cell.sweep_id, cell.index, expect="running", state=state, reason=reason, hint=hint,
                                ended_at=run.ended_at or time.time())

    # ---- stopping, waiting, detaching -----------------------------------------------------
    def stop(self, sweep_id: str, timeout: float = 60.0) -> SweepRecord:
        """Stop the sweep's running cells (their runs end as ``stopped``) and cancel the pending ones.

        Works for a sweep that another process runs too: its workers see the state and stop launching.
        """
        sweep = self.store.get_sweep(sweep_id)
        if not sweep.active:
            return sweep
        final = "cancelled" if sweep.state == "queued" else "stopped"
        self.store.update_sweep(sweep_id, state="stopping")
        job = self._jobs.get(sweep_id)
        if job is not None:
            job.halt.set()
            job.poke()
            if job.thread is not None:
                job.thread.join(timeout)
        for host in (h for h in sweep.hosts if hostqueue.on_host(self.manager, sweep, h)):
            try:
                hostqueue.stop(self, sweep, host)
            except Exception as exc:  # unreachable: its cells are cancelled here, the host's queue goes on
                log.warning("could not stop sweep %s's queue on %s: %s", sweep_id, host, exc)
        self.store.update_cells(sweep_id, expect="pending", state="cancelled", reason="the sweep was stopped",
                                ended_at=time.time())
        for cell in self.store.sweep_cells(sweep_id):
            if cell.state != "running":
                continue
            run = self._stop_run(cell, timeout)
            if run is not None and not run.active:
                self.settle(cell, run, stopping=True)
            else:
                self.store.update_cells(sweep_id, cell.index, expect="running", state="cancelled",
                                        reason="stopped with the sweep (its run had not ended yet)",
                                        ended_at=time.time())
        cells = self.store.sweep_cells(sweep_id)
        record = self.store.update_sweep(sweep_id, state=final, ended_at=time.time(),
                                         message=summary_line(Counter(c.state for c in cells), len(cells)))
        if job is not None:
            self.emit(job)
        return record

    def _stop_run(self, cell: SweepCell, timeout: float) -> RunRecord | None:
        """Stop the cell's run and wait until it has ended (or ``timeout``); None when it has no run."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.run_of(cell)
            if run is None or not run.active:
                return run
            if run.run_dirs:
                try:
                    self.manager.stop(run.id)
                    return self.manager.wait(run.id, timeout=max(1.0, deadline - time.monotonic()))
                except TimeoutError:
                    return self.store.get_run(run.id)
                except Exception as exc:  # the host is unreachable: the cell is cancelled, the run may go on
                    log.warning("could not stop run %s: %s", run.id, exc)
                    return run
            if time.monotonic() > deadline:  # still being launched by a process that is gone
                return run
            time.sleep(0.2)

    def wait(self, sweep_id: str, timeout: float | None = None) -> SweepRecord:
        """Block until this runner's work on the sweep is over (ended, stopped or detached); for a sweep another
        process runs, until the store says it has ended.  TimeoutError after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        job = self._jobs.get(sweep_id)
        if job is not None and not job.done.wait(timeout):
            raise TimeoutError(f"sweep {sweep_id} is still running")
        while True:
            sweep = self.store.get_sweep(sweep_id)
            if not sweep.active or (job is not None and sweep.state != "stopping"):
                return sweep
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"sweep {sweep_id} is still {sweep.state}")
            time.sleep(POLL_S)

    def launching(self, sweep_id: str) -> list[int]:
        """The indexes of the sweep's cells this runner is launching right now."""
        job = self._jobs.get(sweep_id)
        return sorted(job.launching) if job is not None else []

    def close(self) -> None:
        """Detach from every sweep: workers end (a launch in progress is finished), runs go on on their hosts,
        each sweep stays resumable.  Once called (even if interrupted while it waits), later calls return at once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            jobs = list(self._jobs.values())
        for job in jobs:
            job.halt.set()
            job.poke()
        self._unsubscribe()
        for job in jobs:
            if job.thread is not None:
                try:
                    job.thread.join(60)
                except RuntimeError:
                    # Ctrl-C came while Thread.start() in resume() waited for the thread: it never ran, or it
                    # runs now and its workers see the halt at their first look (the sweep stays resumable).
                    pass

    def __enter__(self) -> SweepRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _processes(cell: SweepCell) -> int:
    return int(cell.settings.get("nproc_per_node") or 1)
