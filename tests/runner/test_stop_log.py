"""A stop leaves no Python traceback in the run's logs; a crash still leaves its whole traceback.

Real supervisor, real torchrun (gloo on CPU), stopped through the real stop path (``runner stop``: SIGTERM to the
supervisor, which ends torchrun and its ranks).
"""
import os
import signal

import pytest
from helpers.spools import wait_for

from ddpgui.core.runs.config import make_config
from ddpgui.core.targets.local import LocalTarget
from ddpgui.core.targets.zipapp import build_runner
from remote_runner.status import FINAL_STATES, read_status

pytestmark = pytest.mark.slow


@pytest.fixture
def target(tmp_path):
    t = LocalTarget(run_root=str(tmp_path / "root"))
    t.deploy(build_runner(tmp_path / "pkg"))
    return t


def _stderr(run_dir):
    with open(os.path.join(run_dir, "stderr.log"), encoding="utf-8", errors="replace") as fh:
        return fh.read()


def _training(target, settings):
    """Launch and wait until the ranks have written metrics (torchrun and its workers all run by then)."""
    run_dir = target.launch(make_config(settings)).run_dir
    assert wait_for(lambda: os.path.exists(os.path.join(run_dir, "metrics.jsonl")), 180), _stderr(run_dir)
    return run_dir


def _ended(run_dir):
    assert wait_for(lambda: (read_status(run_dir) or {}).get("state") in FINAL_STATES, 180), read_status(run_dir)
    return read_status(run_dir)


def test_a_users_stop_leaves_no_traceback_in_the_log(target):
    run_dir = _training(target, {"workload": "mlp", "nproc_per_node": 2, "minutes": 10.0, "stop_grace_s": 10.0})
    status = target.stop(run_dir)
    assert status["state"] == "stopped" and status["remaining_pids"] == []
    log = _stderr(run_dir)
    assert "Traceback" not in log and "SignalException" not in log, log
    assert "torchrun ended by SIGTERM" in log, log  # what happened, in one line


def test_an_outside_sigterm_to_torchrun_is_one_line_and_named_in_the_outcome(target):
    run_dir = _training(target, {"workload": "mlp", "nproc_per_node": 1, "minutes": 10.0})
    torchrun = read_status(run_dir)["torchrun_pid"]
    os.kill(torchrun, signal.SIGTERM)  # a host shutdown, a scheduler, someone's kill: not the app's stop
    status = _ended(run_dir)
    log = _stderr(run_dir)
    assert "Traceback" not in log and "torchrun ended by SIGTERM" in log, log
    assert status["state"] == "failed" and status["failure"] == "stopped", status
    assert "SIGTERM from outside the app" in status["message"]


def test_a_crash_keeps_its_whole_traceback(target):
    run_dir = _training(target, {"workload": "linear", "nproc_per_node": 2, "steps": 500,
                                 "env": {"DDPGUI_TEST_FAIL_RANK": "1", "DDPGUI_TEST_FAIL_STEP": "5"}})
    status = _ended(run_dir)
    assert status["state"] == "failed" and status["failed_rank"] == 1, status
    log = _stderr(run_dir)
    # the rank's own traceback down to its exception, and torchrun's report of the failed child
    assert "Traceback (most recent call last):" in log and "injected failure" in log, log
    assert "ChildFailedError" in log and "torchrun ended by" not in log, log
