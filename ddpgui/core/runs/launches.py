"""Launch bookkeeping for single- and multi-node launch: who is launching a run, a failed launch, the script upload.

While a run is ``launching`` its row holds, in ``environment["launcher"]``, the
process that launches it (pid, process start time, this machine's name) and
the step it is at.  Another ddpgui process (a second CLI, the app) may be
launching a run right now, so a ``launching`` run is taken for abandoned only
when its launcher is provably gone: same machine, and that pid no longer runs
the process that started the launch.  Such a run is marked failed
(``launch_incomplete``) with the step it stopped at; it can then be stopped,
deleted and rerun like any ended run.  A launch that fails is recorded by
:func:`launch_failed` (``launch_failed``); a script run's folder is read (checked, fingerprinted) by
:func:`read_script_folder` and put where the run finds it by :func:`place_script`: on This computer the run
runs in the folder itself, elsewhere the folder is uploaded; :func:`prepare` is every step of a one-host launch
before the run starts; :class:`HostLaunch` runs them and the start, again from the stage reached after a dropped
link, and records a failure with a hint true for that stage.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from remote_runner.config import RunConfig
from remote_runner.fsutil import pid_alive

from ..errors import describe
from ..ssh.connection import HostUnreachable
from ..store import RunRecord, RunStore
from ..targets.base import ConnectionLost, LaunchResult, Progress, Target, TargetError
from ..targets.pool import TargetPool

if TYPE_CHECKING:
    from ..targets.uploads import Scan

log = logging.getLogger(__name__)

#: What a launch is doing, in the words of the "launch did not finish" message.
STAGE_CONNECTING = "connecting to the host and deploying the runner"
STAGE_READING = "reading the script folder"
STAGE_UPLOADING = "uploading the script"
STAGE_STARTING = "starting the run on the host"
STAGE_NODES = "uploading to and starting the nodes"


def _process_start(pid: int) -> int | None:
    """The start time (clock ticks since boot) of process ``pid``: tells a pid reused by another process apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def launcher(stage: str) -> dict:
    """This process as the launcher of a run, at ``stage``."""
    pid = os.getpid()
    return {"launcher": {"pid": pid, "start": _process_start(pid), "host": socket.gethostname(), "stage": stage,
                         "t": time.time()}}


def launcher_of(record: RunRecord) -> dict:
    return (record.environment or {}).get("launcher") or {}


def launcher_alive(record: RunRecord) -> bool:
    """Whether the process launching this run may still be doing so (True when that cannot be told from here)."""
    info = launcher_of(record)
    pid = info.get("pid")
    if not pid or info.get("host") != socket.gethostname():
        return bool(pid)  # no launcher recorded: an old row, not ours to judge; another machine: cannot tell
    if not pid_alive(pid):
        return False
    start = _process_start(pid)
    return info.get("start") is None or start is None or start == info["start"]


def in_progress(record: RunRecord) -> bool:
    """A run in ``launching`` whose launcher may still be doing it (stop, delete and follow wait or refuse)."""
    return record.state == "launching" and not record.run_dirs and launcher_alive(record)


def abandoned(record: RunRecord) -> bool:
    """A run stuck in ``launching`` whose launcher is gone: its launch will never complete."""
    return record.state == "launching" and not record.run_dirs and bool(launcher_of(record)) \
        and not launcher_alive(record)


def incomplete_message(record: RunRecord) -> str:
    stage = launcher_of(record).get("stage") or "launching it"
    return f"the launch did not finish (the app was closed while {stage})"


def settle(store: RunStore, record: RunRecord) -> RunRecord:
    """Mark ``record`` failed (``launch_incomplete``) when its launch was abandoned; returns the row."""
    if not abandoned(record):
        return record
    return store.update_run(record.id, state="failed", failure="launch_incomplete", ended_at=time.time(),
                            message=incomplete_message(record),
                            hint=f"rerun it (ddpgui rerun {record.id}) or delete it (ddpgui delete {record.id})")


def settle_all(store: RunStore) -> list[RunRecord]:
    """Settle every abandoned launch in the store; returns the runs marked."""
    return [settle(store, r) for r in store.active_runs() if abandoned(r)]


def being_launched(record: RunRecord) -> str:
    """"pid P on H (STAGE)" for a run another live process is launching right now."""
    info = launcher_of(record)
    return f"pid {info.get('pid')} on {info.get('host')} ({info.get('stage') or 'launching'})"


