"""Precision choices the host cannot run are disabled, with the reason as tooltip."""
from PySide6.QtCore import Qt

from remote_runner.config import PRECISIONS

# A probe report shaped as remote_runner.probe writes it, for a V100 (compute capability 7.0), as in
# tests/fixtures/gpu/smi_query_v100_sxm3_32gb_x16.txt.
V100_PROBE = {
    "schema": 1, "hostname": "gpu-box", "cpu_count": 48, "best_device": "cuda",
    "driver_version": "535.104.05", "driver_cuda_version": "12.2",
    "torch": {"version": "2.4.0+cu121", "cuda_build": "12.1", "cuda_available": True, "cpu_fp16_autocast": True},
    "gpus": [{"index": i, "name": "Tesla V100-SXM3-32GB", "memory_total_gib": 31.7, "compute_capability": "7.0",
              "bf16": False} for i in range(4)],
    "problems": [],
}


def _precision_items(window):
    model = window.launch_panel.precision.model()
    return {PRECISIONS[row]: model.item(row) for row in range(len(PRECISIONS))}


def test_v100_disables_bf16_and_tf32_with_the_reason(window):
    window.set_probe("local", V100_PROBE)
    items = _precision_items(window)
    assert items["fp32"].isEnabled() and items["fp16"].isEnabled()
    for precision in ("bf16", "tf32"):
        assert not items[precision].isEnabled()
        tip = items[precision].data(Qt.ItemDataRole.ToolTipRole)
        assert "compute capability 8.0" in tip and "7.0" in tip
    assert window.launch_panel.nproc.maximum() == 4
    assert "Tesla V100-SXM3-32GB" in window.hosts_panel.item("local").text()


def test_a_disabled_precision_cannot_be_launched(window):
    panel = window.launch_panel
    panel.precision.setCurrentText("bf16")
    window.set_probe("local", V100_PROBE)
    assert panel.precision.currentText() == "fp32"  # moved off the precision the host cannot do
    panel.precision.setCurrentText("bf16")  # forced programmatically: validation still refuses it
    assert not panel.launch_button.isEnabled()
    assert "compute capability 8.0" in panel.error.text()


def test_inline_validation_names_the_field(window):
    panel = window.launch_panel
    panel.advanced.setChecked(True)
    panel.env.setPlainText("=oops")
    assert not panel.launch_button.isEnabled()
    assert "env" in panel.error.text()
    panel.env.setPlainText("OMP_NUM_THREADS=1")
    assert panel.launch_button.isEnabled()


def test_the_model_size_is_an_advanced_setting_of_built_in_workloads(window):
    """The size make gpu-check found a GPU needs: in Advanced for a built-in workload, carried into the run's
    settings and back by Duplicate; a user's script has no such row."""
    panel = window.launch_panel
    panel.workload.setCurrentText("transformer")
    assert "model_size" not in panel.settings()  # Advanced closed: the runner's "auto" (large on a GPU)
    panel.advanced.setChecked(True)
    assert panel.advanced_form.isRowVisible(panel.model_size) and panel.model_size.currentText() == "auto"
    assert "43 M" in panel.model_size.toolTip() and "GPU" in panel.model_size.toolTip()
    panel.model_size.setCurrentText("large")
    settings = panel.settings()
    assert settings["model_size"] == "large" and panel.launch_button.isEnabled()
    assert not panel.hint.isVisible()  # This computer not probed yet: it may have a GPU
    window.set_probe("local", {"schema": 1, "hostname": "laptop", "cpu_count": 8, "best_device": "cpu", "gpus": [],
                               "torch": {"version": "2.5.1+cpu"}, "problems": []})
    assert panel.hint.isVisible() and "sized for a GPU" in panel.hint.text() and panel.launch_button.isEnabled()
    window.set_probe("local", V100_PROBE)
    assert not panel.hint.isVisible()  # a GPU host: large is what auto gives it
    panel.model_size.setCurrentText("auto")
    panel.apply_settings(settings)
    assert panel.model_size.currentText() == "large" and panel.advanced.isChecked()
    panel.workload.setCurrentText("my own script")
    assert not panel.advanced_form.isRowVisible(panel.model_size) and "model_size" not in panel.settings()
