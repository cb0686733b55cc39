"""Choosing GPUs on recorded hosts (ddpgui.core.gpus): the monitor's JSON line parsed and checked, the
"N of M GPUs free" rule, ``free:N`` and named indices, and the ``--gpus`` forms.

The snapshots are built the way the monitor builds them, from real captures (tests/fixtures/gpu,
SOURCES.md): 8x GTX TITAN X and 16x V100 (--query-gpu); 8x A40 shared by several jobs, 8x A40 with a GPU
showing ERR! and 8x A100 running one job (plain tables with their process lists).
"""
import json
import re

import pytest
from helpers.gpu_fixtures import GPU_FIXTURES

from ddpgui.core.gpus.picker import (
    GpuChoice,
    GpuChoiceError,
    check_indices,
    cuda_environment,
    parse_gpu_choice,
    pick_free,
    resolve_choice,
)
from ddpgui.core.gpus.snapshot import SnapshotError, parse_snapshot_line
from remote_runner.gpustate import new_gpu, parse_lost_line, parse_smi_table, read_query_output, snapshot


def monitor_line(gpus, host="gpu-box"):
    """The JSON line the monitor prints for these GPU entries (the CPU side left out)."""
    record = snapshot(1, "nvidia-smi", gpus, None)
    record["host"] = host
    return json.dumps(record)


def query_snapshot(name, host="gpu-box"):
    text = (GPU_FIXTURES / name).read_text()
    first, _, rest = text.partition("\n")
    fields = re.search(r"--query-gpu=(\S+)", first).group(1).split(",") if "noheader" in first else None
    gpus, other = read_query_output(rest if first.startswith("$ ") else text, "gpu", fields)
    assert not other
    return parse_snapshot_line(monitor_line(gpus, host))


def table_snapshot(name, host="gpu-box"):
    """A plain nvidia-smi table as the monitor would report it: the compute processes (type C) on their GPUs.

    Their owners were not captured: "?" (the monitor reads them from the host's /proc).
    """
    table = parse_smi_table((GPU_FIXTURES / name).read_text())
    for gpu in table["gpus"]:
        gpu["processes"] = [{"pid": p["pid"], "user": "?", "command": p["name"], "gpu_mem_mib": p["gpu_mem_mib"],
                             "problem": "not captured"} for p in table["processes"]
                            if p["gpu"] == gpu["index"] and "C" in p["type"]]
    return parse_snapshot_line(monitor_line(table["gpus"], host))


def a100_snapshot():
    """8x A100: every GPU holds a python process of the same job."""
    return table_snapshot("smi_summary_a100_sxm4_80gb_525.txt", "a100-box")


A40S = "smi_summary_a40_x8_510.txt"  # python3.8 on GPU 0, three julia processes on 5-7, Xorg everywhere
A40S_ERR = "smi_summary_a40_x8_err_525.txt"  # GPU 4 shows ERR!, a python process on GPU 2


TITANS = "smi_query_titanx_x8_noheader_nounits.txt"
V100S = "smi_query_v100_sxm3_32gb_x16.txt"


def test_the_free_rule_on_eight_titan_x():
    host = query_snapshot(TITANS)
    assert len(host.gpus) == 8 and host.summary() == "1 of 8 GPUs free"
    assert [gpu.index for gpu in host.free_gpus()] == [0]  # 802 MiB used, 0 %
    assert host.gpu(2).busy_reason() == "6442 MiB of 12206 MiB used, 85% utilised (its processes are not visible)"
    assert host.summary(memory_threshold_mib=800) == "0 of 8 GPUs free"


def test_free_2_on_a_shared_eight_gpu_machine():
    host = table_snapshot(A40S)
    # GPUs 1-4 hold only Xorg (a graphics process, 23 of their 26 MiB): free.
    assert host.summary() == "4 of 8 GPUs free" and [gpu.index for gpu in host.free_gpus()] == [1, 2, 3, 4]
    assert resolve_choice(host, parse_gpu_choice("free:2")) == ((1, 2), [])
    assert pick_free(host, 4) == (1, 2, 3, 4)
    with pytest.raises(GpuChoiceError, match="has 4 of 8 free"):
        pick_free(host, 5)
    assert cuda_environment(pick_free(host, 2))["CUDA_VISIBLE_DEVICES"] == "1,2"


def test_a_busy_choice_on_the_shared_machine_names_each_holder():
    indices, warnings = resolve_choice(table_snapshot(A40S), parse_gpu_choice("0,5,1"))
    assert indices == (0, 5, 1)
    assert warnings == ["GPU 0 is busy: an unknown user's python3.8 (pid 1807667, 29117 MiB)",
                        "GPU 5 is busy: an unknown user's julia (pid 2970647, 42633 MiB)"]


def test_a_gpu_showing_err_is_never_picked_nor_accepted():
    host = table_snapshot(A40S_ERR)
    assert host.summary() == "6 of 8 GPUs free"  # GPU 2 holds a process, GPU 4 shows ERR!
    assert pick_free(host, 2) == (0, 1) and 4 not in pick_free(host, 6)
    with pytest.raises(GpuChoiceError, match="GPU 4 of gpu-box cannot run anything: it reports errors: "
                                             "nvidia-smi shows ERR! for temperature, power, utilization"):
        check_indices(host, (3, 4))


def test_free_2_picks_the_idlest_free_gpus():
    host = query_snapshot(V100S)
    # 5 MiB used and 0 % on GPUs 0, 3, 5, 6, 9, 10, 11, 13, 14, 15; 7 MiB on 2; 445 MiB on 8; the rest work.
    assert host.summary() == "12 of 16 GPUs free"
    assert pick_free(host, 2) == (0, 3)
    assert pick_free(host, 11)[-1] == 2 and pick_free(host, 12)[-1] == 8
    assert resolve_choice(host, parse_gpu_choice("free:2")) == ((0, 3), [])


