"""Cluster profiles (kind slurm): their Slurm options validated field by field, time limits, the hosts file."""
import dataclasses
import json

import pytest

from ddpgui.core.hosts import (
    LOCAL,
    HostError,
    HostProfile,
    HostsFileError,
    HostStore,
    SlurmOptions,
    format_time_limit,
    local_profile,
    time_limit_seconds,
)

OLD_FILE = {"schema": 1, "hosts": [{"name": "box", "hostname": "10.0.0.1", "port": 2222, "user": "ana",
                                    "auth": "agent", "key_file": None, "proxy_jump": [], "python": "python3",
                                    "run_root": "~/.ddpgui", "price_per_hour": None, "notes": "",
                                    "nccl_env": {}, "rdzv_address": None}]}


def cluster(name="hpc", **slurm):
    return HostProfile(name=name, hostname="login.hpc.example.org", user="ana", run_root="/scratch/ana/ddpgui",
                       kind="slurm", slurm=SlurmOptions(**{"partition": "gpu", **slurm}))


def test_every_option_round_trips_through_the_hosts_file(tmp_path):
    profile = cluster(account="lab-42", qos="normal", time_limit="1-12:00:00", gpus_per_node=4,
                      gpu_flag="gpus-per-node", cpus_per_task=16, mem="64G",
                      sbatch_lines=["#SBATCH --constraint=a100", "  --exclusive "],
                      setup_lines=["module load cuda/12.1", "source ~/venv/bin/activate"], max_queued_jobs=3)
    assert profile.is_slurm and not gpu().is_slurm and profile.slurm.sbatch_lines == ["--constraint=a100",
                                                                                      "--exclusive"]
    assert HostProfile.from_json(profile.to_json()) == profile
    assert HostProfile.from_json(json.loads(json.dumps(profile.to_json()))) == profile
    store = HostStore(tmp_path / "hosts.json")
    store.add(profile)
    saved = json.loads((tmp_path / "hosts.json").read_text())["hosts"][1]
    assert saved["kind"] == "slurm" and saved["slurm"]["sbatch_lines"] == ["--constraint=a100", "--exclusive"]
    assert saved["slurm"]["gpu_flag"] == "gpus-per-node" and saved["slurm"]["cpus_per_task"] == 16
    assert HostStore(tmp_path / "hosts.json").get("hpc") == profile
    assert profile.slurm.time_limit_s == 36 * 3600


def test_a_hosts_file_from_before_clusters_loads_as_ssh_hosts(tmp_path):
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps(OLD_FILE))
    box = HostStore(path).get("box")
    assert (box.kind, box.slurm, box.is_slurm, box.port) == ("ssh", None, False, 2222)
    assert box.to_json() == {**OLD_FILE["hosts"][0], "kind": "ssh", "slurm": None}


def gpu(**fields):
    return HostProfile(**{"name": "gpu", "hostname": "gpu.example.org", **fields})


