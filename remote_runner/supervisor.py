"""The detached supervisor of one run: torchrun, the telemetry sampler and status.json.

``launch`` starts it in a session of its own (so it outlives the connection
that started it) and returns at once.  The supervisor picks a free rendezvous
port, runs torchrun, samples telemetry, and records the outcome with a message
and a hint.  SIGTERM (from ``stop``) ends the whole process tree.
"""
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional

from . import proctree
from .config import RunConfig, load_config
from .failures import ATTEMPT_MARKER, diagnose
from .scriptmode import SCRIPT_COMMAND
from .spools import EVENTS, FINAL_EVENTS, METRICS, STDERR, STDOUT, append_event, last_record
from .status import (
    CONFIG,
    FINAL_STATES,
    read_status,
    release_reserve,
    reserve_space,
    runs_elsewhere,
    this_host,
    write_status,
)

#: How many times a run whose rendezvous port was taken between our check and
#: torchrun's bind is retried on a new port.
PORT_RETRIES = 3
#: Written by ``launch`` as soon as the supervisor exists (status.json gets the pid a moment later).
SUPERVISOR_PID = "supervisor.pid"
#: Seconds after ``launch`` wrote the first status during which a run without a supervisor pid yet is not lost.
LAUNCH_WINDOW_S = 30.0
#: torchrun (``python -c`` this, then torchrun's arguments), minus the Python traceback it prints when a signal
#: ends it ("SignalException: Process N got signal: 15", a stop): it has stopped its workers by then, so one line
#: says which signal, and it ends by that signal (its parent sees -15 for SIGTERM).  Anything else it raises (a rank
#: that failed: ChildFailedError and its table) is printed whole, as before.
QUIET_TORCHRUN = """\
import os, signal, sys
try:
    from torch.distributed.elastic.multiprocessing.api import SignalException
except ImportError:  # a torch without it: whatever it raises is printed as before
    SignalException = ()
from torch.distributed.run import main
try:
    main(sys.argv[1:])
except SignalException as exc:
    sig = signal.Signals(exc.sigval)
    sys.stderr.write("torchrun ended by %s (pid %d): it stopped its workers\\n" % (sig.name, os.getpid()))
    sys.stderr.flush()
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    sys.exit(128 + sig)
"""


def supervisor_pid(run_dir: str, status: Optional[dict] = None) -> Optional[int]:
    """The supervisor's pid, from status.json (or ``status``, read already) or from the file ``launch`` wrote."""
    status = status if status is not None else (read_status(run_dir) or {})
    if status.get("pid"):
        return int(status["pid"])
    try:
        with open(os.path.join(run_dir, SUPERVISOR_PID)) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def self_command() -> list[str]:
    """The argv prefix that runs this runner again, from the zipapp or from the package."""
    main = sys.modules.get("__main__")
    archive = getattr(main, "__file__", "") or ""
    pyz = os.path.dirname(archive)
    if pyz.endswith(".pyz") and os.path.isfile(pyz):
        return [sys.executable, pyz]
    return [sys.executable, "-m", "remote_runner"]


def runner_env() -> dict:
    """The environment for child processes: unbuffered output, this runner importable."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not package_parent.endswith(".pyz"):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env


def free_port() -> int:
    """A TCP port that nothing listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def endpoint_port(endpoint: str) -> int:
    """The port of ``host:port`` (or ``[ipv6]:port``)."""
    return int(endpoint.rsplit(":", 1)[1])


