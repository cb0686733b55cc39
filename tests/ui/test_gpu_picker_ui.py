"""The launch form's GPU row (ddpgui/ui/widgets/gpu_picker.py) with real Qt offscreen, fed snapshots built
from real captures (tests/fixtures/gpu: 8x A40 shared by several jobs, 8x GTX TITAN X), and one launch from a
real main window on This computer with the fake nvidia-smi (replaying the TITAN X capture) on PATH: the
ranks (tests/fixtures/scripts/envdump, real torchrun on CPU with gloo) see the chosen GPU, the run stores it,
and its rerun checks it again on a fresh snapshot."""
import dataclasses
import json
from pathlib import Path

import pytest
from helpers.gpu_snapshots import (
    A40S,
    TITANS,
    fake_smi_on_path,
    monitor_snapshot,
    query_gpus,
    query_snapshot,
    table_snapshot,
    with_lost,
)
from PySide6.QtCore import Qt

from ddpgui.core.gpus.launching import with_gpus
from ddpgui.core.hosts.slurm_options import SlurmOptions
from ddpgui.ui.widgets.gpu_picker import ALL, CHOOSE, FREE
from ddpgui.ui.widgets.launch_panel import LaunchPanel

REPO = Path(__file__).resolve().parents[2]
ENVDUMP = REPO / "tests" / "fixtures" / "scripts" / "envdump"
WAIT_MS = 240_000  # the machine is shared and slow: generous

#: A probe report as remote_runner.probe writes it for the 8x A40 machine of smi_summary_a40_x8_510.txt.
A40_PROBE = {
    "schema": 1, "hostname": "a40-box", "cpu_count": 64, "best_device": "cuda", "driver_version": "510.47.03",
    "torch": {"version": "2.4.0+cu121", "cuda_build": "12.1", "cuda_available": True, "cpu_fp16_autocast": True},
    "gpus": [{"index": i, "name": "NVIDIA A40", "memory_total_gib": 45.0, "compute_capability": "8.6", "bf16": True}
             for i in range(8)],
    "problems": [],
}


@pytest.fixture
def panel(qtbot):
    panel = LaunchPanel()
    qtbot.addWidget(panel)
    panel.resize(460, 900)
    panel.show()
    panel.set_host("a40-box", A40_PROBE)
    return panel


def items(panel):
    lst = panel.gpu_picker.list
    return [lst.item(row) for row in range(lst.count())]


def check(panel, index, on=True):
    item = next(i for i in items(panel) if i.data(Qt.ItemDataRole.UserRole) == index)
    item.setCheckState(Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)


def test_choose_lists_each_gpus_state_and_a_busy_choice_names_its_holder(panel):
    panel.set_gpu_snapshot("a40-box", table_snapshot(A40S, "a40-box"))
    picker = panel.gpu_picker
    assert picker.isEnabled() and not picker.list.isVisible() and picker.mode.currentText() == ALL
    assert picker.summary.text() == "the host's default · 4 of 8 GPUs free now"
    panel.nproc.setValue(2)
    picker.mode.setCurrentText(CHOOSE)
    assert picker.list.isVisible() and picker.chosen == [1, 2]  # the free ones, as many as the processes
    texts = [item.text() for item in items(panel)]
    assert texts[:2] == ["0 · busy: an unknown user's python3.8 (28.4 GiB)", "1 · free"]
    assert texts[5] == "5 · busy: an unknown user's julia (41.6 GiB)" and len(texts) == 8
    assert not picker.warning.isVisible()
    check(panel, 0)
    assert picker.warning.isVisible()
    assert picker.warnings() == ["GPU 0 is busy: an unknown user's python3.8 (pid 1807667, 29117 MiB)"]
    assert panel.nproc.value() == 3 and not panel.nproc.isEnabled()  # one process per GPU chosen
    settings = panel.settings()
    assert settings["gpus"] == [1, 2, 0] and settings["nproc_per_node"] == 3
    assert panel.launch_button.isEnabled(), panel.error.text()  # a busy GPU only warns
    check(panel, 0, on=False)
    check(panel, 1, on=False)
    assert panel.settings()["gpus"] == [2] and panel.nproc.value() == 1 and not picker.warning.isVisible()
    check(panel, 2, on=False)  # none chosen: refused, on the GPU row
    assert not panel.launch_button.isEnabled() and "name at least one GPU" in panel.error.text()
    assert panel.invalid_field == "gpus" and picker.mode.property("invalid") is True
    picker.mode.setCurrentText(ALL)
    assert "gpus" not in panel.settings() and panel.nproc.isEnabled() and panel.launch_button.isEnabled()


