"""Release when idle: the host runs its release action by itself once nothing of ddpgui is left to do.

``release-set RUN_ROOT`` (the policy as JSON on stdin: ``{"policy": {...}}``, or ``{"policy": null}`` to clear it)
writes ``RUN_ROOT/release/policy.json`` and starts the watcher (``_release``, one per run root and user, detached)
unless one runs.  The watcher looks every ``POLL_S`` seconds at what would keep the host:

- a run under ``RUN_ROOT/runs`` that has not ended (on this machine: a run root shared over NFS holds other
  machines' runs too, which are theirs);
- a cell of the host-side queue that waits (remote_runner.queue);
- somebody logged in on a terminal (utmp), as SkyPilot's autostop counts an SSH session;
- for an action that destroys the disk (``kind: terminate``): a run whose records a client has not collected
  (``collected RUN_DIR``, sent by the client once it stored a run's end: ``RUN_DIR/collected.json``), or whose
  outputs the launch asked to keep and no client downloaded yet; unless ``destroy_uncollected_after_s`` has
  passed since the host became idle (the user's explicit choice).

The host is idle from the latest of: the last time something kept it, the end of its latest run, the policy's
setting, the machine's boot (a stopped instance started again does not release at once) and the last release,
cancel or failure.  When it has been idle ``after_s`` seconds the watcher runs the action (``on: host``:
``/bin/sh -c COMMAND``, its output in ``release/release.log``), or, for an action on the client's computer
(``on: local``: ``sky down CLUSTER``), marks it ``due`` for a client to run.  A release that fails is tried again
after another idle period, ``MAX_ATTEMPTS`` times in all; ``release-status`` says what happened, in words.
``release-cancel`` holds the release until the host is next used (a run or a queued cell) or the policy is set
again.  See "Release" in docs/PROTOCOL.md.

Standard library only; Python 3.9.
"""
import argparse
import json
import os
import signal
import struct
import subprocess
import sys
import time
from typing import Callable, Optional

from .lockfiles import flock, lock_holder, read_json, start_holder, write_json
from .queue import Refused, queue_dir, waiting_cells

RELEASE = "release"
POLICY = "policy.json"
STATE = "state.json"
WATCH_LOCK = "watch.lock"
WATCH_PID = "watch.pid"
WATCH_LOG = "watch.log"
STATE_LOCK = "state.lock"
RELEASE_LOG = "release.log"
COLLECTED = "collected.json"
#: Seconds between the watcher's looks (a listing of the runs folder and a few small reads).
POLL_S = 5.0
#: Most seconds a host-side release command may take.
COMMAND_TIMEOUT_S = 300.0
#: Tries of a release that fails, each after another idle period.
MAX_ATTEMPTS = 3
#: Fewest seconds between two tries of a release that failed.
RETRY_S = 60.0
ON = ("host", "local")
KINDS = ("stop", "terminate")
#: utmp's record of a login (``USER_PROCESS``) and the glibc layout of one record on Linux.
_UTMP_USER_PROCESS = 7
_UTMP = struct.Struct("<hxxi32s4s32s256shhiii4i20s")
_UTMP_FILES = ("/run/utmp", "/var/run/utmp")


def release_dir(run_root: str) -> str:
    return os.path.join(os.path.abspath(os.path.expanduser(run_root)), RELEASE)


def check_policy(policy: object) -> dict:
    """The policy as the watcher keeps it; Refused names the field at fault."""
    if not isinstance(policy, dict):
        raise Refused("the release policy must be an object", "send it as the client does")
    command = policy.get("command")
    if not isinstance(command, str) or not command.strip() or "\n" in command or "\0" in command:
        raise Refused("release policy: command must be one line of text", "e.g. sudo shutdown -h now")
    if policy.get("on", "host") not in ON:
        raise Refused("release policy: on must be host or local, got %r" % (policy.get("on"),))
    if policy.get("kind", "stop") not in KINDS:
        raise Refused("release policy: kind must be stop or terminate, got %r" % (policy.get("kind"),))
    after = policy.get("after_s")
    if isinstance(after, bool) or not isinstance(after, (int, float)) or not 0 <= after <= 30 * 86400:
        raise Refused("release policy: after_s must be seconds from 0 to 30 days, got %r" % (after,))
    force = policy.get("destroy_uncollected_after_s")
    if force is not None and (isinstance(force, bool) or not isinstance(force, (int, float)) or force < 0):
        raise Refused("release policy: destroy_uncollected_after_s must be seconds or null, got %r" % (force,))
    return {"command": command, "on": policy.get("on", "host"), "kind": policy.get("kind", "stop"),
            "after_s": float(after), "destroy_uncollected_after_s": None if force is None else float(force),
            "count_logins": bool(policy.get("count_logins", True)), "profile": policy.get("profile"),
            "set_at": time.time()}


