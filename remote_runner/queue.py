"""The host-side queue: a sweep's cells run on the host by a detached queue process, with no client connected.

``queue-add RUN_ROOT`` (the client sends its cells as JSON on stdin) writes each cell as a file,
``RUN_ROOT/queue/cells/<seq>.json``, and starts the queue process unless one runs already.  The queue process
(``_queue``) launches the waiting cells in their order, each with the runner's own ``launch --new`` (so a run
directory that exists already is never launched a second time), and ends when no cell waits and no run it launched
is still going.  A serial sweep's cell runs alone; a parallel sweep's cells (``"parallel": true``) run side by side,
each placed when it starts with remote_runner.placement's rules on a look the queue takes at the host's GPUs
itself (only while a cell waits for GPUs): free GPUs not held by the queue's running cells, written into its config
(``gpus``, CUDA_VISIBLE_DEVICES) before ``launch``; a cell that must wait says why in its ``reason``, one that can
never fit fails in words.  On a host without GPUs they run side by side as its CPUs hold them.

``queue-stop RUN_ROOT [--sweep ID]`` cancels the waiting cells and stops the running runs with the runner's
``stop``; ``queue-status RUN_ROOT`` prints ``state.json`` (every cell: waiting, launched, cancelled or failed) and
whether the queue process runs.  See "The host-side queue" in docs/PROTOCOL.md.

Two locks, both ``flock`` on files in the queue folder (released by the kernel when their process dies, so a queue
process that died leaves nothing stale to clear): ``queue.lock`` is held by the queue process for its whole life
(one per run root and user); ``cells.lock`` is held briefly by whoever changes a cell (adding, launching,
cancelling), so a cell is never launched and cancelled at once.  The queue process decides to end, and lets go of
``queue.lock``, while it holds ``cells.lock``: a ``queue-add`` (which checks ``queue.lock`` holding ``cells.lock``)
either sees the process still there, which then finds the new cell, or starts a new one.

Standard library only; Python 3.9.
"""
import argparse
import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, Optional

from .lockfiles import flock as _flock
from .lockfiles import lock_holder, start_holder
from .lockfiles import read_json as _read_json
from .lockfiles import write_json as _write_json
from .placement import HELD_BY, HostGpus, capacity, gpu_request, on_gpus, place, unseen

QUEUE = "queue"
CELLS = "cells"
SWEEPS = "sweeps"
STATE = "state.json"
QUEUE_LOCK = "queue.lock"
CELLS_LOCK = "cells.lock"
QUEUE_PID = "queue.pid"
QUEUE_LOG = "queue.log"
#: How often the queue process looks at the running run's status.json (a read of one small file; no busy loop).
POLL_S = 0.5
#: A cell's states on the host.
CELL_STATES = ("waiting", "launched", "cancelled", "failed")


class Refused(Exception):
    """A request the queue (or the release watcher) refuses: the runner's JSON refusal (``error``, ``hint``)."""

    def __init__(self, error: str, hint: str = ""):
        super().__init__(error)
        self.error, self.hint = error, hint


def queue_dir(run_root: str) -> str:
    return os.path.join(os.path.abspath(os.path.expanduser(run_root)), QUEUE)


def run_dir_of(run_root: str, run_id: str) -> str:
    return os.path.join(os.path.abspath(os.path.expanduser(run_root)), "runs", run_id)


def _cells(qdir: str) -> list:
    """Every cell file's contents, in queue order."""
    folder = os.path.join(qdir, CELLS)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
    except FileNotFoundError:
        return []
    cells = [_read_json(os.path.join(folder, n)) for n in names]
    return [c for c in cells if c is not None]


def _cell_path(qdir: str, cell: dict) -> str:
    return os.path.join(qdir, CELLS, "%08d.json" % cell["seq"])


def _set(qdir: str, cell: dict, **fields: object) -> None:
    cell.update(fields, updated_at=time.time())
    _write_json(_cell_path(qdir, cell), cell)


def _summary(cell: dict) -> dict:
    """A cell as state.json lists it (its config stays in its own file)."""
    return {k: v for k, v in cell.items() if k != "config"}


def _write_state(qdir: str, cells: list, pid: Optional[int]) -> None:
    _write_json(os.path.join(qdir, STATE), {"schema": 1, "pid": pid, "updated_at": time.time(),
                                            "cells": [_summary(c) for c in cells]})


def _queue_pid(qdir: str) -> Optional[int]:
    """The queue process's pid when one holds queue.lock, else None."""
    return lock_holder(qdir, QUEUE_LOCK, QUEUE_PID)


def waiting_cells(qdir: str) -> int:
    """How many cells wait in the queue folder ``qdir`` (0 when there is none)."""
    return sum(1 for c in _cells(qdir) if c.get("state") == "waiting")


