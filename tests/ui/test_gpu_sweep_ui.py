"""A sweep started from the app on the launch form's GPU choice ("Any N free" or chosen GPUs), on This computer
as a GPU host: nvidia-smi on PATH is the fake replaying a real capture (tests/fixtures/gpu, SOURCES.md), the runs
real torchrun with gloo on CPU.  The choice is made into the sweep's settings on the window's worker, with one
snapshot of the host (ddpgui.core.sweeps.gpus.sweep_gpus, what ``ddpgui sweep --gpus`` uses too)."""
import pytest
from helpers.gpu_snapshots import TITANS, fake_smi_on_path, monitor_snapshot, query_gpus

from ddpgui.ui.widgets.gpu_picker import CHOOSE, FREE

pytestmark = pytest.mark.slow
WAIT_MS = 300_000
V100S = "smi_query_v100_sxm3_32gb_x16.txt"


def _form(window, steps=5):
    window.launch_panel.apply_settings({"workload": "linear", "nproc_per_node": 1, "compile": "off",
                                        "precision": "fp32", "batch_size": 8, "steps": steps})


def _run_sweep(window, qtbot, parallel=False, repeats=2):
    dialog = window.new_sweep()
    qtbot.addWidget(dialog)
    dialog.repeats.setValue(repeats)
    dialog.parallel.setChecked(parallel)
    assert dialog.start_button.isEnabled(), dialog.error.text()
    assert dialog.cells == repeats
    dialog.start_button.click()
    bar = window.sweeps
    qtbot.waitUntil(lambda: bar.last is not None and bar.last.state in ("done", "failed"), timeout=WAIT_MS)
    runs = window.store.sweep_runs(bar.sweep_id)
    assert [r.state for r in runs] == ["finished"] * repeats, [(r.state, r.message) for r in runs]
    return bar, runs


def test_any_1_free_in_the_form_runs_every_cell_of_the_sweep_on_the_free_gpu(window, qtbot, tmp_path, monkeypatch):
    fake_smi_on_path(tmp_path, monkeypatch)  # 8x TITAN X: only GPU 0 is free
    _form(window)
    panel = window.launch_panel
    panel.set_gpu_snapshot("local", monitor_snapshot(query_gpus(TITANS), "titan-box"))
    panel.gpu_picker.mode.setCurrentText(FREE)
    assert panel.settings()["gpus"] == "free:1"
    bar, runs = _run_sweep(window, qtbot)
    for run in runs:  # resolved when the sweep started, stored with every run
        assert run.config["gpus"] == [0] and run.config["nproc_per_node"] == 1
        assert run.config["env"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert not bar.warnings and "warning" not in bar.label.text()


def test_a_chosen_busy_gpu_warns_in_the_sweeps_bar_and_runs(window, qtbot, tmp_path, monkeypatch):
    fake_smi_on_path(tmp_path, monkeypatch)
    _form(window)
    panel = window.launch_panel
    panel.set_gpu_snapshot("local", monitor_snapshot(query_gpus(TITANS), "titan-box"))
    panel.gpu_picker.mode.setCurrentText(CHOOSE)
    panel.gpu_picker.set_value([1])
    assert panel.settings()["gpus"] == [1]
    bar, runs = _run_sweep(window, qtbot, repeats=1)
    assert runs[0].config["gpus"] == [1]
    assert bar.warnings == ["GPU 1 is busy: 10032 MiB of 12206 MiB used, 86% utilised"]
    assert "1 warning (hover)" in bar.label.text()
    assert bar.label.toolTip().startswith("warning: GPU 1 is busy: 10032 MiB")


def test_a_parallel_sweep_from_the_app_places_its_cells_on_free_gpus(window, qtbot, tmp_path, monkeypatch):
    fake_smi_on_path(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_SMI_CAPTURE", V100S)  # 16x V100, most of them idle
    free = {g.index for g in monitor_snapshot(query_gpus(V100S), "v100-box").free_gpus()}
    _form(window)
    panel = window.launch_panel
    panel.set_gpu_snapshot("local", monitor_snapshot(query_gpus(V100S), "v100-box"))
    panel.gpu_picker.mode.setCurrentText(FREE)
    _, runs = _run_sweep(window, qtbot, parallel=True, repeats=2)
    for run in runs:
        (gpu,) = run.config["gpus"]
        assert gpu in free and run.config["env"]["CUDA_VISIBLE_DEVICES"] == str(gpu)


def test_a_choice_the_host_cannot_meet_is_said_in_the_sweeps_bar_and_starts_nothing(window, qtbot, tmp_path,
                                                                                   monkeypatch):
    fake_smi_on_path(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_SMI_LOST", "1")  # GPU 1 fell off the bus since the form was filled
    _form(window)
    panel = window.launch_panel
    panel.set_gpu_snapshot("local", monitor_snapshot(query_gpus(TITANS), "titan-box"))
    panel.gpu_picker.mode.setCurrentText(CHOOSE)
    panel.gpu_picker.set_value([1])
    dialog = window.new_sweep()
    qtbot.addWidget(dialog)
    dialog.start_button.click()
    bar = window.sweeps
    qtbot.waitUntil(lambda: bar.label.text().startswith("Sweep not started"), timeout=WAIT_MS)
    assert "has no GPU 1" in bar.label.text() and "it is lost: Unknown Error" in bar.label.text()
    assert window.store.list_sweeps() == [] and window.store.list_runs() == []


def test_the_sweep_dialog_takes_the_forms_free_choice_and_refuses_a_bad_one(window, qtbot):
    _form(window)
    window.launch_panel.apply_settings({"gpus": "free:2", "nproc_per_node": 2})
    dialog = window.new_sweep()
    qtbot.addWidget(dialog)
    assert dialog.start_button.isEnabled(), dialog.error.text()  # was: "config field 'gpus': expected a list"
    assert dialog.spec().base["gpus"] == "free:2"
    dialog.base["gpus"] = "free:x"
    assert not dialog.validate() and "setting gpus is refused" in dialog.error.text()
