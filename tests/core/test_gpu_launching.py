"""A launch's GPU choice made into run settings (ddpgui.core.gpus.launching) on snapshots built from real
captures (tests/fixtures/gpu, SOURCES.md), and RunConfig's own check of ``gpus`` (the host checks it again)."""
import json

import pytest
from helpers.gpu_fixtures import GPU_FIXTURES

from ddpgui.core.gpus.launching import plan_gpus, with_gpus
from ddpgui.core.gpus.picker import GpuChoiceError, parse_gpu_choice
from ddpgui.core.gpus.snapshot import parse_snapshot_line
from ddpgui.core.runs.config import make_config
from remote_runner.config import ConfigError, RunConfig
from remote_runner.gpustate import parse_smi_table, snapshot


def table_host(name, host):
    """A plain nvidia-smi table as the monitor reports it (compute processes on their GPUs, owners unknown)."""
    table = parse_smi_table((GPU_FIXTURES / name).read_text())
    for gpu in table["gpus"]:
        gpu["processes"] = [{"pid": p["pid"], "user": "?", "command": p["name"], "gpu_mem_mib": p["gpu_mem_mib"],
                             "problem": "not captured"} for p in table["processes"]
                            if p["gpu"] == gpu["index"] and "C" in p["type"]]
    record = snapshot(1, "nvidia-smi", table["gpus"], None)
    record["host"] = host
    return parse_snapshot_line(json.dumps(record))


A40S = "smi_summary_a40_x8_510.txt"  # GPUs 1-4 free (Xorg only)
A40S_ERR = "smi_summary_a40_x8_err_525.txt"  # GPU 4 shows ERR!, a python process on GPU 2


def test_free_2_on_one_host_and_the_settings_it_gives():
    plan = plan_gpus({"a": table_host(A40S, "a")}, parse_gpu_choice("free:2"))
    assert plan.indices == (1, 2) and plan.warnings == []
    settings = plan.settings({"workload": "mlp", "env": {"NCCL_DEBUG": "INFO"}})
    assert settings["gpus"] == [1, 2] and settings["nproc_per_node"] == 2
    assert settings["env"] == {"NCCL_DEBUG": "INFO", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1,2"}
    cfg = make_config(settings)
    assert cfg.gpus == [1, 2] and cfg.nproc_per_node == 2 and cfg.env["CUDA_VISIBLE_DEVICES"] == "1,2"


def test_hosts_whose_free_gpus_differ_are_refused_with_a_choice_that_works():
    hosts = {"a": table_host(A40S, "a"), "b": table_host(A40S_ERR, "b")}
    with pytest.raises(GpuChoiceError) as caught:
        plan_gpus(hosts, parse_gpu_choice("free:2"))
    said = str(caught.value)
    assert said.startswith("--gpus free:2 picks different GPUs on different hosts (a: 1,2; b: ")
    assert "name the GPUs, e.g. --gpus 1,2" in caught.value.hint
    plan = plan_gpus(hosts, parse_gpu_choice("1,2"))  # named: the same on both, a busy one warns per host
    assert plan.indices == (1, 2) and plan.warnings and all(w.startswith("b: GPU 2 is busy: ") for w in plan.warnings)


def test_nproc_must_be_the_number_of_gpus():
    with pytest.raises(GpuChoiceError, match=r"--nproc 3 and --gpus free:2 disagree: 2 GPUs for 3 processes"):
        plan_gpus({"a": table_host(A40S, "a")}, parse_gpu_choice("free:2"), nproc=3)
    with pytest.raises(GpuChoiceError, match=r"--nproc 1 and --gpus 1,2 disagree"):
        plan_gpus({"a": table_host(A40S, "a")}, parse_gpu_choice("1,2"), nproc=[2, 1])
    assert plan_gpus({"a": table_host(A40S, "a")}, parse_gpu_choice("1,2"), nproc=[2]).indices == (1, 2)


@pytest.mark.parametrize("fields, said", [
    ({"gpus": [0, 0], "nproc_per_node": 2}, "each GPU may be named once, got 0,0"),
    ({"gpus": [-1]}, "GPU indices are whole numbers from 0, got -1"),
    ({"gpus": []}, "name at least one GPU"),
    ({"gpus": [0, 3], "nproc_per_node": 4}, "2 GPUs (0,3) for 4 processes per node"),
    ({"gpus": [0, 3], "nproc_per_node": 2, "env": {"CUDA_VISIBLE_DEVICES": "3,0"}},
     "given GPUs 0,3 but its environment sets CUDA_VISIBLE_DEVICES=3,0"),
])
def test_the_config_refuses_gpus_that_cannot_be_right(fields, said):
    with pytest.raises(ConfigError) as caught:
        RunConfig(**fields)
    assert caught.value.field == "gpus" and said in str(caught.value)


def test_the_config_round_trips_its_gpus():
    cfg = make_config(with_gpus({"workload": "mlp"}, [3, 0]))
    again = make_config(json.loads(cfg.to_json()))
    assert again.gpus == [3, 0] and again.env["CUDA_VISIBLE_DEVICES"] == "3,0" and again.nproc_per_node == 2
    assert make_config({"workload": "mlp"}).gpus is None