def launch_failed(store: RunStore, run_id: str, exc: BaseException, message: str | None = None,
                  hint: str | None = None, **columns: object) -> RunRecord:
    """Mark the run failed (``launch_failed``) with what ``exc`` says (``message`` and ``hint``, when given,
    instead of its own); ``columns`` are stored with it."""
    if isinstance(exc, Exception):
        said, said_hint = describe(exc)
    else:  # Ctrl-C, or the process is being ended
        said, said_hint = "the launch was interrupted before it finished", f"rerun it (ddpgui rerun {run_id})"
    return store.update_run(run_id, state="failed", message=said if message is None else message,
                            hint=said_hint if hint is None else hint, failure="launch_failed", ended_at=time.time(),
                            **columns)


@dataclass(frozen=True)
class ScriptFolder:
    """A script run's folder on this computer as read before the launch: where it is, its files and what was
    skipped (the upload's scan), and the code's fingerprint."""

    path: Path
    scanned: Scan
    fingerprint: dict


def read_script_folder(cfg: RunConfig) -> ScriptFolder:
    """Check that the script folder and its entry exist here, scan the folder and fingerprint its code (a
    rerun's stored fingerprint is never reused)."""
    from ..targets.fingerprint import fingerprint
    from ..targets.uploads import scan

    path = Path(cfg.script.dir).expanduser().resolve()
    if not path.is_dir():
        raise TargetError(f"the script folder {cfg.script.dir} does not exist on this computer",
                          "choose the folder that holds your training script", field="script.dir")
    if not (path / cfg.script.entry).is_file():
        raise TargetError(f"the script {cfg.script.entry} is not in {path}",
                          "check the entry file's name (relative to the folder) and the folder", field="script.entry")
    scanned = scan(path)
    return ScriptFolder(path, scanned, fingerprint(path, scanned[0]))


def place_script(target: Target, cfg: RunConfig, folder: ScriptFolder, progress: Progress | None = None) -> None:
    """Point ``cfg.script`` where the run on ``target`` finds the script, with the code's fingerprint: on This
    computer the folder itself (the run works in it, as ``torchrun train.py`` there would: nothing is copied),
    elsewhere the folder uploaded (the ignore rules and the size cap applied; what was skipped is logged).  A new
    script object: the nodes of a multi-node run share the one they were copied from."""
    from ..targets.uploads import upload_script_dir

    script = dataclasses.replace(cfg.script, fingerprint=folder.fingerprint, source=str(folder.path))
    if target.sees_local_files:
        cfg.script = dataclasses.replace(script, dir=str(folder.path))
        return
    files, skipped = folder.scanned
    if not any(f.rel == cfg.script.entry for f in files):
        why = next((why for rel, why in skipped if rel == cfg.script.entry or
                    (rel.endswith("/") and cfg.script.entry.startswith(rel))), "not uploaded")
        raise TargetError(f"the script {cfg.script.entry} would not be uploaded to {target.name}: {why}",
                          "change that rule, or add `!" + cfg.script.entry + "` to a .ddpguiignore in the folder",
                          field="script.entry")
    cfg.script = dataclasses.replace(script, dir=upload_script_dir(target, folder.path, progress=progress,
                                                                   scanned=folder.scanned))


def prepare(store: RunStore, pool: TargetPool, host: str, cfg: RunConfig, progress: Progress | None = None,
            check: Callable[[Target], None] | None = None) -> tuple[Target, dict]:
    """The steps of a launch before the run starts, each recorded as the row's launcher stage: connect and
    deploy, ``check`` the request on the target, read a script run's folder and put it where the run finds it
    (:func:`place_script`: ``cfg.script`` then points there), fingerprint the host.  Returns the target and the
    host's fingerprint; the caller records a failure."""
    target = pool.target(host, progress)
    if check is not None:
        check(target)
    if cfg.mode == "script":
        store.update_run(cfg.run_id, environment=launcher(STAGE_READING))
        folder = read_script_folder(cfg)
        if not target.sees_local_files:
            store.update_run(cfg.run_id, environment=launcher(STAGE_UPLOADING))
        place_script(target, cfg, folder, progress)
        store.update_run(cfg.run_id, config=cfg.to_dict())
    environment = pool.environment(host)
    store.update_run(cfg.run_id, environment=launcher(STAGE_STARTING))
    return target, environment


