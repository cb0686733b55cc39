"""Faults of runs on a real Slurm cluster (issue 13; the cluster and the ``cluster`` fixture as in
test_slurm_runs.py): a job over its time limit, a node killed mid-run, a requeue, a dropped login link, and an end
that no follow stream brought, read from the shared disk.
"""
import os
import time

import pytest
from helpers.slurm_runs import SMALL, job_id
from helpers.spools import host_records, wait_for

from ddpgui.core.runs.nodes import node_states

pytestmark = pytest.mark.slow


def test_a_job_over_its_time_limit_ends_timed_out(cluster, slurm):
    manager = cluster(time_limit="1")  # one minute: Slurm sends SIGTERM, then SIGKILL after KillWait
    record = manager.launch("cluster", dict(SMALL, steps=1_000_000))
    final = manager.wait(record.id, timeout=240)
    assert final.state == "failed" and final.failure == "timeout", (final.message, final.hint)
    assert "time limit" in final.message and "longer time limit" in final.hint
    assert manager.store.records(record.id)  # what it logged before is kept
    assert wait_for(lambda: not slurm.jobs() and not slurm.job_processes(), 60)


def test_a_node_killed_mid_run_fails_the_run_naming_it(cluster, slurm):
    manager = cluster()
    record = manager.launch("cluster", dict(SMALL, nnodes=2, steps=1_000_000, rank_failure_timeout_s=20))
    assert wait_for(lambda: len(manager.store.records(record.id)) >= 3, 240)
    started = time.monotonic()
    assert slurm.kill_node("n2")
    try:
        final = manager.wait(record.id, timeout=180)
    except TimeoutError:
        run = manager.store.get_run(record.id)
        pytest.fail(f"{run.state} {run.message} {run.environment.get('slurm')} "
                    f"{[(s.state, s.message) for s in node_states(manager.store, run)]} {slurm.jobs()}")
    assert final.state == "failed", (final.message, final.hint)
    assert "node 1" in final.message, final.message
    assert time.monotonic() - started < 150
    assert wait_for(lambda: not slurm.jobs() and not slurm.job_processes(), 60)


@pytest.mark.timeout(600)
def test_a_requeued_job_ends_the_run_and_its_next_attempt_is_a_linked_run(cluster, slurm):
    manager = cluster(sbatch_lines=["--requeue"])
    record = manager.launch("cluster", dict(SMALL, nnodes=2, steps=1_000_000))
    assert wait_for(lambda: len(manager.store.records(record.id)) >= 3, 240)
    slurm.run("scontrol", "requeue", job_id(record))
    first = manager.wait(record.id, timeout=120)
    new_id = f"{record.id}-r1"
    assert (first.state, first.failure) == ("stopped", "requeued"), (first.message, first.hint)
    assert new_id in first.message and first.environment["slurm"]["requeued_as"] == new_id
    second = manager.store.get_run(new_id)
    assert second.environment["slurm"]["requeue_of"] == record.id and second.environment["slurm"]["attempt"] == 2
    assert job_id(second) == job_id(record) and second.run_dirs[0].endswith(f"{new_id}.node0")
    # The second attempt runs in its own directories and its metrics start again from step 1.
    if not wait_for(lambda: len(manager.store.records(new_id)) >= 3, 240):
        base = os.path.dirname(second.run_dirs[0])
        out = open(os.path.join(first.run_dirs[0], f"slurm-{job_id(record)}.out")).read()
        pytest.fail(f"{manager.store.get_run(new_id)}\n{slurm.jobs()}\n{slurm.job_state(job_id(record))}\n"
                    f"{sorted(os.listdir(base))}\n{out}")
    assert manager.store.records(new_id)[0]["step"] == 1
    assert manager.store.get_run(new_id).state == "running"
    assert len(manager.store.records(record.id)) < 1_000_000  # the first run's records are kept as they were
    manager.stop(new_id)
    assert manager.wait(new_id, timeout=120).state == "stopped"
    assert wait_for(lambda: not slurm.jobs() and not slurm.job_processes(), 60)


def test_a_dropped_login_link_loses_nothing(cluster, slurm, slurm_login):
    manager = cluster()
    record = manager.launch("cluster", dict(SMALL, nnodes=2, steps=400))
    assert wait_for(lambda: len(manager.store.records(record.id)) >= 5, 240)
    assert slurm_login.server.drop_connections() >= 1
    final = manager.wait(record.id, timeout=300)
    assert final.state == "finished", final.message
    assert manager.store.records(record.id) == host_records(final.run_dirs[0])
    for node in (0, 1):
        assert manager.store.records(record.id, "telemetry.jsonl", node) == \
            host_records(final.run_dirs[node], "telemetry.jsonl")


def test_an_end_no_stream_brought_is_read_from_the_shared_disk(cluster, slurm):
    """The watcher sees the job gone before any follow stream brought the nodes' ends (the app was closed
    during the run): it reads each node's status.json on the shared run root, then fetches the records."""
    first = cluster()
    record = first.launch("cluster", dict(SMALL, nnodes=2, steps=20))
    assert wait_for(lambda: first.store.get_run(record.id).state == "running", 240)
    first.close()
    assert wait_for(lambda: not slurm.jobs(), 240)
    second = cluster()
    second.slurm.track(second.store.get_run(record.id))  # the watcher only: no stream follows the run
    final = second.wait(record.id, timeout=120)
    assert final.state == "finished", final.message
    assert [s.state for s in node_states(second.store, final)] == ["finished", "finished"]
    assert wait_for(lambda: second.store.records(record.id) == host_records(final.run_dirs[0]), 60)