def test_free_2_on_eight_titan_x_is_refused_with_who_is_busy():
    with pytest.raises(GpuChoiceError) as refused:
        pick_free(query_snapshot(TITANS), 2)
    message = str(refused.value)
    assert "free:2 asks for 2 free GPUs, but gpu-box has 1 of 8 free (0)" in message
    assert "GPU 1: 10032 MiB of 12206 MiB used, 86% utilised" in message
    assert "--gpus 0,3" in refused.value.hint
    assert pick_free(query_snapshot(TITANS), 1) == (0,)


def test_processes_make_a_gpu_busy_whatever_its_memory():
    host = a100_snapshot()
    assert host.summary() == "0 of 8 GPUs free"
    with pytest.raises(GpuChoiceError, match="0 of 8 free"):
        pick_free(host, 1)


def test_a_busy_choice_warns_naming_who_holds_the_gpu():
    indices, warnings = resolve_choice(a100_snapshot(), parse_gpu_choice("0,3"))
    assert indices == (0, 3)
    assert warnings == ["GPU 0 is busy: an unknown user's ...-m4-2023-02-28/bin/python (pid 280058, 22374 MiB)",
                        "GPU 3 is busy: an unknown user's ...-m4-2023-02-28/bin/python (pid 280061, 15992 MiB)"]
    assert check_indices(query_snapshot(TITANS), (0,)) == []


def test_a_named_user_is_shown_by_name():
    host = parse_snapshot_line(monitor_line([dict(new_gpu(0), mem_used_mib=15992, processes=[
        {"pid": 4242, "user": "alice", "command": "python train.py", "gpu_mem_mib": 15992, "problem": None}])]))
    assert check_indices(host, (0,)) == ["GPU 0 is busy: alice's python train.py (pid 4242, 15992 MiB)"]


def test_a_gpu_the_host_lacks_or_a_lost_one_is_refused():
    with pytest.raises(GpuChoiceError, match=r"gpu-box has no GPU 9 \(its GPUs: 0, 1, 2, 3, 4, 5, 6, 7\)"):
        check_indices(query_snapshot(TITANS), (0, 9))
    lost = parse_lost_line((GPU_FIXTURES / "smi_lost_unknown_error.txt").read_text())
    lost["index"] = 1
    host = parse_snapshot_line(monitor_line([new_gpu(0), lost]))
    assert host.summary() == "1 of 2 GPUs free"
    with pytest.raises(GpuChoiceError, match="GPU 1 of gpu-box cannot run anything: it is lost: Unknown Error"):
        check_indices(host, (1,))


def test_a_cpu_host():
    host = parse_snapshot_line(monitor_line([], "laptop"))
    assert host.summary() == "no GPUs"
    with pytest.raises(GpuChoiceError, match="laptop has no GPUs"):
        pick_free(host, 1)


@pytest.mark.parametrize("text, choice", [("0,3", GpuChoice(indices=(0, 3))), (" 7 ", GpuChoice(indices=(7,))),
                                          ("free:2", GpuChoice(free_count=2)), ("FREE:1", GpuChoice(free_count=1))])
def test_the_gpus_forms(text, choice):
    assert parse_gpu_choice(text) == choice
    assert str(choice) in ("0,3", "7", "free:2", "free:1")


@pytest.mark.parametrize("text, says", [("", "--gpus is empty"), ("free", "'free' needs a count"),
                                        ("free:x", "'free' needs a count"), ("free:0", "at least one GPU"),
                                        ("0,,3", "an index is missing"), ("a", "'a' is not a GPU index"),
                                        ("-1", "'-1' is not a GPU index"), ("1.5", "'1.5' is not a GPU index"),
                                        ("0,0", "GPU 0 is named twice")])
def test_bad_gpus_forms_are_refused(text, says):
    with pytest.raises(GpuChoiceError, match=re.escape(says)) as refused:
        parse_gpu_choice(text)
    assert refused.value.hint


def test_the_environment_numbers_gpus_as_nvidia_smi_does():
    assert cuda_environment((0, 3)) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0,3"}


def good_line():
    return json.loads(monitor_line([new_gpu(0)]))


@pytest.mark.parametrize("change, says", [
    (lambda r: r.update(v=2), "snapshot version 2; this ddpgui reads 1"),
    (lambda r: r.pop("gpus"), "snapshot.gpus is missing"),
    (lambda r: r.update(kind="run"), "snapshot.kind: expected 'host_snapshot'"),
    (lambda r: r["gpus"][0].update(state="melted"), "gpus[0].state: expected one of ok, lost, error"),
    (lambda r: r["gpus"][0].update(mem_used_mib="abc"), 'gpus[0].mem_used_mib: expected a whole number, got "abc"'),
    (lambda r: r["gpus"][0].update(processes=[{"pid": "x"}]), "gpus[0].processes[0].pid: expected a whole number"),
    (lambda r: r.update(gpus=[3]), "gpus[0]: expected an object, got 3"),
])
def test_malformed_snapshots_name_the_field(change, says):
    record = good_line()
    change(record)
    with pytest.raises(SnapshotError, match=re.escape(says)):
        parse_snapshot_line(json.dumps(record))


def test_a_line_that_is_not_json():
    with pytest.raises(SnapshotError, match="not JSON") as refused:
        parse_snapshot_line("Traceback (most recent call last):")
    assert "deploy" in refused.value.hint