def test_a_lost_gpu_is_shown_and_cannot_be_chosen(panel):
    panel.set_gpu_snapshot("a40-box", monitor_snapshot(with_lost(query_gpus(TITANS), 5), "titan-box"))
    panel.gpu_picker.mode.setCurrentText(CHOOSE)
    (lost,) = [item for item in items(panel) if "lost" in item.text()]
    assert lost.text() == "? · lost: Unknown Error (bus 0000:0B:00.0)"
    assert not lost.flags() & Qt.ItemFlag.ItemIsUserCheckable and not lost.flags() & Qt.ItemFlag.ItemIsEnabled
    assert "It cannot be chosen" in lost.toolTip()
    assert len(items(panel)) == 8 and [i.data(Qt.ItemDataRole.UserRole) for i in items(panel)][:5] == [0, 1, 2, 3, 4]


def test_any_2_free_gives_the_settings_and_warns_when_fewer_are_free_now(panel):
    picker = panel.gpu_picker
    picker.mode.setCurrentText(FREE)
    panel.nproc.setValue(2)
    assert panel.settings()["gpus"] == "free:2" and panel.settings()["nproc_per_node"] == 2
    assert panel.launch_button.isEnabled(), panel.error.text()  # no snapshot yet: resolved at launch
    assert picker.summary.text() == "2 free, picked at launch"
    panel.set_gpu_snapshot("a40-box", query_snapshot(TITANS, "titan-box"))
    assert picker.summary.text() == "2 free, picked at launch · 1 of 8 GPUs free now"
    assert picker.warnings() == ["a40-box has 1 of 8 GPUs free now: the launch refuses 2 free ones unless some "
                                 "are freed (or choose them)"]
    panel.nproc.setValue(1)
    assert picker.warnings() == [] and panel.settings()["gpus"] == "free:1"


def test_apply_settings_round_trips_the_choice(panel, qtbot):
    panel.set_gpu_snapshot("a40-box", table_snapshot(A40S, "a40-box"))
    panel.gpu_picker.mode.setCurrentText(CHOOSE)
    check(panel, 1, on=False)
    check(panel, 2, on=False)
    check(panel, 3)
    check(panel, 1)
    chosen = panel.settings()
    assert chosen["gpus"] == [3, 1]
    other = LaunchPanel()
    qtbot.addWidget(other)
    other.set_host("a40-box", A40_PROBE)
    other.apply_settings(json.loads(json.dumps(chosen)))  # as the remembered form is kept
    assert other.settings() == chosen and other.gpu_picker.mode.currentText() == CHOOSE
    # before any snapshot the list is the probe's GPUs, their state not known yet; the choice is kept
    assert [i.checkState() == Qt.CheckState.Checked for i in items(other)] == [False, True, False, True] + [False] * 4
    assert items(other)[0].text() == "0 · NVIDIA A40 (state not known yet)"
    other.apply_settings(dict(chosen, gpus="free:2", nproc_per_node=2))
    assert other.settings()["gpus"] == "free:2" and other.gpu_picker.mode.currentText() == FREE
    other.apply_settings({k: v for k, v in chosen.items() if k != "gpus"})
    assert "gpus" not in other.settings() and other.gpu_picker.mode.currentText() == ALL


def test_a_duplicated_runs_stored_gpus_and_their_environment(panel):
    stored = with_gpus({"workload": "mlp", "precision": "fp32", "compile": "off", "batch_size": 8, "lr": 0.01,
                        "env": {"NCCL_DEBUG": "INFO"}}, [4, 2])
    panel.apply_settings(stored)
    settings = panel.settings()
    assert settings["gpus"] == [4, 2] and settings["nproc_per_node"] == 2
    assert settings["env"] == {"NCCL_DEBUG": "INFO"}  # what the choice wrote is not the user's environment
    assert panel.launch_button.isEnabled(), panel.error.text()


def test_cpu_hosts_and_slurm_clusters_disable_the_row_saying_why(panel):
    picker = panel.gpu_picker
    picker.mode.setCurrentText(FREE)
    panel.set_host("laptop", {"schema": 1, "cpu_count": 6, "best_device": "cpu", "gpus": [], "torch": {}}, "Laptop")
    assert not picker.isEnabled() and "gpus" not in panel.settings()
    assert picker.toolTip() == "Laptop has no GPUs (Test connection found none): the run uses its CPUs"
    assert picker.summary.text() == "Laptop has no GPUs"
    panel.set_host("box", None)
    assert picker.isEnabled() and panel.settings()["gpus"].startswith("free:")  # not known: it may have GPUs
    picker.mode.setCurrentText(CHOOSE)  # nothing known of its GPUs: said, and nothing to check
    assert [(i.text(), bool(i.flags())) for i in items(panel)] == [
        ("no GPUs known yet: Test connection, or use Any N free", False)]
    assert panel.settings()["gpus"] == [] and not panel.launch_button.isEnabled()
    picker.mode.setCurrentText(FREE)
    panel.set_gpu_snapshot("box", monitor_snapshot([], "box"))
    assert not picker.isEnabled() and "its GPU monitor finds none" in picker.toolTip()
    panel.set_host("cluster", None, "Cluster", cluster=SlurmOptions(partition="gpu", gpus_per_node=4))
    assert not picker.isEnabled() and "gpus" not in panel.settings()
    assert picker.toolTip().startswith("On a Slurm cluster the scheduler gives each job its GPUs")
    assert picker.summary.text() == "the Slurm scheduler gives them"
    panel.set_host("a40-box", A40_PROBE)
    assert picker.isEnabled() and picker.mode.currentText() == FREE  # the choice comes back with the host


