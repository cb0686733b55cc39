"""Stall detection on real runs: a user's script (tests/fixtures/scripts/stalling) launched on this computer
through the RunManager (real supervisor, real torchrun, real store), watched by a StallWatch fed from the
records as they arrive, with thresholds made small for the test."""
import os
import time

import pytest

from ddpgui.core.hosts import HostStore
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.runs.stall_watch import StallWatch
from ddpgui.core.runs.stalls import ENDED, PHASE, StallPolicy
from ddpgui.core.store import RunStore
from ddpgui.core.targets.factory import open_target

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STALLING = os.path.join(REPO, "tests", "fixtures", "scripts", "stalling")
#: Generous: two busy cores, torch imported by torchrun and the rank.
RUN_TIMEOUT_S = 300


@pytest.fixture
def manager(tmp_path):
    hosts = HostStore(tmp_path / "hosts.json")
    store = RunStore(tmp_path / "runs.sqlite3")
    m = RunManager(store, hosts, lambda name: open_target(name, hosts))
    yield m
    m.close()
    store.close()


def launch(manager, *args):
    return manager.launch("local", {"mode": "script", "nproc_per_node": 1,
                                    "script": {"dir": STALLING, "entry": "train.py", "args": list(args)}})


def watch_until_ended(manager, watch, run_id, on_check=None):
    """check() every 0.25 s until the run has ended; returns [(time, decision)] of every check."""
    seen = []
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        decision = watch.check().get(run_id)
        if decision is not None:
            seen.append((time.time(), decision))
            if on_check is not None:
                on_check(decision)
        record = manager.store.get_run(run_id)
        if not record.active and (decision is None or decision.state == ENDED):
            return seen
        time.sleep(0.25)
    pytest.fail(f"run {run_id} did not end within {RUN_TIMEOUT_S} s: {seen[-1][1] if seen else None}")


def test_a_script_that_sleeps_mid_run_is_flagged_during_the_sleep_and_cleared_after(manager):
    changes, late = [], []
    policy = StallPolicy(silence_factor=5, min_silence_s=3)
    watch = StallWatch(manager, policy, on_change=lambda run_id, d: changes.append(d))

    def start_a_late_watch(decision):  # as an app started mid-run would: seeded from the store
        if not late and (manager.store.get_run(record.id).last_step or 0) >= 5:
            late.append(StallWatch(manager, policy))
            late[0].watch(record.id)
        elif late and record.id in late[0].check():  # (it stops watching the run once it has reported its end)
            late.append(late[0].decision(record.id))

    try:
        record = launch(manager, "--steps=8", "--stall=12", "--eval=12", "--step_s=0.25")
        seen = watch_until_ended(manager, watch, record.id, on_check=start_a_late_watch)
    finally:
        watch.close()
        if late:
            late[0].close()
    final = manager.store.get_run(record.id)
    assert final.state == "finished", (final.message, manager.store.log_tail(record.id, "stderr.log")[-2000:])
    steps = {m["step"]: m for m in manager.store.records(record.id)}
    assert sorted(steps) == list(range(1, 25))
    # the silent sleep after step 8: "stalled?", silent since step 8's record, its processes alive
    stalls = [d for _, d in seen if d.stalled and d.since == steps[8]["t"]]
    assert stalls, [d.reason for d in changes]
    assert stalls[0].kind == "silence" and "processes (supervisor, torchrun, ranks) alive" in stalls[0].reason, stalls[0].reason
    assert stalls[0].last_lines[-1].startswith("step 8 loss "), stalls[0].last_lines
    assert stalls[0].reason.startswith("no metrics for "), stalls[0].reason
    # cleared once the metrics came back (the first check after step 9 arrived)
    flagged = changes.index(next(d for d in changes if d.stalled and d.since == steps[8]["t"]))
    assert not changes[flagged + 1].stalled, [d.reason for d in changes]
    # the evaluation it announced is a phase, never a stall
    evaluation = [d for _, d in seen if d.state == PHASE and d.since is not None
                  and steps[16]["t"] <= d.since < steps[17]["t"]]
    assert evaluation and evaluation[0].label == "in evaluation", [d.reason for d in changes]
    assert not [d for _, d in seen if d.stalled and steps[16]["t"] <= d.since < steps[17]["t"]], \
        [d.reason for d in changes]
    assert seen[-1][1].state == ENDED
    # the watch started after step 5 knew the run's cadence from the store and flagged the same stall
    assert any(d.stalled and d.since == steps[8]["t"] for d in late[1:]), [d.reason for d in late[1:]]


def test_a_stalled_run_is_stopped_automatically_when_the_policy_asks(manager):
    policy = StallPolicy(silence_factor=5, min_silence_s=3, auto_stop_after_s=2)
    watch = StallWatch(manager, policy)
    stopped = []

    def stop_when_due(decision):
        for run_id in watch.stops_due():
            stopped.append((run_id, decision))
            manager.stop(run_id)  # a GUI does this off its thread

    try:
        record = launch(manager, "--steps=6", "--stall=600", "--step_s=0.25")
        watch_until_ended(manager, watch, record.id, on_check=stop_when_due)
        assert watch.stops_due() == []  # named once
    finally:
        watch.close()
    final = manager.store.get_run(record.id)
    assert [run_id for run_id, _ in stopped] == [record.id]
    decision = stopped[0][1]
    assert decision.stalled and decision.since == manager.store.records(record.id)[-1]["t"]
    assert final.state == "stopped" and final.last_step == 6, (final.state, final.message)
