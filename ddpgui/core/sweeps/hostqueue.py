"""A sweep's cells on an SSH host, handed to the host's own queue (remote_runner/queue.py; docs/PROTOCOL.md, "The
host-side queue"): the host launches them whether or not a client is connected -- a serial sweep's one at a time, a
parallel sweep's side by side, each placed on free GPUs by the host itself (remote_runner/placement.py) when it starts.

The client decides each cell's run id and config and sends them once (``queue-add``, which ignores a run id it has
already); from then on it only asks the host's queue what it launched and follows those runs as any other.  A cell
handed over is ``pending`` with its run id set (a cell the client launches itself gets its run id only when it is
claimed), so a runner that resumes the sweep after a restart knows, and sends again only what the host lacks.

A cell waiting there shows the host's reason (``waiting for 2 free GPUs on box: ...``), as a cell the client places
itself does.  Used for every sweep's SSH hosts; Slurm clusters keep the client-driven path of
ddpgui.core.sweeps.runner (Slurm queues the jobs), and so does This computer.
"""
from __future__ import annotations

import dataclasses
import json
import posixpath
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from ..runs import launches
from ..runs.config import new_run_id
from ..store import RunNotFound, SweepCell, SweepNotFound, SweepRecord
from .progress import summary_line

if TYPE_CHECKING:
    from ..runs.manager import RunManager
    from ..targets.base import Target

#: The SweepRunner that calls in here, and its job of one sweep (ddpgui.core.sweeps.runner imports this module).
SweepRunner = _Job = Any

#: How often the host's queue is asked while none of the sweep's cells runs there (its next one starts soon).
ASK_S = 1.0
#: ... while one runs (its follow stream says when it ends, which wakes the worker: this is the backstop), or while
#: the host runs another sweep's cell (this one waits behind it: no process started on the host every second).
ASK_RUNNING_S = 10.0
#: ... while a parallel sweep's cells wait there beside its running ones (the host starts one as GPUs are let go).
ASK_WAITING_S = 3.0


def on_host(manager: RunManager, sweep: SweepRecord, host: str) -> bool:
    """Whether the sweep's cells on ``host`` go to the host's queue: any sweep on an SSH host."""
    try:
        profile = manager.hosts.get(host)
    except KeyError:
        return False
    return not profile.is_local and not profile.is_slurm


def queue_one(runner: SweepRunner, host: str, settings: dict, name: str = "", timeout: float = 300.0) -> SweepCell:
    """A single run queued on ``host`` after what runs there ("run after the current one"): a sweep of one cell,
    handed to the host's queue; returns its cell once the host has it (its ``run_id`` is the run's)."""
    from .plan import SweepSpec

    if not on_host(runner.manager, SweepRecord(id="", name="", hosts=[host]), host):
        raise ValueError(f"{host} has no queue of its own: a run is queued on an SSH host (a Slurm cluster queues "
                         "its jobs itself; This computer runs them now)")
    sweep = runner.start(SweepSpec(hosts=[host], base=settings, name=name or settings.get("name") or ""))
    deadline = time.monotonic() + timeout
    while True:
        cell = runner.store.sweep_cells(sweep.id)[0]
        if cell.state != "pending":
            return cell  # started, or refused, already
        if cell.run_id and any(c["run_id"] == cell.run_id
                               for c in runner.manager.targets.target(host).queue_status().get("cells", [])):
            return cell
        if not runner.store.get_sweep(sweep.id).active or time.monotonic() > deadline:
            return cell
        time.sleep(0.2)


def sweep_payload(sweep: SweepRecord, cells: list[SweepCell]) -> dict:
    """What the host keeps of the sweep, so that ``adopt`` elsewhere brings back the sweep and its cells."""
    keep = ("index", "label", "host", "settings", "repeat", "run_id")
    return dict(dataclasses.asdict(sweep), cells=[{k: getattr(c, k) for k in keep} for c in cells])


