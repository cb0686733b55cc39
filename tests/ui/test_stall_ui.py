"""Stall detection in the window: a real run of tests/fixtures/scripts/stalling (it trains, sleeps silently, trains,
announces an evaluation, trains) launched from the launch panel of a real main window whose thresholds come
from its settings (made small for the test): "stalled?" in the runs table and the header during the sleep,
cleared after, the evaluation shown as a phase, one notification; the Stall detection dialog; automatic stop."""
import os

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtGui import QAction

from ddpgui.core.hosts import HostStore
from ddpgui.core.runs.stalls import StallPolicy
from ddpgui.core.store import RunStore
from ddpgui.ui.dialogs.stall_settings import StallSettingsDialog
from ddpgui.ui.widgets.dashboard_header import MIN_WIDTH
from ddpgui.ui.widgets.launch_panel import SCRIPT
from ddpgui.ui.widgets.runs_table import COLUMNS

STALLING = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "scripts",
                        "stalling")
#: Generous: two busy shared cores, torch imported by torchrun and the rank.
RUN_TIMEOUT_MS = 300_000


def make_window(qtbot, tmp_path, **stalls):
    """A main window on private stores, its settings holding ``stalls/<name>`` before it starts."""
    from ddpgui.ui.main_window import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    for key, value in stalls.items():
        settings.setValue(f"stalls/{key}", value)
    settings.sync()
    win = MainWindow(store=RunStore(tmp_path / "runs.db"), hosts=HostStore(tmp_path / "hosts.json"),
                     settings=settings)
    qtbot.addWidget(win)
    win.show()
    return win


@pytest.fixture
def windows(qtbot, tmp_path):
    made = []
    yield lambda **stalls: made.append(make_window(qtbot, tmp_path, **stalls)) or made[-1]
    for win in made:
        win.close()


def launch_script(window, qtbot, args: str) -> str:
    panel = window.launch_panel
    panel.workload.setCurrentText(SCRIPT)
    panel.script_dir.setText(STALLING)
    panel.script_args.setText(args)
    panel.nproc.setValue(1)
    assert panel.launch_button.isEnabled(), panel.error.text()
    panel.launch_button.click()
    qtbot.waitUntil(lambda: window.dashboard.run_id is not None, timeout=90_000)
    return window.dashboard.run_id


def state_cell(window, run_id: str, role=None):
    model = window.runs_table.model
    row = model.row_of(run_id)
    if row < 0:
        return None
    index = model.index(row, COLUMNS.index("State"))
    return model.data(index) if role is None else model.data(index, role)


def recorded_notifications(window, monkeypatch) -> list:
    calls = []
    real = window.notify

    def notify(text, warning=False, details=""):
        calls.append((text, warning, details))
        real(text, warning, details)

    monkeypatch.setattr(window, "notify", notify)
    return calls


@pytest.mark.slow
def test_a_run_that_sleeps_is_flagged_in_the_table_and_header_notified_once_and_cleared(windows, qtbot, monkeypatch):
    window = windows(silence_factor="5", min_silence_s="3")
    assert window.stall_alerts.policy == StallPolicy(silence_factor=5, min_silence_s=3)
    notes = recorded_notifications(window, monkeypatch)
    width = window.width()
    run_id = launch_script(window, qtbot, "--steps=8 --stall=15 --eval=8 --step_s=0.25")
    board = window.dashboard

    qtbot.waitUntil(lambda: state_cell(window, run_id) == "stalled?", timeout=RUN_TIMEOUT_MS)
    tip = state_cell(window, run_id, 3)  # Qt.ItemDataRole.ToolTipRole
    assert "stalled? no metrics for " in tip and "processes (supervisor, torchrun, ranks) alive" in tip, tip
    assert window.store.get_run(run_id).last_step == 8  # flagged during the sleep after step 8
    qtbot.waitUntil(lambda: board.stall.isVisible() and board.stall.text().startswith("stalled? · no metrics for "),
                    timeout=20_000)
    assert board.stall.toolTip() == board.stall.text() and board.stall.sizeHint().width() == MIN_WIDTH
    assert window.width() == width  # the long line elides: the window keeps its width

    # cleared once the steps come again; the announced evaluation is a phase in the header, never "stalled?"
    qtbot.waitUntil(lambda: state_cell(window, run_id) == "running", timeout=RUN_TIMEOUT_MS)
    qtbot.waitUntil(lambda: board.stall.text().startswith("in evaluation"), timeout=RUN_TIMEOUT_MS)
    assert state_cell(window, run_id) == "running"
    qtbot.waitUntil(lambda: window.store.get_run(run_id).state in ("finished", "failed"), timeout=RUN_TIMEOUT_MS)
    run = window.store.get_run(run_id)
    assert run.state == "finished", (run.message, window.store.log_tail(run_id, "stderr.log")[-2000:])
    qtbot.waitUntil(lambda: state_cell(window, run_id) == "finished" and not board.stall.isVisible(), timeout=20_000)

    stalls = [n for n in notes if "stalled?" in n[0]]
    assert len(stalls) == 1, notes
    text, warning, details = stalls[0]
    assert text.startswith(f"Run {run.name} stalled? no metrics for ") and warning, stalls
    assert details.splitlines()[-1].startswith("step 8 loss "), details