@pytest.mark.parametrize("options, field, words", [
    ({"partition": ""}, "slurm.partition", "needs a partition"),
    ({"partition": "gpu;rm -rf ~"}, "slurm.partition", "partition name"),
    ({"partition": "gpu long"}, "slurm.partition", "partition name"),
    ({"partition": "$(id)"}, "slurm.partition", "partition name"),
    ({"partition": "-x"}, "slurm.partition", "partition name"),
    ({"partition": "gpu,"}, "slurm.partition", "partition name"),
    ({"account": "lab`id`"}, "slurm.account", "one name"),
    ({"account": "a,b"}, "slurm.account", "one name"),
    ({"qos": "high|x"}, "slurm.qos", "one name"),
    ({"time_limit": "1:75"}, "slurm.time_limit", "not a Slurm time limit"),
    ({"time_limit": "two hours"}, "slurm.time_limit", "not a Slurm time limit"),
    ({"gpus_per_node": -1}, "slurm.gpus_per_node", ">= 0"),
    ({"gpus_per_node": True}, "slurm.gpus_per_node", ">= 0"),
    ({"gpu_flag": "gpus"}, "slurm.gpu_flag", "gres or gpus-per-node"),
    ({"cpus_per_task": 0}, "slurm.cpus_per_task", ">= 1"),
    ({"mem": "32 GB"}, "slurm.mem", "memory size"),
    ({"mem": "32G;id"}, "slurm.mem", "memory size"),
    ({"max_queued_jobs": 0}, "slurm.max_queued_jobs", ">= 1"),
    ({"sbatch_lines": ["--constraint=a100\necho pwned"]}, "slurm.sbatch_lines", "one line"),
    ({"sbatch_lines": ["--comment=a\rb"]}, "slurm.sbatch_lines", "one line"),
    ({"sbatch_lines": ["exclusive"]}, "slurm.sbatch_lines", "sbatch option"),
    ({"sbatch_lines": ["#SBATCH"]}, "slurm.sbatch_lines", "sbatch option"),
    ({"sbatch_lines": ["#SBATCH --partition=big"]}, "slurm.sbatch_lines", "field of its own"),
    ({"sbatch_lines": ["-t 10"]}, "slurm.sbatch_lines", "field of its own"),
    ({"sbatch_lines": ["--nodes=4"]}, "slurm.sbatch_lines", "ddpgui decides"),
    ({"sbatch_lines": ["--wait"]}, "slurm.sbatch_lines", "ddpgui decides"),
    ({"sbatch_lines": ["--gres=gpu:a100:2"], "gpus_per_node": 2}, "slurm.sbatch_lines", "asks for GPUs"),
    ({"sbatch_lines": "--exclusive"}, "slurm.sbatch_lines", "list of lines"),
    ({"setup_lines": ["module load cuda\nrm -rf ~"]}, "slurm.setup_lines", "one line"),
    ({"setup_lines": ["echo \x00"]}, "slurm.setup_lines", "one line"),
    ({"setup_lines": [3]}, "slurm.setup_lines", "list of lines"),
])
def test_each_bad_option_names_its_field(options, field, words):
    with pytest.raises(HostError) as info:
        cluster(**options)
    assert info.value.field == field and words in str(info.value), str(info.value)
    assert str(info.value).startswith(field + ":")


def test_a_bad_time_limit_says_the_accepted_formats():
    with pytest.raises(HostError) as info:
        cluster(time_limit="90m")
    assert "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS" in info.value.hint
    assert "empty for the partition's default" in info.value.hint


def test_options_with_a_field_of_their_own_point_to_it():
    with pytest.raises(HostError) as info:
        cluster(sbatch_lines=["--account=other"])
    assert "set the profile's account instead" in info.value.hint


def test_shell_lines_are_kept_as_written_and_gres_lines_are_fine_without_gpus_per_node():
    options = cluster(sbatch_lines=["--gres=gpu:a100:2", "-C a100&h100"],
                      setup_lines=["module load cuda/12 && source $HOME/venv/bin/activate", ""]).slurm
    assert options.setup_lines == ["module load cuda/12 && source $HOME/venv/bin/activate", ""]
    assert options.sbatch_lines == ["--gres=gpu:a100:2", "-C a100&h100"]


@pytest.mark.parametrize("profile, field, words", [
    (dict(kind="pbs"), "kind", "one of ssh, slurm"),
    (dict(kind="slurm"), "slurm.partition", "needs its Slurm options"),
    (dict(slurm=SlurmOptions(partition="gpu")), "slurm", "only a profile of kind slurm"),
])
def test_kind_and_slurm_options_go_together(profile, field, words):
    with pytest.raises(HostError) as info:
        gpu(**profile)
    assert info.value.field == field and words in str(info.value)


def test_this_computer_cannot_be_a_cluster(tmp_path):
    with pytest.raises(HostError) as info:
        HostProfile(name=LOCAL, kind="slurm", slurm=SlurmOptions(partition="gpu"), python="", run_root="")
    assert info.value.field == "kind" and "cannot be a Slurm cluster" in str(info.value)
    store = HostStore(tmp_path / "hosts.json")
    local = local_profile()
    local.kind, local.slurm = "slurm", SlurmOptions(partition="gpu")
    with pytest.raises(HostError):
        store.update(local)
    assert not (tmp_path / "hosts.json").exists()