def step(runner: SweepRunner, job: _Job, host: str) -> bool:
    """Hand the host its cells, take what it launched; False when the host has nothing of the sweep left."""
    if runner.store.get_sweep(job.sweep.id).state != "running":
        return False
    target = runner.manager.targets.target(host)
    _assign_run_ids(runner, job, host)
    cells = [c for c in runner.store.sweep_cells(job.sweep.id) if c.host == host]
    queued = {c["run_id"]: c for c in target.queue_status().get("cells", [])}
    unsent = [c for c in cells if c.state == "pending" and c.run_id and c.run_id not in queued]
    if unsent:
        _send(runner, job, target, unsent)
        return True
    _take(runner, job, target, cells, queued)
    cells = [c for c in runner.store.sweep_cells(job.sweep.id) if c.host == host]
    if not any(c.state in ("pending", "running") for c in cells):
        return False
    elsewhere = any(c["state"] == "launched" and not c.get("done") and c.get("sweep_id") != job.sweep.id
                    for c in queued.values())
    running = sum(c.state == "running" for c in cells)
    if job.sweep.parallel:  # for the time left: as many at once as the host has run side by side so far
        job.slots[host] = max(job.slots.get(host, 1), running)
    beside = job.sweep.parallel and running and any(c.state == "pending" for c in cells)
    with job.wake:
        job.wake.wait(ASK_WAITING_S if beside else ASK_RUNNING_S if elsewhere or running else ASK_S)
    return True


def _assign_run_ids(runner: SweepRunner, job: _Job, host: str) -> None:
    """Give each pending cell without one the run id its run will have (a cell given one is handed over)."""
    for cell in runner.store.sweep_cells(job.sweep.id):
        if cell.host == host and cell.state == "pending" and not cell.run_id:
            runner.store.update_cells(job.sweep.id, cell.index, expect="pending", run_id=new_run_id(),
                                      reason=f"queued on {host}", hint="")


def _send(runner: SweepRunner, job: _Job, target: Target, cells: list[SweepCell]) -> None:
    """``queue-add`` the cells, each with its config as the host will launch it (a script run's folder uploaded)."""
    sent = []
    for cell in cells:
        cfg = runner.cell_config(job.sweep, cell, cell.run_id)
        if cfg.mode == "script":
            launches.place_script(target, cfg, launches.read_script_folder(cfg))
        sent.append({"run_id": cell.run_id, "index": cell.index, "sweep_id": job.sweep.id, "config": cfg.to_json(),
                     "parallel": job.sweep.parallel})
    everything = runner.store.sweep_cells(job.sweep.id)
    target.queue_add(sent, sweep_payload(runner.store.get_sweep(job.sweep.id), everything))


def _take(runner: SweepRunner, job: _Job, target: Target, cells: list[SweepCell], queued: dict) -> None:
    """Follow what the host launched, settle what ended, cancelled or failed there."""
    for cell in cells:
        entry = queued.get(cell.run_id or "")
        if cell.state == "pending" and entry is not None:
            if entry["state"] == "launched":
                claim(runner.manager, job.sweep.id, cell, entry, target)
                runner.emit(job, cell.index)
            elif entry["state"] == "waiting":
                said = (entry.get("reason") or f"queued on {target.name}", entry.get("hint") or "")
                if (cell.reason, cell.hint) != said and runner.store.update_cells(
                        job.sweep.id, cell.index, expect="pending", reason=said[0], hint=said[1]):
                    runner.emit(job, cell.index)  # the host's words: why it waits (free GPUs, ...)
            elif entry["state"] in ("cancelled", "failed"):
                state = "cancelled" if entry["state"] == "cancelled" else "failed"
                runner.end_cell(job, cell, state, entry.get("error") or f"{state} on the host", entry.get("hint", ""),
                                expect="pending")
        elif cell.state == "running":
            run = runner.run_of(cell)
            if run is not None and not run.active:
                runner.settle(cell, run, stopping=False)
                runner.emit(job, cell.index)