def start(run_dir: str, profile: Optional[str] = None) -> int:
    """Start the supervisor for ``run_dir`` detached from the caller; returns its pid.

    ``host`` (this machine) and ``profile`` (the client's name for it) say, in a run root
    that several machines share, which one runs it.
    """
    # Written before the supervisor exists: it then only adds to it, so no update is lost.
    write_status(run_dir, state="starting", started_at=time.time(), host=this_host(), profile=profile)
    reserve_space(run_dir)  # room for the run's last events and status should its disk fill up
    log = open(os.path.join(run_dir, "supervisor.log"), "ab")
    try:
        proc = subprocess.Popen(self_command() + ["_supervise", run_dir], cwd=run_dir, env=runner_env(),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    finally:
        log.close()
    try:
        with open(os.path.join(run_dir, SUPERVISOR_PID), "w") as fh:
            fh.write(str(proc.pid))
    except BaseException:  # (a full disk) the launch fails: no supervisor may go on in a directory it removes
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return proc.pid


class Supervisor:
    """Runs inside the detached process; :meth:`run` returns the exit status of the run."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.config: RunConfig = load_config(os.path.join(run_dir, CONFIG))
        self.proc: Optional[subprocess.Popen] = None
        self.stopping = threading.Event()
        self.stopper: Optional[threading.Thread] = None  # the thread that ends the run's processes on SIGTERM
        #: Every process the supervisor starts inherits ``DDPGUI_RUN=<marker>``: ``stop`` finds by it what left
        #: the process tree (a daemon the script started).
        self.marker = proctree.new_marker(self.config.run_id)
        self.script_reading = None  # a script run's metric readers (scriptread.reading.ScriptReading)

    def torchrun_argv(self, port: int) -> list[str]:
        """torchrun for this node; ``port`` is the rendezvous port of a one-node run.

        One node: c10d rendezvous on 127.0.0.1.  Several nodes: torchrun's *static*
        rendezvous at the endpoint the client chose (node 0's address and a port
        checked free and reachable): node 0 hosts the TCPStore on that one port and
        ``--node-rank`` is kept, so global rank 0 (the metrics writer) is on node 0.
        c10d's dynamic rendezvous would rank the nodes by (hostname, pid) instead and
        open a second, random port on whichever node came first.  ``timeout`` bounds
        how long node 0 waits for the others to join.
        """
        cfg = self.config
        argv = [sys.executable, "-c", QUIET_TORCHRUN,
                "--nnodes", str(cfg.nnodes), "--node-rank", str(cfg.node_rank),
                "--nproc-per-node", str(cfg.nproc_per_node)]
        if cfg.nnodes > 1:
            argv += ["--rdzv-backend", "static", "--rdzv-endpoint", cfg.rdzv_endpoint,
                     "--rdzv-conf", "timeout=%d" % max(1, round(cfg.rdzv_timeout_s))]
        else:
            argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", cfg.rdzv_endpoint or "127.0.0.1:%d" % port]
        argv += ["--rdzv-id", cfg.run_id or "ddpgui", "--max-restarts", "0", "--monitor-interval", "0.5"]
        if cfg.mode == "script":
            # The user's script runs under our entry (as runpy does), which leaves the way _train does.
            script = cfg.script
            return argv + self_command()[1:] + [SCRIPT_COMMAND, os.path.join(script.dir, script.entry)] + \
                script.argv()
        return argv + self_command()[1:] + ["_train", self.run_dir]

    def run(self, keep_host: bool = False) -> int:
        """``keep_host``: status.json's ``host`` was written by the caller (a Slurm node: remote_runner.slurm)."""
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, self._on_sigterm)
        where = {} if keep_host else {"host": this_host()}
        write_status(self.run_dir, state="starting", pid=os.getpid(), pgid=os.getpgid(0), run_marker=self.marker,
                     **where)
        append_event(self.run_dir, "started", pid=os.getpid(), world_size=self.config.world_size,
                     nnodes=self.config.nnodes, node_rank=self.config.node_rank)
        sampler = self._start_telemetry()
        try:
            rc = self._run_torchrun()
        finally:
            if sampler is not None:
                sampler.stop()
            if self.script_reading is not None:
                self.script_reading.close()
            if self.stopper is not None:  # a stop in progress: its grace first, then what is left
                self.stopper.join()
            proctree.end_run_processes(self.run_dir, [os.getpid()], 2.0, "end of run")
        self._record_outcome(rc)
        return 0 if rc == 0 else 1

    def _start_telemetry(self):
        try:
            from .telemetry import TelemetrySampler
        except ImportError:
            return None
        me = os.getpid()
        sampler = TelemetrySampler(self.run_dir, self.config.telemetry_interval_s,
                                   lambda: proctree.descendants([me]))
        sampler.start()
        return sampler

    def _run_torchrun(self) -> Optional[int]:
        rc = None
        for attempt in range(PORT_RETRIES + 1):
            if self.stopping.is_set():
                return rc
            port = endpoint_port(self.config.rdzv_endpoint) if self.config.rdzv_endpoint else free_port()
            rc = self._run_once(port)
            if rc == 0 or self.stopping.is_set() or self.config.rdzv_endpoint or not self._port_clash():
                return rc
            append_event(self.run_dir, "retry", reason="rendezvous port %d was taken" % port, attempt=attempt + 1)
        return rc

    def _port_clash(self) -> bool:
        """Whether the failed attempt died on a taken port before any training record."""
        if os.path.exists(os.path.join(self.run_dir, METRICS)) and os.path.getsize(os.path.join(self.run_dir, METRICS)):
            return False
        return diagnose(self.run_dir, 1).kind == "addr_in_use"

    def _run_once(self, port: int) -> Optional[int]:
        cfg = self.config
        env = runner_env()
        script_mode = cfg.mode == "script"
        if script_mode:
            from .scriptread.reading import ScriptReading

            if self.script_reading is None:
                self.script_reading = ScriptReading(self.run_dir, cfg)
            self.script_reading.prepare(env)
        env.update(cfg.env)
        if script_mode:
            env.update(cfg.script.passed_env)
        env[proctree.RUN_MARKER] = self.marker
        cwd = cfg.script.dir if script_mode else self.run_dir
        out = open(os.path.join(self.run_dir, STDOUT), "ab")
        err = open(os.path.join(self.run_dir, STDERR), "ab")
        # The diagnosis reads stderr after the last marker only, so an earlier attempt's port clash
        # is not mistaken for this attempt's failure.
        err.write(("%s (rendezvous port %d)\n" % (ATTEMPT_MARKER, port)).encode())
        err.flush()
        try:
            self.proc = subprocess.Popen(self.torchrun_argv(port), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE if script_mode else out, stderr=err)
        except OSError as exc:
            err.write(("could not start torchrun: %s\n" % exc).encode())
            _close_quietly(out, err)
            if script_mode:
                self.script_reading.attempt_failed()
            return 127
        write_status(self.run_dir, state="running", torchrun_pid=self.proc.pid, rdzv_port=port)
        if self.stopping.is_set():  # SIGTERM arrived while torchrun was being started
            self._stop_tree()
        if script_mode:
            self.script_reading.start(self.proc.stdout, out.fileno(), err.fileno())
        rc = self._wait_with_watchdog()
        if script_mode:
            self.script_reading.attempt_ended()
        _close_quietly(out, err)  # on a full disk their last bytes cannot be flushed: the outcome still can
        return rc

    def _wait_with_watchdog(self) -> int:
        """Wait for torchrun; a rank that failed while torchrun lingers ends the run within the bound."""
        failed_since = None
        while True:
            try:
                return self.proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
            if failed_since is None and any(n.startswith("error-rank") for n in os.listdir(self.run_dir)):
                failed_since = time.monotonic()
            if failed_since is not None and time.monotonic() - failed_since > self.config.rank_failure_timeout_s:
                append_event(self.run_dir, "warning", message="a rank failed and the others did not exit within "
                             "%.0f s; ending the run" % self.config.rank_failure_timeout_s)
                proctree.end_run_processes(self.run_dir, [self.proc.pid], 2.0, "a rank failed")
                return self.proc.wait()

    def _on_sigterm(self, signum, frame) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.stopper = threading.Thread(target=self._stop_tree, daemon=True)
        self.stopper.start()

    def _stop_tree(self) -> None:
        if self.proc is not None:
            proctree.end_run_processes(self.run_dir, [self.proc.pid], self.config.stop_grace_s, "stop")

    def _record_outcome(self, rc: Optional[int]) -> None:
        if self.stopping.is_set():
            record_end(self.run_dir, "stopped", exit_code=rc, message="stopped on request", hint="")
        elif rc == 0:
            record_end(self.run_dir, "finished", exit_code=0, message="", hint="")
        else:
            diagnosis = diagnose(self.run_dir, rc)
            record_end(self.run_dir, "failed", exit_code=rc, failure=diagnosis.kind, message=diagnosis.message,
                       hint=diagnosis.hint, failed_rank=diagnosis.rank)