@pytest.mark.parametrize("slurm, expected", [
    ({"partition": "gpu", "colour": "red"}, 'field "slurm.colour": unknown field'),
    ({"partition": 5}, 'field "slurm.partition": must be a string (got 5)'),
    ({"partition": "gpu", "gpus_per_node": "4"}, 'field "slurm.gpus_per_node": must be an integer (got "4")'),
    ({"partition": "gpu", "gpus_per_node": 1.5}, 'field "slurm.gpus_per_node": must be an integer (got 1.5)'),
    ({"partition": "gpu", "cpus_per_task": "8"}, 'field "slurm.cpus_per_task": must be an integer or null'),
    ({"partition": "gpu", "sbatch_lines": "--exclusive"}, 'field "slurm.sbatch_lines": must be a list of strings'),
    ({"partition": "gpu", "setup_lines": [1]}, 'field "slurm.setup_lines": must be a list of strings (got [1])'),
    ({"partition": "gpu", "max_queued_jobs": None}, 'field "slurm.max_queued_jobs": must be an integer (got null)'),
    ({"account": "lab"}, 'field "slurm.partition": a Slurm cluster needs a partition'),
    ({"partition": "gpu", "time_limit": "soon"}, 'field "slurm.time_limit": "soon" is not a Slurm time limit'),
    ({"partition": "gpu", "setup_lines": ["a\nb"]}, 'field "slurm.setup_lines": each setup line must be one line'),
    ("gpu", 'field "slurm": must be an object of Slurm options or null (got "gpu")'),
    ([], 'field "slurm": must be an object of Slurm options or null (got [])'),
])
def test_wrong_slurm_objects_in_the_file_name_host_and_field(tmp_path, slurm, expected):
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps({"schema": 1, "hosts": [{"name": "hpc", "hostname": "login", "kind": "slurm",
                                                        "slurm": slurm}]}))
    with pytest.raises(HostsFileError) as info:
        HostStore(path)
    assert str(info.value).startswith(f'hosts file {path}: host "hpc"') and expected in str(info.value), \
        str(info.value)


def test_kind_in_the_file_must_be_known(tmp_path):
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps({"schema": 1, "hosts": [{"name": "hpc", "hostname": "login", "kind": 3}]}))
    with pytest.raises(HostsFileError, match='field "kind": must be a string'):
        HostStore(path)
    path.write_text(json.dumps({"schema": 1, "hosts": [{"name": "hpc", "hostname": "login", "kind": "slurm"}]}))
    with pytest.raises(HostsFileError, match='field "slurm.partition": a Slurm cluster needs its Slurm options'):
        HostStore(path)


def test_switching_kinds_and_renaming_keep_the_options(tmp_path):
    store = HostStore(tmp_path / "hosts.json")
    store.add(cluster(gpus_per_node=2))
    store.rename("hpc", "cluster")
    assert store.get("cluster").slurm == SlurmOptions(partition="gpu", gpus_per_node=2)
    store.update(dataclasses.replace(store.get("cluster"), kind="ssh", slurm=None))
    assert not HostStore(tmp_path / "hosts.json").get("cluster").is_slurm


@pytest.mark.parametrize("text, seconds", [
    ("", None), ("90", 5400), ("1:30", 90), ("01:00:00", 3600), ("2-00", 172800), ("2-01:30", 178200),
    ("1-00:00:01", 86401), ("UNLIMITED", None), ("infinite", None), ("0", None), (" 30 ", 1800), ("90:00", 5400),
])
def test_time_limits_in_slurm_formats(text, seconds):
    assert time_limit_seconds(text) == seconds


@pytest.mark.parametrize("text", ["1:60", "1:00:60", "1-24", "1-2:3:4:5", "-5", "1h", "1.5", "1-", ":30", "1 - 2"])
def test_bad_time_limits_say_the_formats(text):
    with pytest.raises(ValueError, match="MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"):
        time_limit_seconds(text)


@pytest.mark.parametrize("seconds, text", [
    (3600, "1:00:00"), (172800, "2-00:00:00"), (None, "unlimited"), (90, "0:01:30"), (86399, "23:59:59"),
    (90061, "1-01:01:01"),
])
def test_format_time_limit_writes_what_slurm_reads_back(seconds, text):
    assert format_time_limit(seconds) == text
    if seconds is not None:
        assert time_limit_seconds(text) == seconds