#: Drops of the link one launch lives through: after each, the launch goes on from the stage it reached once the
#: connection is back (it reconnects with its own backoff; a link still down after it ends the launch).
LAUNCH_DROPS = 3
UNCONFIRMED = "launch_unconfirmed"


def unconfirmed(record: RunRecord) -> bool:
    """A run whose start was sent to its host but whose answer never came (the link dropped and stayed down):
    it may be going on there; following it finds out."""
    return record.failure == UNCONFIRMED and bool(record.run_dirs)


def _answered(exc: BaseException) -> bool:
    """Whether ``exc`` is the runner's own answer to ``launch`` (a refusal: nothing runs), not a lost one."""
    return isinstance(exc, TargetError) and not isinstance(exc, (ConnectionLost, subprocess.TimeoutExpired))


@dataclass
class HostLaunch:
    """A one-host launch that lives through dropped links (docs/PROTOCOL.md, "A link that drops during a launch").

    Each try runs :func:`prepare` and the start again on a fresh copy of the config: what a dropped try finished
    is not done twice (the runner is deployed and the script uploaded by content hash), and the start is retried
    with ``launch --new --retry``, which finds a run the lost answer had started and never starts a second one.
    """

    store: RunStore
    pool: TargetPool
    host: str
    cfg: RunConfig
    progress: Progress | None = None
    drops: int = 0
    #: the run directory whose ``launch --new`` got no answer (the run may have started there)
    unanswered: str | None = None

    def run(self) -> tuple[LaunchResult, dict]:
        """Prepare and start the run; returns the runner's answer and the host's environment fingerprint."""
        while True:
            cfg = dataclasses.replace(self.cfg)  # prepare() points cfg.script at the upload: each try from the start
            try:
                target, environment = prepare(self.store, self.pool, self.host, cfg, self.progress)
                return self._start(target, cfg), environment
            except ConnectionLost as exc:
                self.drops += 1
                if self.drops > LAUNCH_DROPS:
                    raise
                stage = launcher_of(self.store.get_run(cfg.run_id)).get("stage") or "launching it"
                log.info("run %s: %s; launching again from %s", cfg.run_id, exc, stage)
                self.store.update_run(cfg.run_id, message=f"the link to {self.host} dropped while {stage}: "
                                                          "going on once it is back")

    def _start(self, target: Target, cfg: RunConfig) -> LaunchResult:
        run_dir = target.run_dir(cfg.run_id)
        try:
            result = target.launch(cfg, retry=self.unanswered is not None)
        except BaseException as exc:
            if isinstance(exc, HostUnreachable):  # no connection: this try sent nothing, an earlier one may have
                raise
            self.unanswered = None if _answered(exc) else run_dir
            raise
        if result.resumed:
            log.info("run %s: the start whose answer was lost had started it on %s (pid %d)", cfg.run_id, self.host,
                     result.pid)
        self.unanswered = None
        return result

    def failed(self, exc: BaseException) -> RunRecord:
        """Record the launch as failed with a hint true for the stage it reached: nothing started on the host,
        or (its start sent, the answer lost) a run that may go on there and that ``follow`` finds."""
        run_id, host = self.cfg.run_id, self.host
        message = describe(exc)[0] if isinstance(exc, Exception) else "the launch was interrupted"
        if self.unanswered is not None:
            return self.store.update_run(
                run_id, state="failed", failure=UNCONFIRMED, ended_at=time.time(), run_dirs={0: self.unanswered},
                message=f"the run's start was sent to {host} but its answer never came: {message}",
                hint=f"the run may have started on the host and go on there: ddpgui follow {run_id} picks it up "
                     f"once {host} is reachable again (and says so if it never started)")
        if not isinstance(exc, (ConnectionLost, HostUnreachable)):
            return launch_failed(self.store, run_id, exc)
        stage = launcher_of(self.store.get_run(run_id)).get("stage") or "launching it"
        if self.drops:
            message = f"the link to {host} dropped while {stage} and did not come back: {message}"
        own = getattr(exc, "hint", "") if isinstance(exc, HostUnreachable) and not self.drops else ""
        return launch_failed(self.store, run_id, exc, message=message,
                             hint=f"nothing was started on the host; {own + '; ' if own else ''}"
                                  f"rerun it (ddpgui rerun {run_id}) once {host} is reachable")
