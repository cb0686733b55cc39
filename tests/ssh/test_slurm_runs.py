"""Runs on a real Slurm cluster (issue 13): two slurmd nodes on this machine, a loopback sshd as the login node.

The cluster (tests/helpers/slurm_cluster.py) has partitions ``debug`` (no time limit) and ``short`` (5 min),
two nodes of 2 CPUs; the run root is a temp dir both "nodes" and the login node share, as a cluster's
shared filesystem.  Every run here is real torchrun with gloo under a real ``sbatch`` job.  The faults (time
limit, a node killed, a requeue, a dropped login link, an end read from the shared disk) are in
test_slurm_faults.py: two files, so that the suite's workers share the cluster's waits.
"""
import dataclasses
import os
import re

import pytest
from helpers.slurm_runs import SMALL, job_id, occupy_both_nodes
from helpers.spools import host_records, wait_for

from ddpgui.core.runs.nodes import node_states
from ddpgui.core.targets.base import TargetError

pytestmark = pytest.mark.slow


def test_two_nodes_train_as_one_world_under_onejob_id(cluster, slurm):
    manager = cluster()
    record = manager.launch("cluster", dict(SMALL, nnodes=2, steps=30))
    assert record.state == "queued" and record.hosts == ["cluster", "cluster"] and sorted(record.run_dirs) == [0, 1]
    final = manager.wait(record.id, timeout=300)
    assert final.state == "finished", (final.message, manager.store.log_tail(record.id, "stderr.log", 1)[-2000:],
                                       slurm.log_tail())
    # One job ran both nodes: world size 2, node ranks from Slurm, rendezvous on the first node.
    starts = [e for e in manager.store.events(record.id, 0) if e.get("event") == "train_start"]
    assert starts and starts[0]["world_size"] == 2
    assert [r["step"] for r in manager.store.records(record.id)] == list(range(1, 31))
    assert manager.store.records(record.id) == host_records(final.run_dirs[0])
    for node in (0, 1):
        telemetry = manager.store.records(record.id, "telemetry.jsonl", node)
        assert telemetry and telemetry == host_records(final.run_dirs[node], "telemetry.jsonl"), node
    statuses = [e for e in manager.store.events(record.id, 1) if e.get("event") == "started"]
    assert statuses and statuses[0]["node_rank"] == 1
    assert [s.state for s in node_states(manager.store, final)] == ["finished", "finished"]
    assert wait_for(lambda: slurm.job_state(job_id(final))["JobState"] == "COMPLETED", 60)  # the batch step ends last
    assert slurm.job_state(job_id(final))["NumNodes"] == "2"
    assert os.path.isfile(os.path.join(final.run_dirs[0], "job.sbatch"))
    assert os.path.isfile(os.path.join(final.run_dirs[0], f"slurm-{job_id(final)}.out"))
    assert wait_for(lambda: not slurm.jobs() and not slurm.job_processes(), 30)


def test_a_held_job_shows_its_reason_then_runs_when_released(cluster, slurm):
    manager = cluster()
    blocker = occupy_both_nodes(slurm)
    record = manager.launch("cluster", dict(SMALL, steps=10), follow=True)
    slurm.run("scontrol", "uhold", job_id(record))  # a user's hold (root's plain hold is an administrator's)
    slurm.run("scancel", blocker)
    assert wait_for(lambda: "JobHeldUser" in manager.store.get_run(record.id).message, 60), \
        manager.store.get_run(record.id).message
    held = manager.store.get_run(record.id)
    assert held.state == "queued" and "held by you" in held.message and "scontrol release" in held.hint
    slurm.run("scontrol", "release", job_id(record))
    final = manager.wait(record.id, timeout=240)
    assert final.state == "finished" and final.message == "" and final.started_at is not None


def test_a_job_waiting_for_nodes_is_queued_with_its_reason(cluster, slurm):
    manager = cluster()
    blocker = occupy_both_nodes(slurm)
    record = manager.launch("cluster", dict(SMALL, nnodes=2, steps=10))
    assert wait_for(lambda: "Resources" in manager.store.get_run(record.id).message
                    or "Priority" in manager.store.get_run(record.id).message, 60), \
        manager.store.get_run(record.id).message
    assert manager.store.get_run(record.id).state == "queued"
    slurm.run("scancel", blocker)
    assert manager.wait(record.id, timeout=240).state == "finished"


def test_stop_cancels_the_job_and_leaves_nothing_running(cluster, slurm):
    manager = cluster()
    record = manager.launch("cluster", dict(SMALL, nnodes=2, steps=100000))
    assert wait_for(lambda: len(manager.store.records(record.id)) >= 3, 240), manager.store.get_run(record.id)
    manager.stop(record.id)
    final = manager.wait(record.id, timeout=120)
    assert final.state == "stopped" and final.failure is None, (final.message, final.hint)
    assert [s.state for s in node_states(manager.store, final)] == ["stopped", "stopped"]
    assert wait_for(lambda: not slurm.jobs(), 60) and wait_for(lambda: not slurm.job_processes(), 30)