def _check_cells(payload: object) -> list:
    if not isinstance(payload, dict) or not isinstance(payload.get("cells"), list):
        raise Refused("queue-add reads {\"cells\": [...]} on stdin", "send the cells as the client does")
    from .config import ConfigError, config_from_dict

    cells = []
    for i, cell in enumerate(payload["cells"]):
        run_id = cell.get("run_id") if isinstance(cell, dict) else None
        if not isinstance(run_id, str) or not run_id or "/" in run_id or run_id.startswith("."):
            raise Refused("cell %d has no valid run_id" % i, "the client chooses a run id for each cell")
        text = cell.get("config")
        try:
            config = config_from_dict(json.loads(text))
        except ConfigError as exc:
            raise Refused("cell %d (%s): %s" % (i, run_id, exc), "fix the field and queue the sweep again") from None
        except (TypeError, ValueError) as exc:
            raise Refused("cell %d (%s): its config is not whole JSON (%s)" % (i, run_id, exc),
                          "queue it again: the link may have dropped while it was sent") from None
        if config.run_id != run_id:
            raise Refused("cell %d: its config's run_id %r is not the cell's %r" % (i, config.run_id, run_id))
        cells.append(cell)
    return cells


def add(run_root: str, payload: object, profile: Optional[str] = None) -> dict:
    """Queue ``payload["cells"]`` (each ``{"run_id", "config": config.json's text, "sweep_id", "index", "parallel"}``:
    a parallel sweep's cells run side by side, :mod:`remote_runner.placement` placing them on free GPUs) after
    those already there and start the queue process unless one runs; ``payload["sweep"]`` (what the client knows
    of the sweep) is kept for ``queue-status --sweeps``.  A run id queued already is left as it is."""
    new = _check_cells(payload)
    qdir = queue_dir(run_root)
    os.makedirs(os.path.join(qdir, CELLS), mode=0o700, exist_ok=True)
    os.makedirs(os.path.join(qdir, SWEEPS), mode=0o700, exist_ok=True)
    sweep = payload.get("sweep")
    with _flock(os.path.join(qdir, CELLS_LOCK)):
        cells = _cells(qdir)
        known = {c["run_id"] for c in cells}
        seq = max([c["seq"] for c in cells] + [0])
        added = []
        for cell in new:
            if cell["run_id"] in known:
                continue
            seq += 1
            entry = {"schema": 1, "seq": seq, "run_id": cell["run_id"], "sweep_id": cell.get("sweep_id"),
                     "index": cell.get("index"), "profile": profile, "config": cell["config"], "state": "waiting",
                     "parallel": bool(cell.get("parallel")), "added_at": time.time()}
            _set(qdir, entry)
            cells.append(entry)
            added.append(cell["run_id"])
            known.add(cell["run_id"])
        if isinstance(sweep, dict) and sweep.get("id") and "/" not in str(sweep["id"]):
            _write_json(os.path.join(qdir, SWEEPS, "%s.json" % sweep["id"]), sweep)
        pid, started = _queue_pid(qdir), False
        if pid is None and any(c["state"] == "waiting" for c in cells):
            pid, started = _start(qdir), True
        _write_state(qdir, cells, pid)
    return {"ok": True, "added": added, "queue_pid": pid, "started": started}


def _start(qdir: str) -> int:
    """Start the queue process, handing it ``queue.lock`` taken here (so no second one can start meanwhile)."""
    return start_holder(qdir, QUEUE_LOCK, QUEUE_PID, QUEUE_LOG, ["_queue", os.path.dirname(qdir)])


def _ended(run_dir: str) -> bool:
    from .status import FINAL_STATES
    from .supervisor import reconcile

    if not os.path.isdir(run_dir):
        return True
    status = reconcile(run_dir)
    return status is not None and status.get("state") in FINAL_STATES


def _runner(args: list, stdin: bytes = b"", timeout: float = 300.0) -> dict:
    """The runner's own command (``launch --new``, ``stop``) in a process of its own: the code path a client's
    command takes.  Its last line of JSON."""
    from .supervisor import runner_env, self_command

    proc = subprocess.run(self_command() + args, input=stdin, capture_output=True, env=runner_env(), timeout=timeout)
    lines = proc.stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return {"ok": False, "error": "the runner answered nothing (exit %d): %s" % (proc.returncode,
                                                                                    err[-1] if err else ""),
                "hint": "see queue.log on the host"}


