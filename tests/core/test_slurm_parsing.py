"""What Slurm prints, read: squeue, scontrol, sacct, sinfo and sbatch output captured from a real cluster
(tests/fixtures/slurm, Slurm 22.05.8, see its SOURCES.md), the job states mapped onto the app's, the job
script, and the request checked against the partitions."""
import shlex
import subprocess
from pathlib import Path

import pytest

from ddpgui.core.hosts.slurm_options import SlurmOptions
from ddpgui.core.slurm import jobscript
from ddpgui.core.slurm.jobs import (
    end_columns,
    parse_sacct,
    parse_scontrol_job,
    parse_squeue,
    pending_text,
)
from ddpgui.core.slurm.partitions import find_partition, gres_gpus, parse_sinfo, request_problems
from ddpgui.core.targets.base import CommandResult
from ddpgui.core.targets.slurm import SlurmTarget
from remote_runner.config import RunConfig

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_squeue_pending_reasons_and_a_running_job():
    jobs = parse_squeue(fixture("squeue_pending_and_running.txt"))
    assert {j: info.reason for j, info in jobs.items() if info.queued} == {
        "2": "Resources", "3": "Priority", "6": "PartitionNodeLimit", "8": "Dependency", "5": "JobHeldAdmin",
        "4": "JobHeldUser", "7": "PartitionTimeLimit"}
    running = jobs["1"]
    assert running.state == "RUNNING" and running.reason == "" and running.nodes == "n[1-2]" and running.node_count == 2
    assert not running.queued and not running.final and jobs["7"].time_limit == "10:00"


@pytest.mark.parametrize("reason, words, hint", [
    ("Priority", "other jobs are ahead", ""),
    ("Resources", "waiting for nodes", ""),
    ("JobHeldUser", "held by you", "scontrol release"),
    ("PartitionTimeLimit", "will never start", "lower the time limit"),
    ("PartitionNodeLimit", "will never start", "fewer nodes"),
    ("QOSMaxJobsPerUserLimit", "your QoS allows no more", "when one of yours ends"),
    ("AssocGrpGRES", "a limit of your QoS or account", "other jobs end"),
])
def test_pending_reasons_in_words(reason, words, hint):
    line = f"12|PENDING|{reason}||0:00|UNLIMITED|1"
    message, given = pending_text(parse_squeue(line)["12"])
    assert message.startswith("queued in Slurm (job 12): " + reason) and words in message
    assert hint in given


def test_ended_jobs_leave_squeue_and_old_or_purged_ones_say_invalid():
    assert parse_squeue(fixture("squeue_ended_in_min_job_age.txt")) == {}
    assert parse_squeue(fixture("squeue_ended_state_all.txt")).popitem()[1].state == "COMPLETED"
    assert "Invalid job id specified" in fixture("squeue_purged_job.stderr.txt")
    assert (FIXTURES / "squeue_purged_job.rc").read_text().strip() == "1"


@pytest.mark.parametrize("name, state, ours, failure, words", [
    ("scontrol_job_completed.txt", "COMPLETED", "finished", None, ""),
    ("scontrol_job_failed_exit3.txt", "FAILED", "failed", "job_failed", "exit code 3:0"),
    ("scontrol_job_timeout.txt", "TIMEOUT", "failed", "timeout", "time limit (00:01:00)"),
    ("scontrol_job_cancelled_running.txt", "CANCELLED", "stopped", "cancelled", "cancelled outside ddpgui"),
    ("scontrol_job_node_fail.txt", "NODE_FAIL", "failed", "node_fail", "a node of Slurm job"),
])
def test_end_states_from_scontrol_map_onto_ours(name, state, ours, failure, words):
    info = parse_scontrol_job(fixture(name))
    assert info.state == state and info.final and info.source == "scontrol"
    columns = end_columns(info)
    assert (columns["state"], columns["failure"]) == (ours, failure) and words in columns["message"]
    if ours == "failed":
        assert columns["hint"]


def test_a_cancel_we_asked_for_is_a_stop_on_request():
    info = parse_scontrol_job(fixture("scontrol_job_cancelled_running.txt"))
    assert end_columns(info, stop_requested=True) == {"state": "stopped", "failure": None,
                                                      "message": "stopped on request (scancel)", "hint": ""}