@pytest.mark.slow
def test_a_stalled_run_is_stopped_automatically_with_a_warning_kept(windows, qtbot):
    window = windows(silence_factor="5", min_silence_s="3", auto_stop_after_s="2")
    run_id = launch_script(window, qtbot, "--steps=6 --stall=600 --step_s=0.25")
    qtbot.waitUntil(lambda: window.store.get_run(run_id).state in ("stopped", "finished", "failed"),
                    timeout=RUN_TIMEOUT_MS)
    run = window.store.get_run(run_id)
    assert run.state == "stopped" and run.last_step == 6, (run.state, run.message)
    warnings = [e for e in window.store.events(run_id) if e.get("event") == "warning" and e.get("source") == "client"]
    assert len(warnings) == 1, warnings
    assert warnings[0]["message"].startswith("stopped automatically: stalled? no metrics for "), warnings
    assert "2.0 s after it was flagged" in warnings[0]["message"], warnings


def test_the_settings_dialog_refuses_a_bad_value_naming_it_and_saves_a_good_one(windows, qtbot):
    window = windows()
    assert window.stall_alerts.policy == StallPolicy()  # nothing saved: the defaults (automatic stop off)
    window.findChild(QAction, "menu_stalls").trigger()  # Settings ▸ Stall detection…
    dialog = window.findChild(StallSettingsDialog, "stall_settings")
    assert dialog.isVisible() and dialog.fields["auto_stop_after_s"].text() == ""

    dialog.fields["min_silence_s"].setText("three")
    dialog.accept()
    assert dialog.isVisible() and dialog.error.isVisible()
    assert dialog.error.text().startswith("Minimum silence (s): 'three' is not a number"), dialog.error.text()
    assert "border" in dialog.fields["min_silence_s"].styleSheet()
    dialog.fields["min_silence_s"].setText("30")
    dialog.fields["gpu_idle_pct"].setText("150")
    dialog.accept()
    assert dialog.isVisible() and dialog.error.text().startswith("GPU idle below (%): 150.0 is not usable")
    assert "from 0 to 100" in dialog.error.text() and dialog.fields["min_silence_s"].styleSheet() == ""
    assert window.settings.value("stalls/min_silence_s") is None  # nothing kept from a refused form

    dialog.fields["gpu_idle_pct"].setText("2")
    dialog.fields["auto_stop_after_s"].setText("600")
    dialog.accept()
    assert not dialog.isVisible()
    expected = StallPolicy(min_silence_s=30, gpu_idle_pct=2, auto_stop_after_s=600)
    assert window.stall_alerts.policy == expected and window.stall_alerts.watch.policy == expected
    window.settings.sync()
    reread = QSettings(window.settings.fileName(), QSettings.Format.IniFormat)
    assert float(reread.value("stalls/min_silence_s")) == 30 and float(reread.value("stalls/auto_stop_after_s")) == 600
    from ddpgui.ui.stall_alerts import policy_from_settings

    assert policy_from_settings(reread) == expected
