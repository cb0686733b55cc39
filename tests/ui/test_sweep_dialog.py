"""The New sweep dialog and the sweeps bar: live validation, a real sweep on This computer, resume after a restart."""
import time

import pytest
from PySide6.QtCore import QSettings, Qt

from ddpgui.core.hosts import HostStore
from ddpgui.core.store import RunStore, SweepCell, SweepRecord
from ddpgui.ui.dialogs.sweep import SweepDialog
from ddpgui.ui.widgets.sweeps_bar import STEPS


def _tiny_launch_form(window, steps=10):
    window.launch_panel.apply_settings({"workload": "linear", "nproc_per_node": 1, "compile": "off",
                                        "precision": "fp32", "batch_size": 8, "steps": steps})


def _check_only(widget, values):
    for i in range(widget.count()):
        item = widget.item(i)
        item.setCheckState(Qt.CheckState.Checked if item.text() in values else Qt.CheckState.Unchecked)


def test_a_bad_axis_value_shows_the_error_and_disables_start(window, qtbot):
    _tiny_launch_form(window)
    dialog = window.new_sweep()
    qtbot.addWidget(dialog)
    assert isinstance(dialog, SweepDialog) and dialog.isVisible()
    assert dialog.start_button.isEnabled() and dialog.count.text().startswith("1 run")
    nproc = dialog.commas["nproc_per_node"]
    nproc.setText("1,0")
    assert not dialog.start_button.isEnabled()
    assert "nproc = 0 is refused" in dialog.error.text() and dialog.error.isVisible()
    nproc.setText("1,two")
    assert not dialog.start_button.isEnabled() and "'two' is not a whole number" in dialog.error.text()
    nproc.setText("1,1")
    assert not dialog.start_button.isEnabled() and "more than once" in dialog.error.text()
    _check_only(dialog.host_list, [])
    nproc.setText("1,2")
    assert not dialog.start_button.isEnabled() and "at least one host" in dialog.error.text()
    _check_only(dialog.host_list, ["This computer"])  # as the user reads it; the spec says "local"
    _check_only(dialog.checks["precision"], ["fp32", "bf16"])
    dialog.repeats.setValue(2)
    assert dialog.start_button.isEnabled() and not dialog.error.isVisible()
    assert dialog.cells == 8 and dialog.count.text().startswith("8 runs")
    spec = dialog.spec()
    assert spec.matrix == {"precision": ["fp32", "bf16"], "nproc_per_node": [1, 2]} and spec.repeats == 2
    assert spec.base["workload"] == "linear" and spec.base["steps"] == 10 and "precision" not in spec.base
    dialog.reject()


@pytest.mark.slow
def test_a_real_sweep_started_from_the_dialog_reaches_100_percent(window, qtbot):
    _tiny_launch_form(window, steps=10)
    dialog = window.new_sweep()
    dialog.name.setText("gui sweep")
    _check_only(dialog.checks["precision"], ["fp32", "bf16"])
    assert dialog.cells == 2, dialog.error.text()
    dialog.start_button.click()
    bar = window.sweeps
    qtbot.waitUntil(lambda: bar.last is not None and bar.last.state == "done", timeout=300_000)
    assert bar.bar.value() == STEPS == bar.bar.maximum()
    assert "2 of 2 cells done" in bar.label.text() and bar.bar.isVisible()
    assert not bar.stop_button.isVisible()
    runs = window.store.sweep_runs(bar.sweep_id)
    assert [r.state for r in runs] == ["finished", "finished"] and all(r.last_step == 10 for r in runs)
    assert bar.compare_button.isVisible()
    bar.compare_button.click()  # the finished sweep opens in the Compare tab
    compare = window.compare
    qtbot.waitUntil(lambda: compare.comparison is not None and not compare.busy, timeout=60_000)
    assert window.tabs.currentWidget() is compare
    assert sorted(compare.run_ids) == sorted(r.id for r in runs)
    assert [g.label for g in compare.comparison.groups] == ["fp32", "bf16"]


def _open(qtbot, tmp_path):
    from ddpgui.ui.main_window import MainWindow

    win = MainWindow(store=RunStore(tmp_path / "runs.db"), hosts=HostStore(tmp_path / "hosts.json"),
                     settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(win)
    win.show()
    return win


def test_reopening_the_window_offers_to_resume_an_unfinished_sweep(qtbot, tmp_path):
    store = RunStore(tmp_path / "runs.db")
    # The app closed while this sweep was running: its only cell had ended, the sweep not yet marked done.
    store.create_sweep(SweepRecord(id="sw-open", name="left running", hosts=["local"], state="running",
                                   started_at=time.time()),
                       [SweepCell(sweep_id="", index=0, label="precision=fp32", host="local",
                                  settings={"workload": "linear", "steps": 3}, state="done",
                                  started_at=time.time() - 5, ended_at=time.time() - 1)])
    store.create_sweep(SweepRecord(id="sw-over", name="long over", hosts=["local"], state="done"), [])
    store.close()

    first = _open(qtbot, tmp_path)
    qtbot.waitUntil(lambda: first.sweeps.resume_button.isVisible(), timeout=10_000)
    assert "left running" in first.sweeps.resume_button.text() and "more" not in first.sweeps.resume_button.text()
    first.close()

    second = _open(qtbot, tmp_path)
    bar = second.sweeps
    qtbot.waitUntil(lambda: bar.resume_button.isVisible(), timeout=10_000)
    assert "Resume sweep “left running”" == bar.resume_button.text()
    bar.resume_button.click()
    qtbot.waitUntil(lambda: bar.last is not None and bar.last.state == "done", timeout=60_000)
    assert not bar.resume_button.isVisible()
    assert bar.bar.value() == STEPS and "1 of 1 cells done" in bar.label.text()
    assert second.store.get_sweep("sw-open").state == "done"
    second.close()