def _close_quietly(*files) -> None:
    """Close files whose last buffered bytes may not fit on a full disk (that must not end the supervisor)."""
    for fh in files:
        try:
            fh.close()
        except OSError:
            pass


def record_end(run_dir: str, state: str, **fields: object) -> dict:
    """Record the run's end: its final event, then status.json (``ended_at`` added); returns the status.

    The event goes first (a follower stops reading once status.json is final) and
    is written once however often this is called.  When even status.json cannot be
    written (the disk is full past the reserve), the event alone records the end:
    :func:`reconcile` reads it from there.  Raises OSError only when neither could
    be written.
    """
    fields.setdefault("ended_at", time.time())
    event = {("rank" if k == "failed_rank" else k): v for k, v in fields.items() if k != "ended_at"}
    problem = None
    try:
        append_event(run_dir, state, **event)
    except OSError as exc:
        problem = exc
    try:
        status = write_status(run_dir, state=state, **fields)
    except OSError:
        if problem is not None:
            raise
        status = dict(read_status(run_dir) or {}, state=state, **fields)
    release_reserve(run_dir)  # the run has ended: its reserve is no longer needed
    return status


def status_of_end_event(event: dict) -> dict:
    """The status fields of a run's final event (``spools.FINAL_EVENTS``)."""
    return {"state": event["event"], "ended_at": event.get("t"), "exit_code": event.get("exit_code"),
            "failure": event.get("failure"), "message": event.get("message") or "", "hint": event.get("hint") or "",
            "failed_rank": event.get("rank")}


