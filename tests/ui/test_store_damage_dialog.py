"""A run store damaged after it opened (issue 23, item 6): the app shows its dialog, never a traceback; one that
cannot be written while runs are followed (item 5) is a banner in the status bar until it works again.

A real store file with a b-tree page overwritten: the runs' page (met while the window is made) and the points'
page (met by the dashboard's worker when a run is selected), through the real main window.
"""
import sys

import pytest
from helpers.damaged_store import damage
from helpers.recorded_runs import put_recorded
from PySide6.QtCore import QSettings

from ddpgui.core.hosts import HostStore
from ddpgui.core.store import STORE_FILE, RunStore
from ddpgui.ui import app


@pytest.fixture
def dirs(tmp_path, monkeypatch, themed_module):
    config, data = tmp_path / "config", tmp_path / "data"
    config.mkdir()
    data.mkdir()
    monkeypatch.setenv("DDPGUI_CONFIG_DIR", str(config))
    monkeypatch.setenv("DDPGUI_DATA_DIR", str(data))
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # put back whatever the app installs
    yield config, data


def _damaged(data, table):
    path = data / STORE_FILE
    with RunStore(path) as store:
        ids = put_recorded(store, "ordinary")
    damage(path, table)
    return path, ids


def test_a_store_whose_runs_cannot_be_read_is_the_start_up_dialog(dirs):
    path, _ = _damaged(dirs[1], "runs")
    shown = []
    assert app.main([], show_error=lambda box: shown.append((box.objectName(), box.text(),
                                                             box.informativeText()))) == 1
    [(name, text, informative)] = shown
    assert name == "startup_error"
    assert text == f"The run store {path} cannot be read (database disk image is malformed)"
    assert ".recover" in informative and "ddpgui adopt HOST" in informative


def test_a_run_whose_points_cannot_be_read_is_a_dialog_once(dirs, qtbot):
    from ddpgui.ui.main_window import MainWindow

    path, ids = _damaged(dirs[1], "blocks")
    shown = []
    app.show_store_errors(lambda box: shown.append((box.objectName(), box.windowTitle(), box.text())))
    settings = QSettings(str(dirs[0] / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(store=RunStore(path), hosts=HostStore(dirs[0] / "hosts.json"), settings=settings)
    qtbot.addWidget(window)
    window.show()
    window.runs_table.select_runs([ids[0]])
    qtbot.waitUntil(lambda: bool(shown), timeout=30000)
    window.runs_table.select_runs([ids[1]])  # the same failure again: no second dialog
    qtbot.waitUntil(lambda: window.dashboard.traces[ids[1]].live.message.startswith("could not read the run"),
                    timeout=30000)
    assert shown == [("store_error", "ddpgui cannot use its run store",
                      f"The run store {path} cannot be read (database disk image is malformed)")]
    window.close()


def test_a_store_that_cannot_be_written_is_a_banner_until_it_works_again(window, qtbot):
    """The follower's notice (RunUpdate.store, said once) through the manager's listeners to the window."""
    from ddpgui.core.runs.follower import RunUpdate

    full = "the disk of the run store is full (/data/runs.sqlite3, 0 bytes free) — free some space on that disk"
    window.manager._emit(RunUpdate(run_id="", host="local", store=full))
    qtbot.waitUntil(lambda: window.store_banner.isVisible(), timeout=10000)
    assert window.store_banner.text() == f"Runs are not being stored: {full}"
    window.manager._emit(RunUpdate(run_id="", host="local", store=""))
    qtbot.waitUntil(lambda: not window.store_banner.isVisible(), timeout=10000)