def _rank_envs(out_dir: Path) -> dict[int, dict]:
    return {int(path.stem[4:]): json.loads(path.read_text()) for path in out_dir.glob("rank*.json")}


@pytest.mark.slow
def test_launch_on_a_chosen_busy_gpu_from_the_window_and_rerun_it(window, qtbot, tmp_path, monkeypatch):
    fake_smi_on_path(tmp_path, monkeypatch)
    panel, out_dir = window.launch_panel, tmp_path / "ranks"
    panel.set_gpu_snapshot("local", monitor_snapshot(query_gpus(TITANS), "titan-box"))
    panel.workload.setCurrentText("my own script")
    panel.script_dir.setText(str(ENVDUMP))
    panel.script_args.setText(f"--out {out_dir}")
    panel.gpu_picker.mode.setCurrentText(CHOOSE)
    assert panel.gpu_picker.chosen == [0]  # the only free one
    check(panel, 1)
    check(panel, 0, on=False)
    assert panel.gpu_picker.warnings() == [
        "GPU 1 is busy: 10032 MiB of 12206 MiB used, 86% utilised (its processes are not visible)"]
    assert panel.launch_button.isEnabled(), panel.error.text()
    panel.launch_button.click()
    qtbot.waitUntil(lambda: window.dashboard.run_id is not None, timeout=WAIT_MS)
    run_id = window.dashboard.run_id
    # checked on a fresh snapshot by the launch's worker (the real monitor, its nvidia-smi the fake: an empty
    # process list, so no "not visible"): the warning shows in the launch panel, not blocking
    assert panel.warning.text() == "Warning: GPU 1 is busy: 10032 MiB of 12206 MiB used, 86% utilised"
    model = window.runs_table.model
    qtbot.waitUntil(lambda: model.runs[model.row_of(run_id)].state in ("finished", "failed"), timeout=WAIT_MS)
    record = window.store.get_run(run_id)
    assert record.state == "finished", record.message
    assert record.config["gpus"] == [1] and record.config["nproc_per_node"] == 1
    ranks = _rank_envs(out_dir)
    assert sorted(ranks) == [0]
    assert ranks[0]["env"]["CUDA_VISIBLE_DEVICES"] == "1" and ranks[0]["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    # GPU 1 fell off the bus since: the rerun checks the stored GPU again and refuses, naming it
    monkeypatch.setenv("FAKE_SMI_LOST", "1")
    window.run_action("rerun", [run_id])
    qtbot.waitUntil(lambda: panel.error.isVisible() and "Launch failed" in panel.error.text(), timeout=WAIT_MS)
    assert "has no GPU 1 (its GPUs: 0, 2, 3, 4, 5, 6, 7); a GPU without an index (bus " in panel.error.text()
    assert "it is lost: Unknown Error" in panel.error.text()
    assert [run.id for run in window.store.list_runs()] == [run_id]  # nothing launched


def test_a_new_snapshot_of_the_same_gpus_updates_the_list_in_place(panel, qtbot):
    """The window feeds a snapshot every 2 s: the list of a 16-GPU host (it scrolls) keeps its rows, its scroll
    position and what is checked, and only its texts change; a host with other GPUs gets a new list."""
    v100 = "smi_query_v100_sxm3_32gb_x16.txt"
    first = query_snapshot(v100, "a40-box")
    panel.set_gpu_snapshot("a40-box", first)
    picker = panel.gpu_picker
    picker.mode.setCurrentText(CHOOSE)
    before = items(panel)
    assert len(before) == 16
    bar = picker.list.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0)  # laid out: 16 rows in a list of 8
    bar.setValue(bar.maximum())
    scrolled = bar.value()
    chosen = list(picker.chosen)
    gpus = [dataclasses.replace(g, util_pct=99.0, mem_used_mib=(g.mem_used_mib or 0) + 2048) for g in first.gpus]
    panel.set_gpu_snapshot("a40-box", dataclasses.replace(first, seq=first.seq + 1, gpus=tuple(gpus)))
    after = items(panel)
    assert after == before and all(a is b for a, b in zip(after, before))  # the same rows
    assert bar.value() == scrolled > 0
    assert picker.chosen == chosen
    assert "busy: " in after[0].text() and after[0].text() != "0 · free"  # 2 GiB more used: busy now
    panel.set_gpu_snapshot("a40-box", table_snapshot(A40S, "a40-box"))  # 8 GPUs: a new list
    assert len(items(panel)) == 8
