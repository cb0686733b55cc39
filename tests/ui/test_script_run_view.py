"""A real script-mode run launched from the launch panel (the nanoGPT-style fixture script, 2 gloo processes):
the dashboard header and the runs table show steps and a rate, no total or ETA from a made-up length, and no
workload settings the script never had."""
import os

import pytest

from ddpgui.ui.widgets.launch_panel import SCRIPT, SCRIPT_LENGTH, LaunchPanel
from ddpgui.ui.widgets.runs_table import COLUMNS

GPTLIKE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "scripts", "gptlike")


def test_the_launch_panel_sends_no_length_for_a_script_unless_given(qtbot):
    panel = LaunchPanel()
    qtbot.addWidget(panel)
    panel.workload.setCurrentText(SCRIPT)
    panel.script_dir.setText(GPTLIKE)
    assert panel.length_unit.currentText() == SCRIPT_LENGTH and not panel.length.isEnabled()
    settings = panel.settings()
    assert settings["mode"] == "script" and not {"steps", "epochs", "minutes"} & set(settings)
    panel.length_unit.setCurrentText("steps")
    panel.length.setValue(5000)
    assert panel.length.isEnabled() and panel.settings()["steps"] == 5000
    panel.workload.setCurrentText("mlp")  # a built-in workload always has a length
    assert panel.length_unit.findText(SCRIPT_LENGTH) < 0 and panel.settings()["steps"] == 5000


@pytest.mark.slow
def test_the_header_and_the_table_of_a_script_run(window, qtbot):
    panel = window.launch_panel
    panel.workload.setCurrentText(SCRIPT)
    panel.script_dir.setText(GPTLIKE)
    panel.script_args.setText("--max_iters=8")
    panel.nproc.setValue(2)
    assert panel.launch_button.isEnabled(), panel.error.text()
    panel.launch_button.click()
    qtbot.waitUntil(lambda: window.dashboard.run_id is not None, timeout=90_000)
    run_id = window.dashboard.run_id
    qtbot.waitUntil(lambda: window.store.get_run(run_id).state in ("finished", "failed"), timeout=240_000)
    run = window.store.get_run(run_id)
    assert run.state == "finished", (run.message, run.hint)
    board = window.dashboard
    qtbot.waitUntil(lambda: board.stats.text().startswith("step 8 "), timeout=20_000)
    stats = board.stats.text()
    assert stats.startswith("step 8   ·   loss "), stats
    assert "ETA" not in stats and "/200" not in stats and "samples/s" not in stats, stats
    assert "steps/s" in stats and "elapsed" in stats, stats
    model = window.runs_table.model
    qtbot.waitUntil(lambda: model.row_of(run_id) >= 0 and model.runs[model.row_of(run_id)].state == "finished",
                    timeout=20_000)
    cell = lambda column: model.data(model.index(model.row_of(run_id), COLUMNS.index(column)))  # noqa: E731
    assert (cell("Workload"), cell("Step"), cell("Processes")) == ("train.py", "8", "2 × CPU")
    assert cell("Compile") == "" and cell("Precision") == ""
    assert run.name == "train.py 2x" and run.total_steps is None
