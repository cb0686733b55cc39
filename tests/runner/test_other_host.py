"""A run root shared by several machines (an NFS home): the runner never judges or signals another host's pid.

The other machine is faked by rewriting a real run directory's status.json with another hostname; the
runner's own ``status``, ``stop``, ``follow`` and ``runs`` commands are then called for real.
"""
import json
import os
import socket
import subprocess
import sys

import pytest

from ddpgui.core.runs.config import make_config
from ddpgui.core.runs.protocol import End
from ddpgui.core.targets.base import TargetError
from ddpgui.core.targets.local import LocalTarget
from ddpgui.core.targets.zipapp import build_runner
from remote_runner.status import read_status, write_status

pytestmark = pytest.mark.slow

ELSEWHERE = "gpu-node-17.cluster.example"


@pytest.fixture
def target(tmp_path):
    t = LocalTarget(run_root=str(tmp_path / "root"))
    t.deploy(build_runner(tmp_path / "pkg"))
    return t


@pytest.fixture
def ended_run(target):
    """A real run directory whose run has finished here."""
    run_dir = target.launch(make_config({"workload": "linear", "steps": 3, "nproc_per_node": 1})).run_dir
    ends = [m for m in target.follow(run_dir) if isinstance(m, End)]
    assert ends and ends[0].status["state"] == "finished"
    return run_dir


@pytest.fixture
def local_process():
    """A live process of this host that is no part of any run (its pid stands for the other host's)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _as_if_running_on(run_dir: str, host: str, pid: int) -> None:
    write_status(run_dir, state="running", host=host, pid=pid, torchrun_pid=pid, ended_at=None, exit_code=None)


def test_status_and_follow_do_not_declare_another_hosts_run_dead(target, ended_run):
    assert ELSEWHERE != socket.gethostname()
    _as_if_running_on(ended_run, ELSEWHERE, _dead_pid())  # no such pid here; it says nothing about the other host
    status = target.status(ended_run)
    assert status["state"] == "running" and status["host"] == ELSEWHERE
    assert read_status(ended_run)["state"] == "running"
    end = [m for m in target.follow(ended_run, once=True) if isinstance(m, End)][0]
    assert end.status["state"] == "running" and not end.ended
    listed = [r for r in target.list_runs()["runs"] if r["run_dir"] == ended_run]
    assert listed[0]["status"]["state"] == "running"
    events = [json.loads(line)["event"] for line in open(os.path.join(ended_run, "events.jsonl"))]
    assert events[-1] == "finished"  # no "failed" event was added for the other host's run

    # The same status judged on its own host: the supervisor is gone, so the run has ended (as its events say).
    _as_if_running_on(ended_run, socket.gethostname(), _dead_pid())
    assert target.status(ended_run)["state"] == "finished"


def test_stop_refuses_and_signals_nothing_for_another_hosts_run(target, ended_run, local_process):
    _as_if_running_on(ended_run, ELSEWHERE, local_process.pid)
    with pytest.raises(TargetError) as caught:
        target.stop(ended_run)
    assert f"runs on host {ELSEWHERE}, not on this host ({socket.gethostname()})" in str(caught.value)
    assert ELSEWHERE in caught.value.hint
    assert local_process.poll() is None  # not signalled
    assert read_status(ended_run)["state"] == "running"

    # Once the other host recorded its end, stop has nothing to do here and says so without signalling.
    write_status(ended_run, state="stopped", ended_at=1.0)
    assert target.stop(ended_run)["remaining_pids"] == []
    assert local_process.poll() is None
