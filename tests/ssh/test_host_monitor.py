"""HostMonitor over the real loopback sshd (tests/ssh/conftest.py) on this CPU host: snapshots over the target's
own connection, the callback on a worker, nothing of the sampler left on the host after stop(), the idle stop
when nobody looks, and a dropped connection reported and retried on the next acquire."""
import getpass
import os
import sys
import threading
import time

import pytest
from helpers.sampler_processes import samplers

from ddpgui.core.gpus.monitor import HostMonitor, MonitorError, snapshot_once
from ddpgui.core.targets.zipapp import build_runner

pytestmark = pytest.mark.slow
WAIT_S = 120.0  # the machine is shared and slow: generous


@pytest.fixture
def target(ssh_env, tmp_path):
    profile = ssh_env.profile("self", user=getpass.getuser(), python=sys.executable,
                              run_root=str(tmp_path / "run root ✓"))
    with ssh_env.target(tmp_path, profile) as t:
        t.deploy(build_runner())
        yield t


def _wait(condition, what, timeout=WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    pytest.fail(f"{what} within {timeout:.0f} s")


def test_snapshots_arrive_on_a_worker_and_stop_leaves_nothing_on_the_host(target):
    seen = []
    arrived = threading.Event()

    def on_snapshot(snapshot):
        seen.append((snapshot, threading.current_thread()))
        if len(seen) >= 2:
            arrived.set()

    monitor = HostMonitor("self", lambda: target, interval_s=0.5, on_snapshot=on_snapshot)
    runner = target.runner()[1]
    monitor.acquire()
    try:
        assert arrived.wait(WAIT_S), monitor.problem
        snapshot, thread = seen[-1]
        assert thread is not threading.main_thread() and thread.name == "host-monitor-self"
        assert snapshot.host == os.uname().nodename and snapshot.source == "none" and snapshot.gpus == ()
        assert snapshot.summary() == "no GPUs"
        cpu = snapshot.cpu
        assert cpu.cpu_count == os.cpu_count() and cpu.load_1m is not None and 0 < cpu.mem_used_mib < cpu.mem_total_mib
        assert cpu.top and all(top.pid > 0 and top.user for top in cpu.top)
        assert [s.seq for s, _ in seen[:2]] == [0, 1]
        assert monitor.latest is seen[-1][0] and monitor.skipped_lines == 0
        pids = samplers(runner)
        assert len(pids) == 1, pids  # one long-lived sampler on the host, over the one connection
        assert monitor.wait_snapshot(WAIT_S, after_seq=snapshot.seq).seq > snapshot.seq
    finally:
        monitor.stop()
    assert not monitor.running and monitor.problem is None
    _wait(lambda: not samplers(runner), "the sampler ends on the host once its stdin closed")
    assert target.connection.alive()  # the host's connection stays for everything else
    assert target.exec(["true"]).rc == 0


def test_it_samples_only_while_somebody_looks(target):
    monitor = HostMonitor("self", lambda: target, interval_s=0.5, grace_s=1.0)
    runner = target.runner()[1]
    monitor.acquire()
    monitor.acquire()
    try:
        monitor.wait_snapshot(WAIT_S)
        assert monitor.watchers == 2
        monitor.release()
        assert monitor.running and monitor.watchers == 1  # one still looks
        monitor.release()
        assert monitor.watchers == 0
        _wait(lambda: not monitor.running, "the sampler stops after the grace period")
        _wait(lambda: not samplers(runner), "nothing is left on the host")
        last = monitor.latest.seq
        monitor.acquire()  # somebody looks again: a new sampler
        assert monitor.wait_snapshot(WAIT_S, after_seq=None).seq >= 0
        _wait(lambda: len(samplers(runner)) == 1, "one sampler again")
        assert last >= 0
    finally:
        monitor.stop()
    _wait(lambda: not samplers(runner), "nothing is left on the host")


def test_a_watcher_coming_while_an_idle_stop_ends_the_sampler_gets_a_new_one(target):
    """The last watcher left (grace 0: the sampler ends at once) and a view looks again while the sampler is
    still ending: the new watcher must not be left with no sampler."""
    monitor = HostMonitor("self", lambda: target, interval_s=0.5, grace_s=0)
    runner = target.runner()[1]
    monitor.acquire()
    try:
        monitor.wait_snapshot(WAIT_S)
        releasing = threading.Thread(target=monitor.release)
        releasing.start()
        _wait(lambda: monitor._stopping or not releasing.is_alive(), "the idle stop begins")
        monitor.acquire()  # while the old sampler ends (or just after)
        releasing.join(WAIT_S)
        assert monitor.watchers == 1
        _wait(lambda: monitor.running, "a sampler runs for the new watcher")
        assert monitor.wait_snapshot(WAIT_S).seq >= 0
        _wait(lambda: len(samplers(runner)) == 1, "one sampler on the host")
    finally:
        monitor.stop()
    assert not monitor.running
    _wait(lambda: not samplers(runner), "nothing is left on the host")


def test_a_dropped_connection_is_reported_and_retried_on_the_next_acquire(ssh_env, target):
    problems = []
    monitor = HostMonitor("self", lambda: target, interval_s=0.5, on_problem=problems.append)
    runner = target.runner()[1]
    monitor.acquire()
    try:
        monitor.wait_snapshot(WAIT_S)
        assert ssh_env.server.drop_connections() > 0
        _wait(lambda: problems, "the drop is reported")
        problem = problems[0]
        assert isinstance(problem, MonitorError) and monitor.problem is problem
        assert "the host monitor on self stopped: the connection to" in str(problem) and "dropped" in str(problem)
        assert "it starts again when the host is looked at again" in problem.hint
        with pytest.raises(MonitorError):
            monitor.wait_snapshot(WAIT_S, after_seq=monitor.latest.seq)
        _wait(lambda: not monitor.running, "the worker ends")
        _wait(lambda: not samplers(runner), "the sampler ends with its connection")
        monitor.release()
        monitor.acquire()  # looked at again: the connection is reopened, sampling goes on
        assert monitor.problem is None
        assert monitor.wait_snapshot(WAIT_S, after_seq=None).seq == 0
    finally:
        monitor.stop()
    _wait(lambda: not samplers(runner), "nothing is left on the host")


def test_one_snapshot_for_a_launch_leaves_no_sampler(target):
    snapshot = snapshot_once("self", lambda: target)
    assert snapshot.seq == 0 and snapshot.cpu is not None and snapshot.summary() == "no GPUs"
    _wait(lambda: not samplers(target.runner()[1]), "the one-shot sampler ends")


def test_one_monitor_per_host_over_the_pools_connection(target):
    from ddpgui.core.gpus.monitor import HostMonitors
    from ddpgui.core.targets.pool import TargetPool

    opened = []
    pool = TargetPool(lambda host: opened.append(host) or target, build_runner())
    monitors = HostMonitors(pool, interval_s=0.5)
    try:
        monitor = monitors.get("self")
        assert monitors.get("self") is monitor and monitor.watchers == 0 and not monitor.running
        monitor.acquire()
        assert monitor.wait_snapshot(WAIT_S).cpu is not None
        assert opened == ["self"]  # the pool's one connection to the host
    finally:
        monitors.close()
    assert not monitor.running
    _wait(lambda: not samplers(target.runner()[1]), "nothing is left on the host")