def _boot_time() -> float:
    try:
        with open("/proc/stat") as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0.0


def logins() -> list:
    """Who is logged in on a terminal now ("USER on LINE"), from utmp; [] where the host keeps no utmp."""
    from .fsutil import pid_alive

    for path in _UTMP_FILES:
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        found = []
        for at in range(0, len(data) - _UTMP.size + 1, _UTMP.size):
            fields = _UTMP.unpack_from(data, at)
            if fields[0] != _UTMP_USER_PROCESS or not pid_alive(fields[1]):
                continue
            user = fields[4].split(b"\0", 1)[0].decode("utf-8", "replace")
            line = fields[2].split(b"\0", 1)[0].decode("utf-8", "replace")
            found.append("%s on %s" % (user, line))
        return found
    return []


def collected(run_dir: str, payload: object) -> dict:
    """Record what a client has stored of the run: ``{"offsets": {spool: byte}, "outputs": bool}`` (offsets only
    grow; ``outputs`` stays true once a client downloaded the outputs the launch asked to keep)."""
    from .spools import SPOOLS

    if not isinstance(payload, dict) or not isinstance(payload.get("offsets", {}), dict):
        raise Refused("collected reads {\"offsets\": {...}, \"outputs\": true|false} on stdin")
    if not os.path.isdir(run_dir):
        raise Refused("no run directory %s" % run_dir, "the run was deleted on the host")
    path = os.path.join(run_dir, COLLECTED)
    with flock(os.path.join(run_dir, ".collected.lock")):
        now = read_json(path) or {"offsets": {}}
        offsets = dict(now.get("offsets") or {})
        for name, value in (payload.get("offsets") or {}).items():
            if name in SPOOLS and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                offsets[name] = max(int(offsets.get(name, 0)), value)
        now.update(offsets=offsets, outputs=bool(now.get("outputs") or payload.get("outputs")), at=time.time())
        write_json(path, now)
    return {"ok": True, "collected": now}


def _run_collected(run_dir: str, keep_outputs: bool) -> tuple:
    """(records collected, outputs collected) of an ended run."""
    from .spools import SPOOLS

    done = read_json(os.path.join(run_dir, COLLECTED)) or {}
    offsets = done.get("offsets") or {}
    records = True
    for name in SPOOLS:
        try:
            size = os.stat(os.path.join(run_dir, name)).st_size
        except OSError:
            continue
        if size > int(offsets.get(name) or 0):
            records = False
            break
    return records, (not keep_outputs) or bool(done.get("outputs"))


