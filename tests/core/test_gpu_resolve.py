"""The one check of a launch's GPU choice that the CLI and the app's launch (and rerun) share:
ddpgui.core.gpus.launching.resolve_gpus on snapshots built from real captures (tests/fixtures/gpu), the
choice as the launch form stores it in the settings, and a stored run's config rerun against a fresh snapshot
(its GPU now busy warns; now lost or missing refuses, naming it)."""
import dataclasses
import json

import pytest
from helpers.gpu_snapshots import A40S, TITANS, monitor_snapshot, query_gpus, query_snapshot, table_snapshot, with_lost

from ddpgui.core.gpus.launching import resolve_gpus, settings_choice, with_gpus, without_gpu_env
from ddpgui.core.gpus.picker import GpuChoice, GpuChoiceError, parse_gpu_choice
from ddpgui.core.runs.config import make_config
from ddpgui.core.runs.loglines import event_lines
from ddpgui.core.store import RunRecord


class Snapshots:
    """``snapshot_of`` over fixed snapshots, counting the snapshots taken per host."""

    def __init__(self, **snapshots):
        self.snapshots, self.taken = snapshots, []

    def __call__(self, host):
        self.taken.append(host)
        return self.snapshots[host]


def never_slurm(host):
    return False


def stored(settings: dict) -> dict:
    """A run's config as the store keeps it (made, written as JSON, read back)."""
    return json.loads(make_config(settings).to_json())


def test_the_forms_choice_any_2_free_on_the_shared_a40s():
    snapshots = Snapshots(a=table_snapshot(A40S))
    settings, warnings = resolve_gpus({"workload": "mlp", "nproc_per_node": 2, "gpus": "free:2"}, ["a"],
                                      snapshots, never_slurm)
    assert settings["gpus"] == [1, 2] and settings["nproc_per_node"] == 2 and warnings == []
    assert settings["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1,2"}
    assert snapshots.taken == ["a"]  # one snapshot of the host
    assert make_config(settings).gpus == [1, 2]


def test_chosen_busy_gpus_warn_naming_who_holds_them_and_still_run():
    settings, warnings = resolve_gpus({"workload": "mlp", "nproc_per_node": 2, "gpus": [0, 5]}, ["a"],
                                      Snapshots(a=table_snapshot(A40S)), never_slurm)
    assert settings["gpus"] == [0, 5] and settings["env"]["CUDA_VISIBLE_DEVICES"] == "0,5"
    assert warnings == ["GPU 0 is busy: an unknown user's python3.8 (pid 1807667, 29117 MiB)",
                        "GPU 5 is busy: an unknown user's julia (pid 2970647, 42633 MiB)"]


def test_without_a_choice_nothing_is_snapshotted():
    snapshots = Snapshots()
    settings = {"workload": "mlp", "nproc_per_node": 2, "env": {"CUDA_VISIBLE_DEVICES": "1"}}
    assert resolve_gpus(settings, ["a"], snapshots, never_slurm) == (settings, [])
    assert snapshots.taken == []


def test_a_rerun_checks_its_stored_gpus_again_on_a_fresh_snapshot():
    config = stored(with_gpus({"workload": "mlp", "env": {"NCCL_DEBUG": "INFO"}}, [0, 3]))
    assert config["env"]["CUDA_VISIBLE_DEVICES"] == "0,3"  # written by with_gpus: not the user's, no contradiction
    rerun = dict(config, run_id="")
    # still free (A40S: GPUs 1-4 free; 0 is busy since): the same GPUs, a warning naming GPU 0's holder
    settings, warnings = resolve_gpus(rerun, ["a"], Snapshots(a=table_snapshot(A40S)), never_slurm)
    assert settings["gpus"] == [0, 3] and settings["env"] == {"NCCL_DEBUG": "INFO", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                                                              "CUDA_VISIBLE_DEVICES": "0,3"}
    assert warnings == ["GPU 0 is busy: an unknown user's python3.8 (pid 1807667, 29117 MiB)"]
    # GPU 3 fell off the bus since: refused, naming it and what the host has left
    lost = monitor_snapshot(with_lost(query_gpus(TITANS), 3), "titan-box")
    with pytest.raises(GpuChoiceError) as refused:
        resolve_gpus(rerun, ["a"], Snapshots(a=lost), never_slurm)
    assert str(refused.value).startswith("titan-box has no GPU 3 (its GPUs: 0, 1, 2, 4, 5, 6, 7); a GPU without "
                                         "an index (bus ")
    assert "it is lost: Unknown Error" in str(refused.value) and refused.value.hint
    # a host with fewer GPUs: GPU 3 is missing
    two = monitor_snapshot(query_gpus(TITANS)[:2], "small-box")
    with pytest.raises(GpuChoiceError, match=r"small-box has no GPU 3 \(its GPUs: 0, 1\)"):
        resolve_gpus(rerun, ["a"], Snapshots(a=two), never_slurm)


