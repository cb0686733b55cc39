"""The local Slurm cluster the Slurm tests run on (tests/helpers/slurm_cluster.py) does what they rely on.

Two nodes that run one job together, a queue that holds what it cannot run and says why, a login node that
reaches the cluster over SSH, a node that can be made to lose its job's processes, nothing left behind.
"""
from __future__ import annotations

import os
import signal
import time

import pytest

from ddpgui.core.hosts import HostProfile

pytestmark = pytest.mark.slow


def _until(predicate, timeout: float, what: str, cluster):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:.0f} s\n{cluster.log_tail(20)}")
        time.sleep(0.3)


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_two_nodes_idle_in_two_partitions(slurm):
    assert slurm.node_states() == {"n1": "idle", "n2": "idle"}
    rows = slurm.run("sinfo", "-h", "-o", "%P|%a|%l|%D|%t").stdout.split()
    assert sorted(rows) == ["debug*|up|infinite|2|idle", "short|up|5:00|2|idle"]
    assert slurm.jobs() == []


def test_a_two_node_job_runs_one_task_on_each_node(slurm, tmp_path):
    out = tmp_path / "out"
    job = slurm.sbatch("-N2", "--ntasks-per-node=1", f"--output={out}-%j.txt", "--wrap",
                       f'srun sh -c \'echo "$SLURM_NODEID $SLURMD_NODENAME" > {out}-task-$SLURM_NODEID.txt\'; '
                       'scontrol show hostnames "$SLURM_JOB_NODELIST"')
    state = slurm.wait_job(job, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
    assert (state["JobState"], state["ExitCode"], state["NodeList"]) == ("COMPLETED", "0:0", "n[1-2]"), state
    assert (tmp_path / "out-task-0.txt").read_text() == "0 n1\n"
    assert (tmp_path / "out-task-1.txt").read_text() == "1 n2\n"
    assert (tmp_path / f"out-{job}.txt").read_text().split() == ["n1", "n2"]


def test_a_job_the_cluster_cannot_run_stays_pending_with_its_reason(slurm):
    too_big = slurm.sbatch("-N3", "--wrap", "true")
    held = slurm.sbatch("--hold", "--wrap", "true")
    # at submission the reason reads PartitionConfig; the first scheduling pass names the limit
    _until(lambda: {j["id"]: j["reason"] for j in slurm.jobs()} == {too_big: "PartitionNodeLimit",
                                                                    held: "JobHeldUser"},
           30, "both jobs pending with their reasons", slurm)
    time.sleep(3)  # more scheduling passes: neither job may start meanwhile
    assert {(j["id"], j["state"], j["reason"]) for j in slurm.jobs()} == {
        (too_big, "PENDING", "PartitionNodeLimit"), (held, "PENDING", "JobHeldUser")}
    slurm.run("scontrol", "release", held)
    assert slurm.wait_job(held, "COMPLETED", "FAILED")["JobState"] == "COMPLETED"


def test_a_job_waits_for_resources_then_runs_when_they_free_up(slurm):
    blocker = slurm.sbatch("-N2", "--exclusive", "--wrap", "sleep 300")
    slurm.wait_job(blocker, "RUNNING")
    waiting = slurm.sbatch("-N2", "--wrap", "true")
    _until(lambda: slurm.job_state(waiting)["Reason"] == "Resources", 30, "the second job waits for Resources",
           slurm)
    assert slurm.job_state(waiting)["JobState"] == "PENDING"
    slurm.run("scancel", blocker)
    assert slurm.wait_job(waiting, "COMPLETED", "FAILED")["JobState"] == "COMPLETED"
    assert slurm.job_state(blocker)["JobState"] == "CANCELLED"


def test_the_login_node_reaches_the_cluster_over_ssh(slurm_login, slurm, tmp_path):
    done = slurm_login.ssh('sinfo -h -o "%P|%l|%D"; echo "conf=$SLURM_CONF"')
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert sorted(lines[:-1]) == ["debug*|infinite|2", "short|5:00|2"]
    assert lines[-1] == f"conf={slurm.conf}"
    profile = HostProfile(name="cluster", **slurm_login.profile_fields(tmp_path))
    with slurm_login.env.target(tmp_path, profile, known_hosts=slurm_login.known_hosts(tmp_path)) as target:
        job = target.exec(["sbatch", "--parsable", "--wrap", "true"])
        assert job.rc == 0, job.stderr
        job_id = job.stdout.decode().strip()
        assert slurm.wait_job(job_id, "COMPLETED", "FAILED")["JobState"] == "COMPLETED"


def _running_sleep(slurm, node: str) -> list[int]:
    """The processes of the job steps on ``node`` once a ``sleep`` runs among them (else empty)."""
    pids = slurm.node_processes(node)
    return pids if any(_comm(p) == "sleep" for p in pids) else []


def _comm(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/comm").read().strip()
    except OSError:
        return ""


def test_kill_node_ends_the_job_processes_on_that_node_only(slurm):
    job = slurm.sbatch("-N2", "--wrap", "srun sleep 300")
    slurm.wait_job(job, "RUNNING")
    trees = {node: _until(lambda node=node: _running_sleep(slurm, node), 60, f"the job's sleep on {node}", slurm)
             for node in slurm.nodes}
    assert not set(trees["n1"]) & set(trees["n2"])
    killed = slurm.kill_node("n2")
    assert set(trees["n2"]) <= set(killed), (trees, killed)
    _until(lambda: not any(_alive(p) for p in killed), 30, "every killed process gone", slurm)
    assert slurm.node_processes("n2") == []
    assert all(_alive(p) for p in trees["n1"]), "n1's part of the job must live on"


def test_cancel_leaves_no_process_of_the_job(slurm):
    job = slurm.sbatch("-N2", "--wrap", "srun sleep 300")
    slurm.wait_job(job, "RUNNING")
    _until(lambda: all(slurm.step_processes(n) for n in slurm.nodes), 60, "job steps on both nodes", slurm)
    assert slurm.job_processes()
    slurm.run("scancel", job)
    assert slurm.wait_job(job, "CANCELLED")["JobState"] == "CANCELLED"
    _until(lambda: slurm.jobs() == [], 60, "the queue empty", slurm)
    _until(lambda: slurm.job_processes() == [], 30, "no process of the job left", slurm)


def test_a_dead_node_fails_its_job_and_reset_brings_the_node_back(slurm):
    job = slurm.sbatch("-N2", "--no-requeue", "--wrap", "srun sleep 300")
    slurm.wait_job(job, "RUNNING")
    _until(lambda: _running_sleep(slurm, "n2"), 60, "the job's sleep on n2", slurm)
    slurm.kill_node("n2")
    slurm.kill_slurmd("n2")
    ended = slurm.wait_job(job, "NODE_FAIL", "FAILED", "COMPLETED", "CANCELLED", timeout=180)  # SlurmdTimeout=12
    assert (ended["JobState"], ended["Reason"]) == ("NODE_FAIL", "NodeDown"), ended
    assert slurm.node_states()["n2"].startswith("down"), slurm.node_states()
    slurm.reset()
    assert slurm.node_states() == {"n1": "idle", "n2": "idle"}
    again = slurm.sbatch("-N2", "--wrap", "srun true")
    assert slurm.wait_job(again, "COMPLETED", "FAILED")["JobState"] == "COMPLETED"


def test_reset_names_a_process_that_escaped_its_job(slurm):
    from helpers.slurm_cluster import SlurmError

    job = slurm.sbatch("--wrap", "setsid sleep 300 < /dev/null > /dev/null 2>&1 & sleep 1")
    assert slurm.wait_job(job, "COMPLETED", "FAILED")["JobState"] == "COMPLETED"
    stray = _until(lambda: [p for p in slurm.job_processes() if _comm(p) == "sleep"], 30, "the stray sleep", slurm)
    with pytest.raises(SlurmError, match=r"still running: \d+ sleep 300"):
        slurm.reset(timeout=5)
    os.kill(stray[0], signal.SIGKILL)
    _until(lambda: slurm.job_processes() == [], 30, "the stray gone", slurm)
