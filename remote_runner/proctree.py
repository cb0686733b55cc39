"""The run's process tree: find every process of a run and end them all.

torchrun starts each worker in a session of its own, so a signal to the
supervisor's process group does not reach the ranks; we walk parent links
instead, and also read the pid files the ranks write, which still find a rank
whose parents have died.
"""
import atexit
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable

from .fsutil import pid_alive

PIDS_DIR = "pids"


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


def run_processes(run_dir: str, roots: Iterable[int]) -> list[int]:
    """Every live process of the run: below ``roots`` and below the ranks' recorded pids.

    A recorded rank pid counts only while its command line still names the run
    directory, so a recycled pid is never touched.
    """
    ranks = [pid for pid in rank_pids(run_dir) if _cmdline_mentions(pid, run_dir)]
    return descendants(list(roots) + ranks)


def _cmdline_mentions(pid: int, text: str) -> bool:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return text.encode() in fh.read()
    except OSError:
        return not os.path.isdir("/proc/self") and pid_alive(pid)


def signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


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


def terminate(pids: Iterable[int], grace_s: float) -> list[int]:
    """SIGTERM, then SIGKILL whatever is left after ``grace_s``; returns the pids that needed SIGKILL."""
    pids = list(pids)
    signal_all(pids, signal.SIGTERM)
    left = wait_gone(pids, grace_s)
    if left:
        signal_all(left, signal.SIGKILL)
        wait_gone(left, 5.0)
    return left


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
