"""``ddpgui hosts add/edit/list/show`` with Slurm clusters (--kind slurm): options, errors naming what to add."""
import json

import pytest

from ddpgui.cli import main as cli_main
from ddpgui.core.hosts import HostStore, SlurmOptions


@pytest.fixture(autouse=True)
def dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("DDPGUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("DDPGUI_DATA_DIR", str(tmp_path / "data"))
    return tmp_path


def _saved(tmp_path) -> dict:
    return {h["name"]: h for h in json.loads((tmp_path / "config" / "hosts.json").read_text())["hosts"]}


ADD_HPC = ["hosts", "add", "hpc", "--kind", "slurm", "--host", "login.hpc.example.org", "--port", "2200",
           "--user", "ana", "--auth", "key", "--key-file", "~/.ssh/id_hpc", "--python", "~/venv/bin/python",
           "--run-root", "/scratch/ana/ddpgui", "--partition", "gpu,gpu-long", "--account", "lab-42",
           "--qos", "normal", "--time-limit", "1-12:00:00", "--gpus-per-node", "4", "--gpu-flag", "gpus-per-node",
           "--cpus-per-task", "16", "--mem", "64G", "--sbatch-line=--constraint=a100",
           "--sbatch-line", "#SBATCH --exclusive", "--setup-line", "module load cuda/12.1",
           "--setup-line", "source ~/venv/bin/activate", "--max-queued-jobs", "3"]


def test_add_a_cluster_with_every_option(dirs, capsys):
    assert cli_main(ADD_HPC) == 0
    assert "added hpc" in capsys.readouterr().out
    hpc = _saved(dirs)["hpc"]
    assert (hpc["kind"], hpc["hostname"], hpc["port"], hpc["user"], hpc["auth"]) == \
        ("slurm", "login.hpc.example.org", 2200, "ana", "key")
    assert hpc["run_root"] == "/scratch/ana/ddpgui" and hpc["python"] == "~/venv/bin/python"
    assert hpc["slurm"] == {"partition": "gpu,gpu-long", "account": "lab-42", "qos": "normal",
                            "time_limit": "1-12:00:00", "gpus_per_node": 4, "gpu_flag": "gpus-per-node",
                            "cpus_per_task": 16, "mem": "64G", "sbatch_lines": ["--constraint=a100", "--exclusive"],
                            "setup_lines": ["module load cuda/12.1", "source ~/venv/bin/activate"],
                            "max_queued_jobs": 3}


def test_list_shows_the_kind_and_json_has_every_field(dirs, capsys):
    assert cli_main(["hosts", "add", "box", "--host", "10.0.0.1"]) == 0
    assert cli_main(["hosts", "add", "tiny", "--kind", "slurm", "--host", "login", "--partition", "debug"]) == 0
    capsys.readouterr()
    assert cli_main(["hosts", "list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "slurm:debug login:22" in lines["tiny"] and "slurm" not in lines["box"]
    assert lines["box"].split()[1] == "10.0.0.1:22" and "this computer" in lines["local"]
    assert cli_main(["hosts", "list", "--json"]) == 0
    profiles = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert profiles["tiny"]["kind"] == "slurm" and profiles["tiny"]["slurm"]["partition"] == "debug"
    assert profiles["tiny"]["slurm"]["max_queued_jobs"] == 8 and profiles["tiny"]["slurm"]["gpu_flag"] == "gres"
    assert (profiles["box"]["kind"], profiles["box"]["slurm"]) == ("ssh", None)


def test_show_prints_the_slurm_options(dirs, capsys):
    assert cli_main(ADD_HPC) == 0
    capsys.readouterr()
    assert cli_main(["hosts", "show", "hpc"]) == 0
    rows = [line.split(":", 1) for line in capsys.readouterr().out.splitlines()]
    shown = [(label, value.strip()) for label, value in rows]
    for row in [("kind", "Slurm cluster"), ("login node", "ana@login.hpc.example.org:2200"),
                ("partition", "gpu,gpu-long"), ("time limit", "1-12:00:00"),
                ("gpus", "4 per node (--gpus-per-node=4)"), ("#SBATCH", "--constraint=a100"),
                ("#SBATCH", "--exclusive"), ("setup", "source ~/venv/bin/activate"), ("max queued jobs", "3")]:
        assert row in shown, (row, shown)
    assert cli_main(["hosts", "show", "hpc", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == HostStore().get("hpc").to_json()


def test_edit_changes_only_the_options_given_and_clears_lists(dirs):
    assert cli_main(ADD_HPC) == 0
    assert cli_main(["hosts", "edit", "hpc", "--qos", "", "--mem", "0", "--cpus-per-task", "0",
                     "--no-sbatch-lines", "--setup-line", "module load cuda/12.4"]) == 0
    slurm = HostStore().get("hpc").slurm
    assert slurm == SlurmOptions(partition="gpu,gpu-long", account="lab-42", qos="", time_limit="1-12:00:00",
                                 gpus_per_node=4, gpu_flag="gpus-per-node", cpus_per_task=None, mem="0",
                                 sbatch_lines=[], setup_lines=["module load cuda/12.4"], max_queued_jobs=3)
    assert cli_main(["hosts", "edit", "hpc", "--no-setup-lines", "--host", "login2.hpc.example.org"]) == 0
    hpc = HostStore().get("hpc")
    assert hpc.slurm.setup_lines == [] and hpc.hostname == "login2.hpc.example.org" and hpc.port == 2200


def test_edit_turns_an_ssh_host_into_a_cluster_and_back(dirs, capsys):
    assert cli_main(["hosts", "add", "box", "--host", "10.0.0.1", "--run-root", "/shared/runs"]) == 0
    assert cli_main(["hosts", "edit", "box", "--kind", "slurm"]) == 2
    assert "needs a partition" in capsys.readouterr().err
    assert not HostStore().get("box").is_slurm
    assert cli_main(["hosts", "edit", "box", "--kind", "slurm", "--partition", "debug"]) == 0
    box = HostStore().get("box")
    assert box.is_slurm and box.slurm == SlurmOptions(partition="debug") and box.run_root == "/shared/runs"
    assert cli_main(["hosts", "edit", "box", "--time-limit", "30"]) == 0  # a cluster keeps its kind
    assert HostStore().get("box").slurm.time_limit == "30"
    assert cli_main(["hosts", "edit", "box", "--kind", "ssh"]) == 0
    box = HostStore().get("box")
    assert (box.kind, box.slurm) == ("ssh", None)


@pytest.mark.parametrize("argv, message, hint", [
    (["hosts", "add", "box", "--host", "10.0.0.1", "--partition", "gpu"],
     "--partition is an option of Slurm clusters", "add --kind slurm"),
    (["hosts", "add", "box", "--host", "10.0.0.1", "--partition", "gpu", "--mem", "4G"],
     "--partition, --mem are options of Slurm clusters", "add --kind slurm"),
    (["hosts", "add", "box", "--kind", "ssh", "--host", "10.0.0.1", "--gpus-per-node", "2"],
     "--gpus-per-node is an option of Slurm clusters, not of --kind ssh", "leave out --kind ssh"),
    (["hosts", "add", "c", "--kind", "slurm", "--host", "login"],
     "a Slurm cluster needs a partition", "add --partition NAME"),
    (["hosts", "add", "c", "--kind", "slurm", "--host", "login", "--partition", "gpu;reboot"],
     "slurm.partition: must be a partition name", "gpu,gpu-long"),
    (["hosts", "add", "c", "--kind", "slurm", "--host", "login", "--partition", "gpu", "--time-limit", "2h"],
     'slurm.time_limit: "2h" is not a Slurm time limit', "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"),
    (["hosts", "add", "c", "--kind", "slurm", "--host", "login", "--partition", "gpu", "--gpus-per-node", "-1"],
     "slurm.gpus_per_node: must be a whole number >= 0", ""),
    (["hosts", "add", "c", "--kind", "slurm", "--host", "login", "--partition", "gpu", "--setup-line", "a\nb"],
     "slurm.setup_lines: each setup line must be one line", "a line of its own"),
    (["hosts", "add", "c", "--kind", "slurm", "--host", "login", "--partition", "gpu",
      "--sbatch-line=--partition=big"], 'slurm.sbatch_lines: "--partition=big" sets --partition, which has a field',
     "partition instead"),
    (["hosts", "add", "c", "--kind", "slurm", "--host", "login", "--partition", "gpu",
      "--sbatch-line", "exclusive"], "slurm.sbatch_lines: an #SBATCH line must be an sbatch option", "--exclusive"),
    (["hosts", "add", "c", "--kind", "slurm", "--host", "login", "--partition", "gpu", "--max-queued-jobs", "0"],
     "slurm.max_queued_jobs: must be a whole number >= 1", ""),
    (["hosts", "edit", "local", "--kind", "slurm", "--partition", "gpu"], "kind: This computer runs here", ""),
])
def test_refused_options_say_what_to_do_and_save_nothing(dirs, capsys, argv, message, hint):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"ddpgui: {message}"), err
    assert hint in (err[1] if len(err) > 1 else ""), err
    assert not (dirs / "config" / "hosts.json").exists() or set(_saved(dirs)) == {"local"}


def test_slurm_options_on_an_ssh_host_point_to_kind_slurm(dirs, capsys):
    assert cli_main(["hosts", "add", "box", "--host", "10.0.0.1"]) == 0
    capsys.readouterr()
    assert cli_main(["hosts", "edit", "box", "--no-setup-lines"]) == 2
    err = capsys.readouterr().err
    assert "--no-setup-lines is an option of Slurm clusters, and box is an SSH host" in err
    assert "add --kind slurm (with --partition) to make box a Slurm cluster" in err
    assert _saved(dirs)["box"]["slurm"] is None