class Survey:
    """What keeps the host, looked at again on each call (ended runs are remembered: an end is final)."""

    def __init__(self, run_root: str):
        self.run_root = os.path.abspath(os.path.expanduser(run_root))
        self._ended: dict = {}  # run id -> (ended_at, keep_outputs, collected records and outputs)

    def look(self, policy: dict, now: float) -> dict:
        from .status import CONFIG, FINAL_STATES, runs_elsewhere
        from .supervisor import LAUNCH_WINDOW_S, reconcile

        active, uncollected, outputs, latest = [], [], [], 0.0
        runs = os.path.join(self.run_root, "runs")
        try:
            names = sorted(os.listdir(runs))
        except OSError:
            names = []
        terminate = policy.get("kind") == "terminate"
        for name in names:
            run_dir = os.path.join(runs, name)
            known = self._ended.get(name)
            if known is None:
                try:
                    status = reconcile(run_dir)
                except OSError:
                    status = None
                if status is None:
                    try:
                        fresh = now - os.stat(run_dir).st_mtime < LAUNCH_WINDOW_S
                    except OSError:
                        continue
                    if fresh:
                        active.append(name)  # being launched right now
                    continue
                if runs_elsewhere(status):
                    continue
                if status.get("state") not in FINAL_STATES:
                    active.append(name)
                    latest = now
                    continue
                config = read_json(os.path.join(run_dir, CONFIG)) or {}
                known = [float(status.get("ended_at") or status.get("updated_at") or 0.0),
                         bool(config.get("keep_outputs")), False, False]
                self._ended[name] = known
            latest = max(latest, known[0])
            if terminate and not (known[2] and known[3]):
                known[2], known[3] = _run_collected(run_dir, known[1])
                if not known[2]:
                    uncollected.append(name)
                elif not known[3]:
                    outputs.append(name)
        waiting = waiting_cells(queue_dir(self.run_root))
        if waiting:
            latest = now
        people = logins() if policy.get("count_logins", True) else []
        if people:
            latest = now
        return {"active": active, "waiting": waiting, "logins": people, "uncollected": uncollected,
                "outputs": outputs, "latest": latest}


def _reasons(seen: dict) -> list:
    """What keeps the host, in words."""
    words = []
    if seen["active"]:
        words.append("%d run%s not ended (%s)" % (len(seen["active"]), "" if len(seen["active"]) == 1 else "s",
                                                 ", ".join(seen["active"][:3])))
    if seen["waiting"]:
        words.append("%d queued cell%s wait" % (seen["waiting"], "" if seen["waiting"] == 1 else "s"))
    if seen["logins"]:
        words.append("logged in: %s" % ", ".join(seen["logins"][:3]))
    return words


def _collection(seen: dict) -> list:
    words = []
    if seen["uncollected"]:
        words.append("no client has collected every record of %s" % ", ".join(seen["uncollected"][:3]))
    if seen["outputs"]:
        words.append("the outputs to keep of %s are not downloaded yet" % ", ".join(seen["outputs"][:3]))
    return words


def _state(rdir: str) -> dict:
    return read_json(os.path.join(rdir, STATE)) or {}


def _update_state(rdir: str, **fields: object) -> dict:
    with flock(os.path.join(rdir, STATE_LOCK)):
        state = _state(rdir)
        state.update(fields)
        write_json(os.path.join(rdir, STATE), state)
    return state


def assess(run_root: str, survey: Optional[Survey] = None, now: Optional[float] = None) -> dict:
    """Where the release stands now: ``phase`` (off, busy, idle, collecting, due, released, failed, gave_up,
    cancelled), ``reasons`` in words, ``idle_since`` and ``release_at`` (epoch seconds), the last release's outcome."""
    rdir = release_dir(run_root)
    policy = read_json(os.path.join(rdir, POLICY))
    now = time.time() if now is None else now
    state = _state(rdir)
    out = {"ok": True, "policy": policy, "now": now, "watcher": lock_holder(rdir, WATCH_LOCK, WATCH_PID)
           if os.path.isdir(rdir) else None, "last": state.get("last"), "attempts": int(state.get("attempts") or 0),
           "cancelled_at": state.get("cancelled_at"), "released_at": state.get("released_at"),
           "reasons": [], "idle_since": None, "release_at": None}
    if not policy:
        out["phase"] = "off"
        return out
    seen = (survey or Survey(run_root)).look(policy, now)
    # Every run a client should collect (the reasons name three at most): a client that connects takes them.
    out.update(uncollected=seen["uncollected"], outputs_wanted=seen["outputs"])
    failed_at = float(state.get("failed_at") or 0.0)
    # The watcher keeps when it last saw the host kept (a cell that waited, a login, a run it saw running).
    seen["latest"] = max(seen["latest"], float(state.get("busy_at") or 0.0))
    idle_since = max(float(policy.get("set_at") or 0.0), _boot_time(), seen["latest"])
    reasons = _reasons(seen)
    out.update(reasons=reasons, idle_since=None if reasons else idle_since, last_used=seen["latest"])
    if reasons:
        out["phase"] = "busy"
        return out
    # Held (a cancel, a release done, or every try failed) until the host is used again: a run or a cell newer
    # than the hold.
    if out["cancelled_at"] and seen["latest"] <= float(out["cancelled_at"]):
        out["phase"] = "cancelled"
        return out
    if out["released_at"] and seen["latest"] <= float(out["released_at"]):
        out["phase"] = "released"
        return out
    if out["attempts"] >= MAX_ATTEMPTS and seen["latest"] <= failed_at:
        out["phase"] = "gave_up"
        return out
    release_at = idle_since + float(policy["after_s"])
    if out["attempts"] and seen["latest"] <= failed_at:  # the next try, after another idle period
        release_at = max(release_at, failed_at + max(float(policy["after_s"]), RETRY_S))
    out["release_at"] = release_at
    force = policy.get("destroy_uncollected_after_s")
    waiting = _collection(seen) if policy.get("kind") == "terminate" else []
    if waiting and (force is None or now < idle_since + max(float(policy["after_s"]), float(force))):
        out.update(phase="collecting", reasons=waiting)
        if force is not None:
            out["release_at"] = idle_since + max(float(policy["after_s"]), float(force))
        return out
    out["phase"] = "due" if now >= out["release_at"] else ("failed" if out["attempts"] else "idle")
    return out