def test_stop_of_a_queued_job_cancels_it_before_it_starts(cluster, slurm):
    manager = cluster()
    blocker = occupy_both_nodes(slurm)
    record = manager.launch("cluster", dict(SMALL, steps=10))
    manager.stop(record.id)
    final = manager.wait(record.id, timeout=120)
    assert final.state == "stopped" and final.failure is None, (final.message, final.hint)
    assert "cancelled before it started" in final.message
    assert [j["id"] for j in slurm.jobs()] == [blocker]
    slurm.run("scancel", blocker)


def test_a_request_the_partition_cannot_hold_is_refused_before_sbatch(cluster, slurm):
    manager = cluster(partition="short", time_limit="10:00")
    with pytest.raises(TargetError) as caught:
        manager.launch("cluster", dict(SMALL, steps=10))
    assert caught.value.field == "time_limit" and "5:00" in str(caught.value)
    with pytest.raises(TargetError) as caught:
        cluster(partition="nope").launch("cluster", dict(SMALL, steps=10))
    assert "no partition 'nope'" in str(caught.value) and "debug" in str(caught.value)
    with pytest.raises(TargetError) as caught:
        cluster().launch("cluster", dict(SMALL, nnodes=3, steps=10))
    assert caught.value.field == "nnodes"
    assert not slurm.jobs()


def test_probe_reports_partitions_queue_and_the_login_python(cluster, slurm):
    manager = cluster()
    report = manager.targets.probe("cluster")
    parts = {p["name"]: p for p in report["slurm"]["partitions"]}
    assert set(parts) == {"debug", "short"} and parts["debug"]["default"] and parts["debug"]["nodes"] == 2
    assert parts["short"]["time_limit_s"] == 300 and parts["debug"]["time_limit_s"] is None
    assert re.search(r"\b\d+\.\d+", report["slurm"]["version"]) and report["torch"]["version"]
    assert report["slurm"]["queue"] == []


def test_a_job_sbatch_refuses_fails_the_launch_with_sbatch_s_words(cluster, slurm):
    manager = cluster(sbatch_lines=["--constraint=nosuchfeature"])
    with pytest.raises(TargetError) as caught:
        manager.launch("cluster", dict(SMALL, steps=10))
    assert "sbatch refused the job on cluster" in str(caught.value) and "feature" in str(caught.value).lower()
    (run,) = manager.store.list_runs()
    assert run.state == "failed" and run.failure == "launch_failed" and "sbatch refused" in run.message
    assert not slurm.jobs()


def test_a_login_node_without_torch_runs_jobs_with_the_setup_lines_python(cluster, slurm, slurm_login, tmp_path):
    """A cluster's login node often has no torch: the jobs get theirs from the profile's setup lines (here a
    PATH to this venv, as `module load` or `source venv/bin/activate` would)."""
    import sys

    venv_bin = os.path.dirname(sys.executable)
    manager = cluster(setup_lines=[f"export PATH={venv_bin}:$PATH"])
    profile = manager.hosts.get("cluster")
    manager.hosts.update(dataclasses.replace(profile, python="/usr/bin/python3"))  # stdlib only, no torch
    report = manager.targets.probe("cluster")
    torch_problems = [p for p in report["problems"] if p.get("code") == "torch_missing"]
    assert torch_problems and torch_problems[0]["severity"] == "warning"
    assert torch_problems[0]["message"].startswith("on the login node: ")
    manager.hosts.update(dataclasses.replace(profile, python="python3"))  # the job's PATH decides which one
    manager.targets.drop("cluster")
    record = manager.launch("cluster", dict(SMALL, steps=10))
    final = manager.wait(record.id, timeout=240)
    assert final.state == "finished", (final.message, manager.store.log_tail(record.id, "stderr.log")[-1500:])


def test_an_app_restart_while_queued_picks_the_job_up_again(cluster, slurm):
    first = cluster()
    record = first.launch("cluster", dict(SMALL, steps=10))
    slurm.run("scontrol", "uhold", job_id(record))
    assert wait_for(lambda: "JobHeldUser" in first.store.get_run(record.id).message, 60)
    first.close()  # the app quits; the job stays queued on the cluster
    second = cluster()
    assert second.reattach() == [record.id]
    assert second.store.get_run(record.id).state == "queued"
    slurm.run("scontrol", "release", job_id(record))
    final = second.wait(record.id, timeout=240)
    assert final.state == "finished" and [r["step"] for r in second.store.records(record.id)] == list(range(1, 11))