@pytest.mark.parametrize("name", ["scontrol_job_requeued_pending.txt", "scontrol_job_node_fail_requeued.txt"])
def test_a_requeued_job_is_pending_again_with_its_restarts(name):
    info = parse_scontrol_job(fixture(name))
    assert info.queued and info.restarts == 1 and info.reason == "BeginTime"


def test_scontrol_of_a_running_and_a_purged_job():
    running = parse_scontrol_job(fixture("scontrol_job_running.txt"))
    assert running.state == "RUNNING" and running.nodes == "n[1-2]" and running.node_count == 2
    assert parse_scontrol_job(fixture("scontrol_purged_job.txt")) is None


def test_sacct_lines_and_sacct_without_accounting():
    jobs = parse_sacct("41|CANCELLED by 0|0:15|None\n41.batch|CANCELLED|0:15|\n42|TIMEOUT|0:0|TimeLimit\n")
    assert (jobs["41"].state, jobs["41"].reason, jobs["42"].state) == ("CANCELLED", "", "TIMEOUT")
    assert "41.batch" not in jobs
    assert "accounting storage is disabled" in fixture("sacct_disabled.stderr.txt")


def test_sinfo_partitions_idle_and_with_a_node_down():
    idle = parse_sinfo(fixture("sinfo_idle.txt"))
    assert [p.name for p in idle] == ["debug", "short"] and idle[0].default and not idle[1].default
    assert (idle[0].nodes, idle[0].free_nodes, idle[0].time_limit_s, idle[1].time_limit_s) == (2, 2, None, 300)
    assert idle[0].cpus_per_node == 2 and idle[0].mem_per_node_mb == 4000 and idle[0].gpus_per_node == 0
    down = find_partition(parse_sinfo(fixture("sinfo_node_down.txt")), "debug")
    assert (down.nodes, down.free_nodes, down.down_nodes) == (2, 1, 1)
    busy = find_partition(parse_sinfo(fixture("sinfo_busy.txt")), "debug")
    assert busy.free_nodes == 0 and busy.nodes == 2


@pytest.mark.parametrize("gres, gpus", [("(null)", 0), ("gpu:4", 4), ("gpu:a100:8(S:0-1)", 8),
                                        ("gpu:2,shard:8", 2), ("gpu:a100:2,gpu:v100:2", 4)])
def test_gpus_per_node_from_gres(gres, gpus):
    assert gres_gpus(gres) == gpus


def test_requests_the_partition_cannot_hold():
    parts = parse_sinfo(fixture("sinfo_idle.txt"))
    fine = SlurmOptions(partition="debug")
    assert request_problems(parts, fine, 2, 2, uses_gpus=False) == []
    fields = [f for f, _, _ in request_problems(parts, fine, 3, 1, uses_gpus=False)]
    assert fields == ["nnodes"]
    too_long = request_problems(parts, SlurmOptions(partition="short", time_limit="10:00"), 1, 1, uses_gpus=False)
    assert too_long[0][0] == "time_limit" and "5:00" in too_long[0][1]
    assert request_problems(parts, fine, 1, 3, uses_gpus=False)[0][0] == "nproc_per_node"
    gpus = request_problems(parts, SlurmOptions(partition="debug", gpus_per_node=4), 1, 1, uses_gpus=True)
    assert gpus[0][0] == "gpus_per_node"
    missing = request_problems(parts, SlurmOptions(partition="gpu,debug"), 1, 1, uses_gpus=False)
    assert missing == []  # the first of a comma list that exists
    nope = request_problems(parts, SlurmOptions(partition="gpu"), 1, 1, uses_gpus=False)
    assert nope[0][0] == "partition" and "debug, short" in nope[0][1]
    down = parse_sinfo(fixture("sinfo_node_down.txt"))
    assert "has 1 usable node now" in request_problems(down, fine, 2, 1, uses_gpus=False)[0][1]