def _launch(run_root: str, qdir: str, cell: dict) -> bool:
    """Launch one waiting cell with ``launch --new --retry``; True when its run started.

    ``--retry``: a directory holding this very config.json is this cell's own, made by a queue process that died
    before it recorded the launch; the runner then answers for the run started there (or starts it), so a run id
    never gets two runs.  Any other directory of that name is refused, and the cell fails."""
    run_dir = run_dir_of(run_root, cell["run_id"])
    args = ["launch", run_dir, "--new", "--retry"] + (["--profile", cell["profile"]] if cell.get("profile") else [])
    reply = _runner(args, cell["config"].encode("utf-8"))
    if reply.get("ok"):
        _set(qdir, cell, state="launched", run_dir=run_dir, pid=reply.get("pid"), launched_at=time.time(), reason="",
             hint="")
        return True
    _set(qdir, cell, state="failed", error=reply.get("error") or "refused", hint=reply.get("hint") or "",
         failure=reply.get("failure"), ended_at=time.time())
    return False


def _running(cells: list) -> list:
    return [c for c in cells if c["state"] == "launched" and not c.get("done")]


def _nproc(cell: dict) -> int:
    return int(json.loads(cell["config"]).get("nproc_per_node") or 1)


def _place(qdir: str, cell: dict, running: list, gpus: HostGpus) -> str:
    """Whether a parallel cell starts now beside ``running``: "launch" (a cell placed on GPUs has them in its config
    and ``gpus``), "failed" (it can never run here: said in words), "wait" or "wait_gpus" (its reason says why)."""
    if cell.get("gpus") is not None:
        return "launch"  # placed by a queue process that died before it recorded the launch: the same config again
    config = json.loads(cell["config"])
    request = gpu_request(config)
    look = None if request is None and gpus.count is not None else gpus.look()
    if look is None and gpus.count is None:
        return "wait_gpus"  # the first look at the GPUs (or one since GPUs were let go) is on its way
    if request is None or not gpus.count:  # a CPU host, or a cell that places itself: as many as the host holds
        if not running or sum(_nproc(c) for c in running) + _nproc(cell) <= capacity(gpus.count):
            return "launch"
        return "wait"
    host = cell.get("profile") or socket.gethostname()
    if look is None:
        return "wait_gpus"  # a look since GPUs were let go is on its way
    placement = unseen(host, "; ".join(look[1]) or "nvidia-smi lists none of its GPUs") if not look[0] else None
    held = {i for c in running for i in c.get("gpus") or ()}
    others = {c.get("sweep_id") for c in running if c.get("gpus")} - {cell.get("sweep_id")}
    placement = placement or place(host, look[0], request, held,
                                   held_by="the running cells of this host's queue" if others else HELD_BY)
    if placement.refused:
        _set(qdir, cell, state="failed", error=placement.refused, hint=placement.hint, reason="", ended_at=time.time())
        return "failed"
    if placement.waiting:
        if (cell.get("reason"), cell.get("hint")) != (placement.waiting, placement.hint):
            _set(qdir, cell, reason=placement.waiting, hint=placement.hint)
        return "wait_gpus"
    _set(qdir, cell, config=json.dumps(on_gpus(config, placement.gpus)), gpus=list(placement.gpus))
    return "launch"


def _launch_next(run_root: str, qdir: str, cells: list, gpus: HostGpus) -> None:
    """Launch the waiting cells that may start now, in queue order: a serial cell once nothing runs (and nothing
    beside it), a parallel one beside other parallel ones where :func:`_place` says it fits.  The first cell that
    must wait holds back those after it; the GPU source stays open only while that cell waits for GPUs."""
    looking = False
    for cell in [c for c in cells if c["state"] == "waiting"]:
        running = _running(cells)
        if not cell.get("parallel"):
            if running or _launch(run_root, qdir, cell):
                break
            continue
        if any(not c.get("parallel") for c in running):
            break
        decision = _place(qdir, cell, running, gpus)
        if decision.startswith("wait"):
            looking = decision == "wait_gpus"
            break
        if decision == "launch":
            _launch(run_root, qdir, cell)
    if not looking:
        gpus.close()