def test_any_n_free_is_kept_with_the_run_and_a_rerun_picks_free_gpus_again():
    """A run given "any 2 free" stores what it got (gpus) and how (gpu_choice): its rerun picks the GPUs free
    now, not the ones it had, and never warns about them."""
    first, _ = resolve_gpus({"workload": "mlp", "nproc_per_node": 2, "gpus": "free:2"}, ["a"],
                            Snapshots(a=table_snapshot(A40S)), never_slurm)
    config = stored(first)
    assert config["gpus"] == [1, 2] and config["gpu_choice"] == "free:2"
    assert settings_choice(config) == GpuChoice(free_count=2)
    busy_now = table_snapshot(A40S)  # GPUs 1 and 2 are taken since: the rerun goes to the next free ones
    gpus = [g if g.index not in (1, 2) else dataclasses.replace(g, mem_used_mib=20000) for g in busy_now.gpus]
    settings, warnings = resolve_gpus(dict(config, run_id=""), ["a"],
                                      Snapshots(a=dataclasses.replace(busy_now, gpus=tuple(gpus))), never_slurm)
    assert settings["gpus"] == [3, 4] and settings["env"]["CUDA_VISIBLE_DEVICES"] == "3,4" and warnings == []
    assert settings["gpu_choice"] == "free:2" and make_config(settings).gpu_choice == "free:2"
    # named GPUs keep no gpu_choice: a rerun of those asks for the same GPUs
    named, _ = resolve_gpus(dict(config, run_id=""), ["a"], Snapshots(a=table_snapshot(A40S)), never_slurm,
                            choice=parse_gpu_choice("3,4"))
    assert "gpu_choice" not in named and named["gpus"] == [3, 4]
    with pytest.raises(Exception, match="gpu_choice"):  # a choice without the GPUs it chose is refused
        make_config({"workload": "mlp", "gpu_choice": "free:2"})


def test_a_users_own_cuda_visible_devices_beside_a_choice_is_refused():
    with pytest.raises(GpuChoiceError, match="both choose the run's GPUs"):
        resolve_gpus({"nproc_per_node": 1, "gpus": [0], "env": {"CUDA_VISIBLE_DEVICES": "2"}}, ["a"],
                     Snapshots(a=table_snapshot(A40S)), never_slurm)
    with pytest.raises(GpuChoiceError, match="both choose the run's GPUs"):
        resolve_gpus({"nproc_per_node": 1, "gpus": "free:1", "env": {"CUDA_VISIBLE_DEVICES": "0"}}, ["a"],
                     Snapshots(a=table_snapshot(A40S)), never_slurm)


def test_refusals_before_any_snapshot():
    snapshots = Snapshots(a=table_snapshot(A40S))
    with pytest.raises(GpuChoiceError, match="on cluster, a Slurm cluster: there the scheduler gives a job its GPUs"):
        resolve_gpus({"nproc_per_node": 1, "gpus": "free:1"}, ["cluster"], snapshots, lambda host: True)
    with pytest.raises(GpuChoiceError, match="--nproc 3 and --gpus free:2 disagree"):
        resolve_gpus({"nproc_per_node": 3}, ["a"], snapshots, never_slurm, choice=parse_gpu_choice("free:2"))
    with pytest.raises(GpuChoiceError, match="'x' is not a GPU index"):
        resolve_gpus({"nproc_per_node": 1, "gpus": "x"}, ["a"], snapshots, never_slurm)
    assert snapshots.taken == []


def test_too_few_free_is_refused_naming_the_busy_ones():
    with pytest.raises(GpuChoiceError) as refused:
        resolve_gpus({"nproc_per_node": 2, "gpus": "free:2"}, ["t"], Snapshots(t=query_snapshot(TITANS)), never_slurm)
    assert "free:2 asks for 2 free GPUs, but gpu-box has 1 of 8 free (0)" in str(refused.value)


def test_two_nodes_get_the_same_gpus_and_warnings_per_node():
    snapshots = Snapshots(a=table_snapshot(A40S, "a"), b=query_snapshot(TITANS))
    settings, warnings = resolve_gpus({"nproc_per_node": 1, "gpus": [1]}, ["a", "b"], snapshots, never_slurm)
    assert settings["gpus"] == [1] and sorted(snapshots.taken) == ["a", "b"]
    assert warnings == ["b: GPU 1 is busy: 10032 MiB of 12206 MiB used, 86% utilised (its processes are not visible)"]


@pytest.mark.parametrize("value, choice", [(None, None), ([0, 3], GpuChoice(indices=(0, 3))),
                                           ("free:2", GpuChoice(free_count=2)), ("1,0", GpuChoice(indices=(1, 0)))])
def test_the_settings_forms_of_the_choice(value, choice):
    assert settings_choice({"gpus": value}) == choice


@pytest.mark.parametrize("value", [[0, "1"], [True], {"a": 1}, 3])
def test_a_settings_choice_that_is_not_one(value):
    with pytest.raises(GpuChoiceError, match="gpus: expected GPU indices or 'free:N'") as refused:
        settings_choice({"gpus": value})
    assert refused.value.hint


def test_only_the_environment_the_choice_wrote_is_dropped():
    config = stored(with_gpus({"workload": "mlp", "env": {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}}, [2]))
    assert config["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "2"}
    assert without_gpu_env(config)["env"] is None
    mine = {"gpus": [2], "env": {"CUDA_VISIBLE_DEVICES": "3", "A": "1"}}  # not what the choice writes: kept
    assert without_gpu_env(mine) is mine
    assert without_gpu_env({"gpus": [2], "env": {"CUDA_VISIBLE_DEVICES": "2", "A": "1"}})["env"] == {"A": "1"}


def test_the_started_line_names_the_gpus():
    run = RunRecord(id="r", name="r", host="local", state="running",
                    config=stored(with_gpus({"workload": "mlp", "precision": "fp32", "compile": "off",
                                             "batch_size": 8}, [1, 0])))
    (line,) = event_lines({"event": "started", "t": 0, "world_size": 2}, run)
    assert line.endswith("run started on This computer · 2 processes · GPUs 1,0 · mlp ×2 fp32 compile=off batch=8")