def test_the_job_script_and_sbatch_command(tmp_path):
    options = SlurmOptions(partition="gpu", account="lab", qos="normal", time_limit="2:00:00", gpus_per_node=4,
                           gpu_flag="gpus-per-node", mem="64G", sbatch_lines=["--exclusive", "#SBATCH --constraint=a100"],
                           setup_lines=["module load cuda/12.1", "source ~/venv/bin/activate"])
    cfg = RunConfig(run_id="r1", name="it's a run", nnodes=2, nproc_per_node=4, scheduler="slurm")
    base = "/scratch/me/run root/runs/r1"
    script = jobscript.job_script(options, cfg, ["/home/me/venv/bin/python", "/scratch/me/run root/runner.pyz"],
                                  base, "hpc")
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    directives = [line for line in lines if line.startswith("#SBATCH ")]
    assert directives == ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --partition=gpu",
                          "#SBATCH --account=lab", "#SBATCH --qos=normal", "#SBATCH --time=2:00:00",
                          "#SBATCH --gpus-per-node=4", "#SBATCH --cpus-per-task=4", "#SBATCH --mem=64G",
                          "#SBATCH --exclusive", "#SBATCH --constraint=a100"]
    assert lines.index("module load cuda/12.1") < len(lines) - 1
    assert shlex.split(lines[-1]) == ["exec", "/home/me/venv/bin/python", "/scratch/me/run root/runner.pyz",
                                      "slurm-job", base, "2", "--profile", "hpc"]
    # bash reads the script as written: the quoted run root is one word
    (tmp_path / "job.sh").write_text(script.replace("exec ", "printf '%s\\n' ").replace("module load", "true"
                                                                                       ).replace("source ", "true "))
    out = subprocess.run(["bash", str(tmp_path / "job.sh")], capture_output=True, text=True).stdout.splitlines()
    assert out[1] == "/scratch/me/run root/runner.pyz" and out[3] == base
    argv = jobscript.sbatch_argv(cfg, base + ".node0")
    assert argv[:3] == ["sbatch", "--parsable", "--job-name=ddpgui-r1"]
    assert f"--output={base}.node0/slurm-%j.out" in argv and argv[-1] == f"{base}.node0/job.sbatch"
    gres = jobscript.directives(SlurmOptions(partition="p", gpus_per_node=2), RunConfig(nproc_per_node=2))
    assert "#SBATCH --gres=gpu:2" in gres


@pytest.mark.parametrize("stdout, job", [("123\n", "123"), ("77;cluster2\n", "77"),
                                         ("Submitted batch job 4242\n", "4242"), ("", None),
                                         ("sbatch: error: Batch job submission failed\n", None)])
def test_job_ids_sbatch_prints(stdout, job):
    assert jobscript.parse_job_id(stdout) == job
    assert jobscript.parse_job_id(fixture("sbatch_parsable.txt")).isdigit()


class Replay(SlurmTarget):
    """A SlurmTarget whose login node answers from recorded outputs (an old Slurm cannot run here)."""

    def __init__(self, answers):
        self.answers, self.asked, self.commands = answers, [], 0
        self._accounting, self._sacct_columns = None, "JobID,State,ExitCode,Reason"
        self.name = "hpc"

    def exec(self, argv, stdin=None, timeout=60.0):
        self.asked.append(argv)
        for prefix, result in self.answers:
            if argv[:len(prefix)] == prefix:
                return result
        raise AssertionError(f"unexpected command {argv}")


def test_jobs_that_left_the_queue_fall_back_to_scontrol_when_accounting_is_off():
    target = Replay([
        (["squeue"], CommandResult(1, b"", fixture("squeue_purged_job.stderr.txt").encode())),
        (["sacct"], CommandResult(1, b"", fixture("sacct_disabled.stderr.txt").encode())),
        (["scontrol"], CommandResult(0, fixture("scontrol_job_timeout.txt").encode(), b"")),
    ])
    found = target.jobs(["9"])
    assert found["9"].state == "TIMEOUT" and found["9"].source == "scontrol"
    target.jobs(["9"])
    assert [a[0] for a in target.asked] == ["squeue", "sacct", "scontrol", "squeue", "scontrol"]  # sacct asked once


def test_sacct_before_19_05_without_a_reason_column():
    target = Replay([
        (["squeue"], CommandResult(0, b"", b"")),
        (["sacct", "-X", "-n", "-P", "-j", "5", "-o", "JobID,State,ExitCode,Reason"],
         CommandResult(1, b"", b"sacct: error: Invalid field requested: \"Reason\"\n")),
        (["sacct"], CommandResult(0, b"5|OUT_OF_MEMORY|0:125\n", b"")),
    ])
    assert target.jobs(["5"])["5"].state == "OUT_OF_MEMORY"
    assert end_columns(target.jobs(["5"])["5"])["failure"] == "out_of_memory"
