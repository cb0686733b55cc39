"""``stop`` leaves nothing, not even what escaped the run's process tree.

A user's script (real supervisor, real torchrun with gloo on CPU, launched and stopped through the runner's
``launch`` and ``stop`` on "This computer", as the app's LocalTarget runs them) starts two daemons the way a
script does it: fork, ``setsid``, fork again.  One is ``sleep``, the other a Python loop that ignores SIGTERM.
The tree walk cannot find them (their parent is gone, their session is their own); the run's marker
(``DDPGUI_RUN`` in the environment they inherited) does.
"""
import os
import signal
import subprocess

import pytest
from helpers.spools import wait_for

from ddpgui.core.runs.config import make_config
from ddpgui.core.targets.local import LocalTarget
from ddpgui.core.targets.zipapp import build_runner
from remote_runner import proctree
from remote_runner.status import read_status

#: Generous: two busy cores, torch imported by torchrun before the script starts.
START_TIMEOUT_S = 240

#: The user's script: two daemons that escaped the process tree, then it trains until stopped.
ESCAPING = r'''
import os
import sys
import time

LOOP = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1] + ".tmp", "w") as fh:
    fh.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(1)
"""


def daemon(argv, pid_file=None):
    """fork, setsid, fork: the grandchild (written to ``pid_file`` first) runs argv, its parent and session gone."""
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            if pid_file:
                fd = os.open(pid_file + ".tmp", os.O_WRONLY | os.O_CREAT, 0o600)
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                os.rename(pid_file + ".tmp", pid_file)
            os.execvp(argv[0], argv)
        os._exit(0)
    os.waitpid(child, 0)


out = sys.argv[1]
daemon(["sleep", "86400"], os.path.join(out, "sleep.pid"))
daemon([sys.executable, "-c", LOOP, os.path.join(out, "loop.pid")])
step = 0
while True:
    step += 1
    print("step %d loss %.3f" % (step, 1.0 / step), flush=True)
    time.sleep(0.5)
'''


def _stat(pid):
    """(state, start time) of ``pid`` from /proc, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return fields[0], fields[19]


def _alive(pid, started):
    """Whether the process ``pid`` that started at ``started`` still runs (a zombie or a new pid is not it)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != b"Z" and stat[1] == started


def _marker_of(pid):
    with open(f"/proc/{pid}/environ", "rb") as fh:
        entries = fh.read().split(b"\0")
    return next((e.split(b"=", 1)[1].decode() for e in entries if e.startswith(b"DDPGUI_RUN=")), None)


def _carrying(marker):
    """Every live process on the host whose environment holds DDPGUI_RUN=<marker> exactly."""
    entry = b"DDPGUI_RUN=" + marker.encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if entry in fh.read().split(b"\0") and _stat(name)[0] != b"Z":
                    found.append(int(name))
        except (OSError, TypeError):
            continue
    return found


def _read_pid(path):
    try:
        with open(path) as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return None


@pytest.fixture
def target(tmp_path):
    t = LocalTarget(run_root=str(tmp_path / "root"))
    t.deploy(build_runner(tmp_path / "pkg"))
    return t


@pytest.mark.slow
def test_stop_ends_the_daemons_a_script_started_and_names_them_in_the_log(target, tmp_path):
    script_dir, out = tmp_path / "escaping", tmp_path / "out"
    script_dir.mkdir()
    out.mkdir()
    (script_dir / "train.py").write_text(ESCAPING)
    run_dir = target.launch(make_config({
        "mode": "script", "nproc_per_node": 1, "backend": "gloo", "stop_grace_s": 3.0,
        "script": {"dir": str(script_dir), "entry": "train.py", "args": [str(out)]}})).run_dir
    sleep_file, loop_file = str(out / "sleep.pid"), str(out / "loop.pid")

    def daemons_up():
        sleep_pid = _read_pid(sleep_file)
        if sleep_pid is None or _read_pid(loop_file) is None:
            return False
        with open(f"/proc/{sleep_pid}/cmdline", "rb") as fh:
            return fh.read().startswith(b"sleep\0")  # exec'd (its pid file is written just before)

    started = {}
    try:
        assert wait_for(daemons_up, START_TIMEOUT_S), open(os.path.join(run_dir, "stderr.log")).read()[-3000:]
        sleep_pid, loop_pid = _read_pid(sleep_file), _read_pid(loop_file)
        started = {pid: _stat(pid)[1] for pid in (sleep_pid, loop_pid)}
        supervisor = read_status(run_dir)["pid"]
        for pid in (sleep_pid, loop_pid):  # out of the run's tree and out of its sessions
            assert pid not in proctree.descendants([supervisor])
            assert os.getsid(pid) not in (os.getsid(supervisor), os.getsid(read_status(run_dir)["torchrun_pid"]))
        inherited = {_marker_of(sleep_pid), _marker_of(loop_pid)}

        ended = target.stop(run_dir)  # the runner's stop, as `ddpgui stop` runs it on the host

        assert ended["state"] == "stopped" and ended["remaining_pids"] == [], ended
        assert not _alive(sleep_pid, started[sleep_pid]), "the escaped sleep outlived the stop"
        assert not _alive(loop_pid, started[loop_pid]), "the escaped loop that ignores SIGTERM outlived the stop"
        with open(os.path.join(run_dir, "stderr.log"), encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
        stop_lines = [line for line in lines if line.startswith("==> ddpgui stop: ")]
        assert f"==> ddpgui stop: SIGTERM ended pid {sleep_pid} (sleep 86400)" in stop_lines, stop_lines
        loop_line = [line for line in stop_lines if f" pid {loop_pid} (" in line]
        # its command on one line: the -c code by its first line
        assert len(loop_line) == 1 and f" -c 'import os, signal, sys, time ...' {loop_file})" in loop_line[0], stop_lines
        assert loop_line[0].startswith("==> ddpgui stop: SIGKILL ended pid "), stop_lines
        assert loop_line[0].endswith(": still running 3 s after SIGTERM"), loop_line
        marker = read_status(run_dir)["run_marker"]
        assert inherited == {marker}  # both daemons carried the run's own marker
        assert _carrying(marker) == []
    finally:  # whatever the outcome, this test leaves no daemon behind
        for pid, start in started.items():
            if _alive(pid, start):
                os.kill(pid, signal.SIGKILL)


def _sleeping(value, **popen):
    return subprocess.Popen(["sleep", "600"], env=dict(os.environ, DDPGUI_RUN=value), **popen)


def test_the_marker_matches_exactly():
    marker = proctree.new_marker("run-1")
    procs = {name: _sleeping(value) for name, value in
             (("own", marker), ("longer", marker + "0"), ("shorter", marker[:-1]),
              ("other run", proctree.new_marker("run-1")))}
    try:
        found = proctree.marked_processes(marker)
        assert procs["own"].pid in found
        assert [name for name, p in procs.items() if p.pid in found] == ["own"]
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def test_another_users_process_is_never_touched():
    if os.getuid() != 0:
        pytest.skip("starting a process as another user (nobody) needs root; CI runs as root")
    marker = proctree.new_marker("run-1")
    own, other = _sleeping(marker), _sleeping(marker, user="nobody")
    try:
        assert _marker_of(other.pid) == marker  # readable here (root): only the uid check keeps it out
        found = proctree.marked_processes(marker)
        assert own.pid in found and other.pid not in found
    finally:
        for p in (own, other):
            p.kill()
            p.wait()
