"""The run's process tree: find every process of a run and end them all.

torchrun starts each worker in a session of its own, so a signal to the
supervisor's process group does not reach the ranks; we walk parent links
instead, and also read the pid files the ranks write, which still find a rank
whose parents have died.  A process that left the tree on purpose (a double
fork and ``setsid``: a daemon the user's script started) is found by the run's
marker, ``DDPGUI_RUN=<run id>.<token>`` in its environment, which every process
the supervisor starts inherits (docs/PROTOCOL.md, "Stopping a run").
"""
import atexit
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from typing import Optional

from .fsutil import pid_alive
from .spools import STDERR
from .status import read_status

PIDS_DIR = "pids"
#: The environment variable that marks every process of a run (its value: status.json's ``run_marker``).
RUN_MARKER = "DDPGUI_RUN"
#: The longest command line a stop's log line quotes.
COMMAND_CHARS = 200


def _parent_map() -> dict[int, int]:
    """pid -> parent pid for every process on the host."""
    parents = {}
    if os.path.isdir("/proc/self"):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % entry, "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != b"Z":
                parents[int(entry)] = int(fields[1])
        return parents
    out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,stat="], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and not parts[2].startswith("Z"):
            parents[int(parts[0])] = int(parts[1])
    return parents


def descendants(roots: Iterable[int]) -> list[int]:
    """Every live process below ``roots`` (the roots themselves included when alive)."""
    parents = _parent_map()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = [pid for pid in roots if pid in parents]
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, ()))
    return sorted(found)


def rank_pids(run_dir: str) -> list[int]:
    """The pids the ranks recorded in ``run_dir/pids`` (live or not)."""
    pids = []
    try:
        names = os.listdir(os.path.join(run_dir, PIDS_DIR))
    except FileNotFoundError:
        return []
    for name in names:
        try:
            with open(os.path.join(run_dir, PIDS_DIR, name)) as fh:
                pids.append(int(fh.read().strip()))
        except (OSError, ValueError):
            continue
    return pids


def new_marker(run_id: Optional[str]) -> str:
    """A run's marker: its id (for a person reading ``/proc``) and a random token (no two runs share one)."""
    return "%s.%s" % (run_id or "run", secrets.token_hex(8))


def run_marker(run_dir: str) -> Optional[str]:
    """The marker the run's supervisor gave its processes (status.json's ``run_marker``), None before it did."""
    return (read_status(run_dir) or {}).get("run_marker")


def marked_processes(marker: Optional[str]) -> list[int]:
    """This user's processes whose environment holds exactly ``DDPGUI_RUN=<marker>`` (never this process).

    Other users' processes are skipped unread.  A process that rewrote its environment
    (``clearenv``, or started with an empty one) carries no marker any more.  Without
    ``/proc`` this finds nothing: the tree walk alone remains.
    """
    if not marker or not os.path.isdir("/proc/self"):
        return []
    entry = ("%s=%s" % (RUN_MARKER, marker)).encode()
    uid, me = os.getuid(), os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if os.stat("/proc/" + name).st_uid != uid:
                continue
            with open("/proc/%s/environ" % name, "rb") as fh:
                environ = fh.read()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if entry in environ.split(b"\0"):
            found.append(int(name))
    return found


def run_processes(run_dir: str, roots: Iterable[int]) -> list[int]:
    """Every live process of the run but this one: below ``roots``, below the ranks' recorded pids, and every
    process that carries the run's marker (with whatever is below it).

    A recorded rank pid counts only while its command line still names the run
    directory, so a recycled pid is never touched.
    """
    ranks = [pid for pid in rank_pids(run_dir) if _cmdline_mentions(pid, run_dir)]
    marked = marked_processes(run_marker(run_dir))
    return [pid for pid in descendants(list(roots) + ranks + marked) if pid != os.getpid()]


def command_of(pid: int) -> str:
    """The command line of ``pid`` on one line for a log ("?" when it cannot be read), at most COMMAND_CHARS long.

    An argument of several lines (the code of ``python -c``) is shown by its first line and "...".
    """
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            argv = fh.read().decode("utf-8", "replace").split("\0")[:-1]
        if not argv:  # a kernel thread, or a process that blanked its arguments
            with open("/proc/%d/comm" % pid, "rb") as fh:
                argv = ["[%s]" % fh.read().decode("utf-8", "replace").strip()]
    except OSError:
        return "?"
    words = []
    for arg in argv:
        lines = [line for line in arg.splitlines() if line.strip()]
        words.append("'%s ...'" % lines[0].strip() if len(lines) > 1 else " ".join(arg.split()))
    text = " ".join(words)
    return text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS - 3] + "..."