def supervise(run_dir: str) -> int:
    """Entry of the detached process (``runner _supervise RUN_DIR``)."""
    try:
        supervisor = Supervisor(run_dir)
    except Exception as exc:  # a config that changed under us, a torch that vanished: still record why
        record_end(run_dir, "failed", message=str(exc),
                   hint="check the run's config.json and the host's Python environment")
        return 1
    return supervisor.run()


def reconcile(run_dir: str) -> Optional[dict]:
    """The run's status, corrected when its supervisor died without recording an outcome.

    A run whose status names another host (a run root shared by several machines) is
    that host's to judge: its pid means nothing here, so its status is returned as it is.
    """
    from .fsutil import pid_alive

    status = read_status(run_dir)
    if status is None or status.get("state") in FINAL_STATES or runs_elsewhere(status):
        return status
    pid = supervisor_pid(run_dir, status)
    if pid_alive(pid):
        return status
    if pid is None and time.time() - float(status.get("started_at") or 0) < LAUNCH_WINDOW_S:
        return status  # ``launch`` is starting the supervisor right now: its pid is not written yet
    # Re-read: the supervisor may have finished between our two looks.
    status = read_status(run_dir) or status
    if status.get("state") in FINAL_STATES:
        return status
    last = last_record(os.path.join(run_dir, EVENTS)) or {}
    if last.get("event") in FINAL_EVENTS:
        # The supervisor recorded its end in the events but could not replace status.json (a full disk).
        end = status_of_end_event(last)
    else:
        diagnosis = diagnose(run_dir, None)
        if diagnosis.kind == "disk_full":
            end = {"state": "failed", "failure": diagnosis.kind, "message": diagnosis.message, "hint": diagnosis.hint,
                   "failed_rank": diagnosis.rank}
        else:
            end = {"state": "failed", "failure": "supervisor_lost",
                   "message": "the run's supervisor is gone without recording an outcome (host rebooted, or the "
                              "process was killed)",
                   "hint": "look at stderr.log and supervisor.log in the run directory; rerun the experiment"}
    state = end.pop("state")
    try:
        return record_end(run_dir, state, **end)
    except OSError:  # nothing can be written there: still say how the run ended
        return dict(status, state=state, **end)