def _fire(rdir: str, policy: dict, seen: dict) -> dict:
    """Run the host-side release action once; its outcome in state.json."""
    now = time.time()
    _update_state(rdir, releasing_at=now)
    log_path = os.path.join(rdir, RELEASE_LOG)
    with open(log_path, "ab") as log:
        log.write(("\n== %s: %s\n" % (time.strftime("%Y-%m-%d %H:%M:%S"), policy["command"])).encode())
        log.flush()
        try:
            proc = subprocess.run(["/bin/sh", "-c", policy["command"]], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=COMMAND_TIMEOUT_S,
                                  start_new_session=True)
            code, output = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as exc:
            code, output = None, (exc.output or b"") + b"\n(no end after %d s)" % COMMAND_TIMEOUT_S
        except OSError as exc:
            code, output = None, str(exc).encode()
        log.write(output)
    tail = output.decode("utf-8", "replace").strip().splitlines()[-5:]
    last = {"at": now, "command": policy["command"], "kind": policy["kind"], "exit_code": code,
            "output": tail, "idle_s": now - float(seen.get("idle_since") or now), "ok": code == 0}
    state = _state(rdir)
    if code == 0:
        return _update_state(rdir, last=last, released_at=time.time(), attempts=0, failed_at=None)
    return _update_state(rdir, last=last, attempts=int(state.get("attempts") or 0) + 1, failed_at=time.time())


