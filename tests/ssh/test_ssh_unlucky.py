"""Unlucky hosts over the real loopback sshd: a disk that fills up, a run directory removed, a follow that keeps
failing on the host.  Each ends with its reason, in bounded time, without a storm of SSH logins.

These log in as the user running the tests (root on CI), whose Python has torch, as test_ssh_launch does.
"""
import getpass
import json
import os
import re
import shutil
import sys

import pytest
from helpers.run_processes import kill_run_processes
from helpers.small_disk import FILL_SCRIPT, small_tmpfs
from helpers.spools import wait_for

from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import RunStore
from remote_runner.status import read_status

pytestmark = pytest.mark.slow

DISK_FULL = re.compile(r"disk is full \((/[^,]+), (\d+) bytes free\)")


def _logins(ssh_env) -> int:
    return ssh_env.server.log.read_text(errors="replace").count("Accepted publickey")


@pytest.fixture
def ssh_manager(ssh_env, tmp_path):
    """(manager, run root): a RunManager whose host "box" is the loopback sshd, logged in as ourselves."""
    made = []

    def make(run_root):
        profile = ssh_env.profile("box", user=getpass.getuser(), python=sys.executable, run_root=str(run_root))
        hosts = ssh_env.store(tmp_path, profile)
        store = RunStore(tmp_path / f"runs{len(made)}.sqlite3")
        manager = RunManager(store, hosts, lambda name: ssh_env.target(tmp_path, profile, store=hosts))
        made.append((manager, store))
        return manager

    yield make
    for manager, store in made:
        manager.close()
        store.close()


def remove_live_dir(run_dir):
    """Remove the directory of a run that still writes into it: moved out of the way at once (rm -rf would race
    the files the run keeps creating), deleted once its processes are ended."""
    os.rename(run_dir, run_dir + ".removed")


def test_disk_full_over_ssh_ends_failed_once_and_logs_in_a_few_times(ssh_env, ssh_manager, tmp_path):
    with small_tmpfs(tmp_path / "small disk") as disk:
        manager = ssh_manager(disk / "root")
        script = tmp_path / "fill"
        script.mkdir()
        (script / "train.py").write_text(FILL_SCRIPT)
        before = _logins(ssh_env)
        record = manager.launch("box", {"mode": "script", "script": {"dir": str(script), "entry": "train.py"},
                                        "nproc_per_node": 1, "device": "cpu", "backend": "gloo"})
        final = manager.wait(record.id, timeout=240)
        assert (final.state, final.failure) == ("failed", "disk_full"), (final.message, final.hint)
        path, free = DISK_FULL.search(final.message).groups()
        assert path.startswith(str(disk)) and int(free) < 64 << 10
        assert [e.get("event") for e in manager.store.events(record.id)].count("failed") == 1
        stopped = manager.stop(record.id)  # the runner answers on the full disk; the run stays as it ended
        assert stopped.state == "failed" and stopped.failure == "disk_full"
        manager.close()
        assert _logins(ssh_env) - before <= 2  # one connection per host (and one spare for a reconnect)


def test_run_directory_removed_mid_follow_over_ssh(ssh_env, ssh_manager, tmp_path):
    manager = ssh_manager(tmp_path / "root")
    record = manager.launch("box", {"workload": "linear", "steps": 100000, "nproc_per_node": 1, "device": "cpu",
                                    "backend": "gloo", "log_every": 1})
    run_dir = record.run_dirs[0]
    assert wait_for(lambda: manager.store.get_run(record.id).last_step, timeout=180)
    status = read_status(run_dir)
    try:
        remove_live_dir(run_dir)
        final = manager.wait(record.id, timeout=120)
    finally:
        kill_run_processes(status, run_dir, run_dir + ".removed")
        shutil.rmtree(run_dir + ".removed", ignore_errors=True)
    assert (final.state, final.failure) == ("failed", "run_dir_missing")
    assert final.message == f"the run's directory {run_dir} is gone from box"
    assert manager.store.records(record.id)  # what arrived before is kept
    stopped = manager.stop(record.id)
    assert stopped.state == "failed"


def test_a_follow_that_keeps_failing_on_the_host_ends_the_run_with_its_reason(ssh_env, ssh_manager, tmp_path):
    """status.json replaced by a directory: the runner's follow cannot read it.  It used to die with a traceback
    the client never saw and be reconnected every 0.2 s forever (a new SSH login each time)."""
    manager = ssh_manager(tmp_path / "root")
    record = manager.launch("box", {"workload": "linear", "steps": 100000, "nproc_per_node": 1, "device": "cpu",
                                    "backend": "gloo", "log_every": 1}, follow=False)
    run_dir = record.run_dirs[0]
    assert wait_for(lambda: (read_status(run_dir) or {}).get("state") == "running", timeout=180)
    status = read_status(run_dir)
    try:
        os.unlink(os.path.join(run_dir, "status.json"))
        os.mkdir(os.path.join(run_dir, "status.json"))
        before = _logins(ssh_env)
        manager.follow(record.id)
        final = manager.wait(record.id, timeout=120)
        logins = _logins(ssh_env) - before
    finally:
        kill_run_processes(status, run_dir)
    assert final.state == "failed" and final.failure == "follow_failed", final
    assert "failed 3 times in a row" in final.message and "Is a directory" in final.message
    assert "status.json" in final.message
    assert logins <= 1, logins  # the link was fine: no reconnect at all
    assert json.dumps(final.message)  # a plain message, not a traceback
    assert "Traceback" not in final.message