def _cmdline_mentions(pid: int, text: str) -> bool:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return text.encode() in fh.read()
    except OSError:
        return not os.path.isdir("/proc/self") and pid_alive(pid)


def signal_all(pids: Iterable[int], sig: int) -> list[int]:
    """Send ``sig`` to each of ``pids``; returns those it reached."""
    reached = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            reached.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return reached


def wait_gone(pids: Iterable[int], timeout_s: float) -> list[int]:
    """Wait until none of ``pids`` is alive; returns those still alive at the deadline."""
    pids = list(pids)
    deadline = time.monotonic() + timeout_s
    while True:
        alive = set(descendants(pids)) & set(pids)
        if not alive or time.monotonic() >= deadline:
            return sorted(alive)
        time.sleep(0.05)


def end_process(proc: subprocess.Popen, grace_s: float) -> None:
    """End a child we started: SIGTERM, SIGKILL after ``grace_s``, and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def end_run_processes(run_dir: str, roots: Iterable[int], grace_s: float, why: str) -> list[int]:
    """End every process of the run (:func:`run_processes` of ``roots``): SIGTERM to all, SIGKILL after ``grace_s``
    to those still there and to any that appeared meanwhile.  Each process signalled gets one line in the run's
    stderr.log, ``==> ddpgui WHY: ...`` with its pid, its command and what ended it.  Returns the pids still
    alive at the end (a process stuck in the kernel)."""
    pids = run_processes(run_dir, roots)
    if not pids:
        return []
    commands = {pid: command_of(pid) for pid in pids}
    termed = signal_all(pids, signal.SIGTERM)
    left = wait_gone(termed, grace_s)
    late = [pid for pid in run_processes(run_dir, roots) if pid not in commands]
    commands.update((pid, command_of(pid)) for pid in late)
    killed = signal_all(left + late, signal.SIGKILL)
    stuck = wait_gone(killed, 5.0) if killed else []
    lines = []
    for pid in termed:
        if pid not in left:
            lines.append("SIGTERM ended pid %d (%s)" % (pid, commands[pid]))
    for pid in killed:
        after = "still running %g s after SIGTERM" % grace_s if pid in termed else "started during the stop"
        ending = "SIGKILL did not end" if pid in stuck else "SIGKILL ended"
        lines.append("%s pid %d (%s): %s" % (ending, pid, commands[pid], after))
    _log(run_dir, ["==> ddpgui %s: %s" % (why, line) for line in lines])
    return stuck


def _log(run_dir: str, lines: list[str]) -> None:
    """Append ``lines`` to the run's stderr.log (one write); a full disk or a removed directory loses them."""
    if not lines:
        return
    try:
        with open(os.path.join(run_dir, STDERR), "ab") as fh:
            fh.write("".join(line + "\n" for line in lines).encode("utf-8", "replace"))
    except OSError:
        pass


def exit_without_finalizing(code: int) -> None:
    """Leave this rank with ``code`` the way Python would, minus the interpreter's teardown.

    Gloo's worker threads can still hold tensors (through DDP's reducer) after
    destroy_process_group; destroying them while Python is torn down aborts the rank now
    and then ("terminate called without an active exception", SIGABRT) after a run that
    finished.  So we do what Py_FinalizeEx does first -- wait for non-daemon threads (a
    checkpoint being written), run atexit handlers (logging, wandb), flush the files the
    script left open (``open("log.txt", "w")`` never closed: the teardown would have flushed
    them as it finalized them) and the standard streams -- and then ``os._exit``.
    """
    try:
        wait_for_threads = getattr(threading, "_shutdown", None)
        if wait_for_threads is not None:
            wait_for_threads()
        atexit._run_exitfuncs()
    finally:
        _flush_open_files()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed or broken stream must not keep the rank alive
                pass
        os._exit(code)


def _flush_open_files() -> None:
    """Flush every open buffered file of this process (what finalizing them at teardown would write)."""
    import gc
    import io

    kinds = (io.BufferedWriter, io.BufferedRandom, io.TextIOWrapper)
    try:  # type(), not isinstance(): that would read __class__ of every object (torch's deprecated ones warn)
        files = [obj for obj in gc.get_objects() if type(obj) in kinds]
    except Exception:
        return
    for fh in files:
        try:
            if not fh.closed and fh.writable():
                fh.flush()
        except Exception:  # a broken pipe, a full disk: what the teardown would have lost too
            pass