def claim(manager: RunManager, sweep_id: str, cell: SweepCell, entry: dict, target: Target) -> None:
    """A cell the host launched: its run's record (from its config.json there) followed, the cell ``running``."""
    run_id = entry["run_id"]
    try:
        record = manager.store.get_run(run_id)
    except RunNotFound:
        config = json.loads(target.read_file(posixpath.join(entry["run_dir"], "config.json")))
        record = manager.store.create_run(
            run_id, name=config.get("name", ""), tags=config.get("tags") or [], hosts=[target.name], config=config,
            environment=manager.targets.environment(target.name), run_dirs={0: entry["run_dir"]},
            total_steps=config.get("steps"), sweep_id=sweep_id, state="starting")
        record = manager.store.update_run(run_id, started_at=entry.get("launched_at") or time.time())
    manager.store.update_cells(sweep_id, cell.index, expect="pending", state="running", reason="", hint="",
                               started_at=entry.get("launched_at") or time.time(), ended_at=None)
    if record.active:
        manager.follow(run_id)


def stop(runner: SweepRunner, sweep: SweepRecord, host: str) -> None:
    """Cancel the sweep's waiting cells in the host's queue and stop its running run there; a cell launched since
    the client last asked is taken (its run is then settled with the others)."""
    target = runner.manager.targets.target(host)
    target.queue_stop(sweep.id)
    queued = {c["run_id"]: c for c in target.queue_status().get("cells", [])}
    for cell in runner.store.sweep_cells(sweep.id):
        entry = queued.get(cell.run_id or "")
        if cell.host == host and cell.state == "pending" and entry is not None and entry["state"] == "launched":
            claim(runner.manager, sweep.id, cell, entry, target)


#: A cell's state in the store from its run's final state.
_CELL_OF_RUN = {"finished": "done", "failed": "failed", "stopped": "cancelled"}


def adopt_sweeps(manager: RunManager, hosts: list[str]) -> list[SweepRecord]:
    """Bring back the sweeps the hosts' queues hold and the store lacks, with their cells; the runs of their cells
    (adopted first: ddpgui.core.runs.adopt) point back at them.  A sweep with cells still waiting or running on its
    host stays ``running``: ``sweep-resume`` follows the rest."""
    adopted = []
    for host in dict.fromkeys(hosts):
        if manager.is_slurm(host):
            continue
        state = manager.targets.target(host).queue_status(sweeps=True)
        queued = {c["run_id"]: c for c in state.get("cells", [])}
        for sweep_id, meta in sorted((state.get("sweeps") or {}).items()):
            try:
                manager.store.get_sweep(sweep_id)
                continue
            except SweepNotFound:
                pass
            cells = [_adopted_cell(manager, sweep_id, c, queued.get(c.get("run_id") or "")) for c in meta["cells"]]
            counts = Counter(c.state for c in cells)
            if counts["pending"] or counts["running"]:
                final = "running"
            else:
                final = "done" if counts["done"] == len(cells) else "stopped" if counts["cancelled"] else "failed"
            record = SweepRecord(**{k: meta[k] for k in ("id", "name", "hosts", "base", "matrix", "repeats",
                                                         "parallel", "seeds", "created_at", "started_at")},
                                 state=final, message=summary_line(counts, len(cells)))
            adopted.append(manager.store.create_sweep(record, cells))
    return adopted


def _adopted_cell(manager: RunManager, sweep_id: str, meta: dict, entry: dict | None) -> SweepCell:
    cell = SweepCell(sweep_id, meta["index"], meta.get("label", ""), meta.get("host", ""), meta.get("settings") or {},
                     meta.get("repeat", 0), meta.get("run_id"))
    if entry is not None and entry["state"] in ("cancelled", "failed"):
        return dataclasses.replace(cell, state=entry["state"], reason=entry.get("error") or "",
                                   hint=entry.get("hint") or "", ended_at=entry.get("ended_at"))
    try:
        run = manager.store.get_run(cell.run_id) if cell.run_id else None
    except RunNotFound:
        run = None
    if run is None:
        return cell  # waiting on its host (or not handed over): pending, with its run id when it has one
    manager.store.update_run(run.id, sweep_id=sweep_id)
    state = _CELL_OF_RUN.get(run.state, "running")
    return dataclasses.replace(cell, state=state, reason=run.message if state == "failed" else "", hint=run.hint,
                               started_at=run.started_at, ended_at=run.ended_at)
