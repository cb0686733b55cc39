"""The CLI on a real Slurm cluster: ``hosts add --kind slurm``, ``probe``, ``launch --nnodes``, ``stop``, sweeps."""
import io
import json
import sys

import pytest
from helpers.spools import wait_for

from ddpgui.cli import main
from ddpgui.core.store import RunStore

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster_cli(slurm_login, slurm, tmp_path, monkeypatch, capsys):
    """The app's data and config in tmp, and a profile "hpc" for the test cluster's login node added through the CLI."""
    monkeypatch.setenv("DDPGUI_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DDPGUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    fields = slurm_login.profile_fields(tmp_path)
    assert main(["hosts", "add", "hpc", "--kind", "slurm", "--host", fields["hostname"], "--port", str(fields["port"]),
                 "--user", fields["user"], "--auth", "key", "--key-file", fields["key_file"],
                 "--python", sys.executable, "--run-root", fields["run_root"], "--partition", "debug",
                 "--setup-line", "export DDPGUI_SETUP_LINE_RAN=yes", "--max-queued-jobs", "1"]) == 0, \
        capsys.readouterr().err
    capsys.readouterr()
    return "hpc"


def test_probe_lists_partitions_and_the_queue(cluster_cli, capsys):
    capsys.readouterr()
    assert main(["probe", cluster_cli, "--accept-new-host-key"]) == 0
    out = capsys.readouterr().out
    assert "(the login node: the jobs run on the cluster's nodes)" in out
    assert "this profile submits to partition debug" in out
    lines = out.splitlines()
    debug = next(line for line in lines if line.strip().startswith("debug*"))
    short = next(line for line in lines if line.strip().startswith("short"))
    assert "2 (2 free)" in debug and debug.rstrip().endswith("unlimited") and short.rstrip().endswith("5:00")
    assert "Your queue: empty" in out and "Problems: none" in out


def test_launch_two_nodes_follow_then_show(cluster_cli, slurm, capsys):
    code = main(["launch", cluster_cli, "--nnodes", "2", "--nproc", "1", "--workload", "linear", "--steps", "15",
                 "--batch-size", "8", "--follow", "--accept-new-host-key"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    assert "queued in Slurm (job " in captured.err
    with RunStore() as store:
        (run,) = store.list_runs()
        assert run.state == "finished" and run.hosts == ["hpc", "hpc"] and run.config["nnodes"] == 2
        assert [r["step"] for r in store.records(run.id)] == list(range(1, 16))
        job = run.environment["slurm"]["job_id"]
    # The profile's setup line ran in the job before the runner, on every node (srun passes the environment).
    assert wait_for(lambda: slurm.job_state(job)["JobState"] == "COMPLETED", 60)
    script = open(f"{run.run_dirs[0]}/job.sbatch").read()
    assert "export DDPGUI_SETUP_LINE_RAN=yes" in script and "#SBATCH --partition=debug" in script


def test_launch_then_stop_from_another_command(cluster_cli, slurm, capsys):
    assert main(["launch", cluster_cli, "--workload", "linear", "--steps", "100000", "--batch-size", "8",
                 "--accept-new-host-key"]) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    assert wait_for(lambda: any(j["state"] == "RUNNING" for j in slurm.jobs()), 120)
    with RunStore() as store:
        assert wait_for(lambda: _metrics_on_host(store.get_run(run_id).run_dirs[0]), 120)
    assert main(["stop", run_id]) == 0
    out = capsys.readouterr().out
    assert f"run {run_id} stopped" in out
    assert not slurm.jobs() and wait_for(lambda: not slurm.job_processes(), 30)


def test_a_sweep_keeps_its_queue_limit(cluster_cli, slurm, capsys):
    # max-queued-jobs 1: the sweep's second cell is submitted only once the first has ended.
    seen = []
    code_holder = {}

    def watch():
        return seen.append(len([j for j in slurm.jobs() if j["name"].startswith("ddpgui-")])) or False

    import threading
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            watch()
            stop.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        code_holder["code"] = main(["sweep", cluster_cli, "--workload", "linear", "--steps", "10", "--batch-size",
                                    "8", "--seed", "0,1", "--name", "seeds", "--accept-new-host-key"])
    finally:
        stop.set()
        sampler.join()
    captured = capsys.readouterr()
    assert code_holder["code"] == 0, captured.err[-3000:]
    with RunStore() as store:
        runs = store.list_runs()
        assert len(runs) == 2 and {r.state for r in runs} == {"finished"}
        jobs = {r.environment["slurm"]["job_id"] for r in runs}
    assert len(jobs) == 2 and max(seen) == 1, seen


def _metrics_on_host(run_dir: str) -> bool:
    try:
        with open(f"{run_dir}/metrics.jsonl") as fh:
            return len(fh.readlines()) >= 2
    except OSError:
        return False


def test_nnodes_on_a_host_that_is_no_cluster_is_refused_with_what_to_do(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DDPGUI_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DDPGUI_CONFIG_DIR", str(tmp_path / "config"))
    assert main(["launch", "local", "--nnodes", "2", "--workload", "linear", "--steps", "5"]) == 2
    err = capsys.readouterr().err
    assert "--nnodes 2 is for a Slurm cluster host, and local is not one" in err and "--nodes A,B" in err
    with RunStore() as store:
        assert store.list_runs() == []
