"""Launch 2-process CPU runs on This computer through the launch panel; watch them; stop one."""
import pytest

pytestmark = pytest.mark.slow


def _launch(window, qtbot, steps: int) -> str:
    panel = window.launch_panel
    panel.workload.setCurrentText("mlp")
    panel.nproc.setValue(2)
    panel.compile.setCurrentText("off")
    panel.precision.setCurrentText("fp32")
    panel.batch.setValue(8)
    panel.length_unit.setCurrentText("steps")
    panel.length.setValue(steps)
    assert panel.launch_button.isEnabled(), panel.error.text()
    before = window.dashboard.run_id
    panel.launch_button.click()
    qtbot.waitUntil(lambda: window.dashboard.run_id not in (None, before), timeout=90_000)
    return window.dashboard.run_id


def _points(window) -> int:
    x, _ = window.dashboard.loss_plot.curve_data(f"{window.dashboard.run_id}:ema")
    return 0 if x is None else len(x)


def test_launch_watch_and_finish(window, qtbot):
    run_id = _launch(window, qtbot, steps=30)
    assert window.tabs.currentWidget() is window.dashboard
    qtbot.waitUntil(lambda: _points(window) > 3, timeout=90_000)
    x, y = window.dashboard.loss_plot.curve_data(f"{run_id}:raw")
    assert x.dtype.kind == "f" and len(x) == len(y)
    model = window.runs_table.model
    assert model.row_of(run_id) >= 0
    qtbot.waitUntil(lambda: model.runs[model.row_of(run_id)].state == "finished", timeout=90_000)
    assert "finished" in window.statusBar().currentMessage()


def test_stop_a_long_run(window, qtbot):
    from ddpgui.ui.widgets.runs_table import COLUMNS

    run_id = _launch(window, qtbot, steps=1_000_000)
    model = window.runs_table.model
    qtbot.waitUntil(lambda: window.dashboard.live.step > 0, timeout=90_000)
    assert window.dashboard.stop_button.isEnabled()
    window.dashboard.stop_button.click()
    qtbot.waitUntil(lambda: model.runs[model.row_of(run_id)].state == "stopped", timeout=60_000)
    assert not window.dashboard.stop_button.isEnabled() or window.dashboard.live.state == "stopped"
    index = model.index(model.row_of(run_id), COLUMNS.index("State"))
    assert model.data(index) == "stopped"