def watch(run_root: str, lock_fd: Optional[int] = None, poll_s: float = POLL_S) -> int:
    """The watcher (``_release RUN_ROOT``): release the host when it has been idle long enough; ends when the
    policy is cleared."""
    rdir = release_dir(run_root)
    if lock_fd is None:
        lock_fd = os.open(os.path.join(rdir, WATCH_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    import fcntl

    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0
    with open(os.path.join(rdir, WATCH_PID), "w") as fh:
        fh.write("%d\n" % os.getpid())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    survey = Survey(run_root)
    while True:
        seen = assess(run_root, survey)
        if seen["phase"] == "off":
            os.close(lock_fd)
            return 0
        state = _state(rdir)
        holds = [float(state.get(k) or 0.0) for k in ("cancelled_at", "released_at", "failed_at")]
        used_again = {"cancelled_at": None, "released_at": None, "attempts": 0, "failed_at": None}
        if seen["phase"] == "busy":  # used again: a cancel, a release done or the failed tries hold no more
            state = _update_state(rdir, busy_at=time.time(), **(used_again if max(holds) else {}))
        elif max(holds) and float(seen.get("last_used") or 0.0) > max(holds):
            state = _update_state(rdir, **used_again)
        elif seen["phase"] == "due" and seen["policy"]["on"] == "host":
            _fire(rdir, seen["policy"], seen)
            continue
        if seen.get("phase") != state.get("phase"):
            _update_state(rdir, phase=seen["phase"], phase_at=time.time())
        time.sleep(poll_s)


def set_policy(run_root: str, payload: object, poll_s: Optional[float] = None) -> dict:
    """Keep the policy (or clear it) and make sure a watcher runs for it."""
    if not isinstance(payload, dict) or "policy" not in payload:
        raise Refused("release-set reads {\"policy\": {...} or null} on stdin", "send it as the client does")
    rdir = release_dir(run_root)
    path = os.path.join(rdir, POLICY)
    if payload["policy"] is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return assess(run_root)
    os.makedirs(rdir, mode=0o700, exist_ok=True)
    policy = check_policy(payload["policy"])
    old = read_json(path)
    if old and all(old.get(k) == policy.get(k) for k in policy if k != "set_at"):
        policy["set_at"] = old.get("set_at", policy["set_at"])  # the same policy sent again: the clock goes on
    else:
        _update_state(rdir, cancelled_at=None, released_at=None, attempts=0, failed_at=None)
    write_json(path, policy)
    if lock_holder(rdir, WATCH_LOCK, WATCH_PID) is None:
        args = ["_release", os.path.dirname(rdir)] + ([] if poll_s is None else ["--poll", str(poll_s)])
        start_holder(rdir, WATCH_LOCK, WATCH_PID, WATCH_LOG, args)
    return assess(run_root)


def ensure_watcher(run_root: str) -> None:
    """Start the watcher again where a policy is set and none runs (the machine was rebooted): ``launch`` and
    ``queue-add`` call it, so a host used again is watched again."""
    rdir = release_dir(run_root)
    if os.path.exists(os.path.join(rdir, POLICY)) and lock_holder(rdir, WATCH_LOCK, WATCH_PID) is None:
        start_holder(rdir, WATCH_LOCK, WATCH_PID, WATCH_LOG, ["_release", os.path.dirname(rdir)])


def cancel(run_root: str) -> dict:
    """Hold the release until the host is used again (or the policy is set again)."""
    rdir = release_dir(run_root)
    if not read_json(os.path.join(rdir, POLICY)):
        return assess(run_root)
    _update_state(rdir, cancelled_at=time.time())
    return assess(run_root)


def register(sub: argparse._SubParsersAction, answer: Callable[[dict], None],
             refuse: Callable[..., int]) -> None:
    """The release commands on the runner's command line."""

    def stdin_json() -> object:
        try:
            return json.loads(sys.stdin.buffer.read().decode("utf-8"))
        except ValueError as exc:
            raise Refused("what was sent on stdin is not whole JSON (%s)" % exc,
                          "send it again: the link may have dropped while it was sent") from None

    def run(func: Callable[[argparse.Namespace], dict]) -> Callable[[argparse.Namespace], int]:
        def command(args: argparse.Namespace) -> int:
            try:
                answer(func(args))
            except Refused as refused:
                return refuse(refused.error, refused.hint)
            return 0
        return command

    p = sub.add_parser("release-set", help="keep the release policy ({\"policy\": ...} on stdin, null clears it) and "
                                           "start the watcher that releases this host when idle")
    p.add_argument("run_root")
    p.add_argument("--poll", type=float, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=run(lambda a: set_policy(a.run_root, stdin_json(), a.poll)))
    p = sub.add_parser("release-status", help="where the release stands: phase, what keeps the host, when it "
                                              "releases, the last release's outcome")
    p.add_argument("run_root")
    p.set_defaults(func=run(lambda a: assess(a.run_root)))
    p = sub.add_parser("release-cancel", help="hold the release until the host is used again")
    p.add_argument("run_root")
    p.set_defaults(func=run(lambda a: cancel(a.run_root)))
    p = sub.add_parser("collected", help="a client stored the run's records up to these offsets (JSON on stdin)")
    p.add_argument("run_dir")
    p.set_defaults(func=run(lambda a: collected(os.path.abspath(a.run_dir), stdin_json())))
    p = sub.add_parser("_release")
    p.add_argument("run_root")
    p.add_argument("--lock-fd", type=int, default=None)
    p.add_argument("--poll", type=float, default=POLL_S)
    p.set_defaults(func=lambda a: watch(a.run_root, a.lock_fd, a.poll))