def serve(run_root: str, lock_fd: Optional[int] = None) -> int:
    """The queue process (``_queue RUN_ROOT``): launch the waiting cells (:func:`_launch_next`); end when nothing
    waits and nothing it launched runs.  ``lock_fd``: queue.lock as ``queue-add`` took it for us."""
    qdir = queue_dir(run_root)
    if lock_fd is None:
        lock_fd = os.open(os.path.join(qdir, QUEUE_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours already when handed over; else taken here
    except BlockingIOError:
        return 0  # another queue process runs for this run root
    with open(os.path.join(qdir, QUEUE_PID), "w") as fh:
        fh.write("%d\n" % os.getpid())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    pid = os.getpid()
    shown = None
    gpus = HostGpus()
    try:
        while True:
            with _flock(os.path.join(qdir, CELLS_LOCK)):
                cells = _cells(qdir)
                for cell in _running(cells):
                    if _ended(cell["run_dir"]):
                        _set(qdir, cell, done=True, ended_at=time.time())
                        if cell.get("gpus"):
                            gpus.release()
                _launch_next(run_root, qdir, cells, gpus)
                if not _running(cells) and not any(c["state"] == "waiting" for c in cells):
                    _write_state(qdir, cells, None)
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(qdir, QUEUE_PID))
                    os.close(lock_fd)  # let go while cells.lock is held: see the module's docstring
                    return 0
                now = [(c["seq"], c["state"], c.get("done"), c.get("reason")) for c in cells]
                if now != shown:
                    _write_state(qdir, cells, pid)
                    shown = now
            time.sleep(POLL_S)
    finally:
        gpus.close()


def stop(run_root: str, sweep_id: Optional[str] = None) -> dict:
    """Cancel the waiting cells (of ``sweep_id``, else all) and stop the running runs with the runner's ``stop``."""
    qdir = queue_dir(run_root)
    if not os.path.isdir(qdir):
        return {"ok": True, "cancelled": [], "stopped": []}
    with _flock(os.path.join(qdir, CELLS_LOCK)):
        cells = _cells(qdir)
        mine = [c for c in cells if sweep_id is None or c.get("sweep_id") == sweep_id]
        cancelled = []
        for cell in (c for c in mine if c["state"] == "waiting"):
            _set(qdir, cell, state="cancelled", ended_at=time.time(), error="cancelled with queue-stop")
            cancelled.append(cell["run_id"])
        running = [c for c in mine if c["state"] == "launched" and not c.get("done") and not _ended(c["run_dir"])]
        _write_state(qdir, cells, _queue_pid(qdir))
    stopped = []
    for cell in running:  # outside cells.lock: a stop waits for the run's grace
        reply = _runner(["stop", cell["run_dir"]])
        stopped.append({"run_id": cell["run_id"], "state": reply.get("state"), "ok": bool(reply.get("ok"))})
    return {"ok": True, "cancelled": cancelled, "stopped": stopped}


def status(run_root: str, sweeps: bool = False) -> dict:
    """state.json with ``running`` (whether the queue process is alive) and, with ``sweeps``, what the clients
    said of each sweep."""
    qdir = queue_dir(run_root)
    if not os.path.isdir(qdir):
        return {"ok": True, "pid": None, "running": False, "cells": [], "sweeps": {}}
    with _flock(os.path.join(qdir, CELLS_LOCK)):
        state = _read_json(os.path.join(qdir, STATE)) or {"cells": []}
        pid = _queue_pid(qdir)
    state.update(ok=True, pid=pid, running=pid is not None)
    if sweeps:
        folder = os.path.join(qdir, SWEEPS)
        names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
        state["sweeps"] = {n[:-5]: _read_json(os.path.join(folder, n)) for n in names if n.endswith(".json")}
    return state


def register(sub: argparse._SubParsersAction, answer: Callable[[dict], None],
             refuse: Callable[..., int]) -> None:
    """The queue's commands on the runner's command line (``answer`` prints a reply, ``refuse`` a refusal)."""

    def cmd_add(args: argparse.Namespace) -> int:
        try:
            payload = json.loads(sys.stdin.buffer.read().decode("utf-8"))
        except ValueError as exc:
            return refuse("the cells sent on stdin are not whole JSON (%s)" % exc,
                          "queue them again: the link may have dropped while they were sent")
        try:
            answer(add(args.run_root, payload, args.profile))
        except Refused as refused:
            return refuse(refused.error, refused.hint)
        return 0

    def cmd_status(args: argparse.Namespace) -> int:
        answer(status(args.run_root, args.sweeps))
        return 0

    def cmd_stop(args: argparse.Namespace) -> int:
        answer(stop(args.run_root, args.sweep))
        return 0

    p = sub.add_parser("queue-add", help="queue cells (JSON on stdin) to run one at a time on this host, detached")
    p.add_argument("run_root")
    p.add_argument("--profile", default=None, help="the client's name for this host (kept in each run's status)")
    p.set_defaults(func=cmd_add)
    p = sub.add_parser("queue-status", help="the queue's cells (waiting, launched, cancelled, failed) as JSON")
    p.add_argument("run_root")
    p.add_argument("--sweeps", action="store_true", help="with what the clients said of each sweep")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("queue-stop", help="cancel the waiting cells and stop the running run")
    p.add_argument("run_root")
    p.add_argument("--sweep", default=None, help="only this sweep's cells")
    p.set_defaults(func=cmd_stop)
    p = sub.add_parser("_queue")
    p.add_argument("run_root")
    p.add_argument("--lock-fd", type=int, default=None)
    p.set_defaults(func=lambda args: serve(args.run_root, args.lock_fd))
