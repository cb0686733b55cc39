"""What the Slurm run tests share (tests/ssh/test_slurm_runs.py, test_slurm_faults.py; the ``cluster`` fixture
is in tests/ssh/conftest.py)."""
from helpers.spools import wait_for

SMALL = {"workload": "linear", "nproc_per_node": 1, "batch_size": 8, "dataset_size": 256, "log_every": 1,
         "telemetry_interval_s": 0.25, "stop_grace_s": 5.0}


def job_id(record) -> str:
    """The Slurm job id of a run."""
    return record.environment["slurm"]["job_id"]


def occupy_both_nodes(slurm) -> str:
    """A job holding both nodes, so that the next one waits: a hold or a stop then reaches a job that has
    not started (on a loaded machine a free cluster starts a job before the test's next command)."""
    blocker = slurm.sbatch("-N2", "--exclusive", "--wrap", "sleep 600")
    assert wait_for(lambda: any(j["id"] == blocker and j["state"] == "RUNNING" for j in slurm.jobs()), 60)
    return blocker
