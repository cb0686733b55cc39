"""The rest of the window (issue 14): the Advanced box, the runs table's clicks, menus, tooltips, hosts."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QApplication


def _visible_top_levels():
    return [w for w in QApplication.topLevelWidgets() if w.isVisible()]


def test_advanced_toggle_opens_no_popup_nor_stray_window(window, qtbot):
    panel = window.launch_panel
    qtbot.waitExposed(window)
    for on in (True, False, True):
        panel.advanced.setChecked(on)
        QApplication.processEvents()
        assert _visible_top_levels() == [window]
        assert not panel.optimizer.view().isVisible()
        assert not panel.backend.view().isVisible()
        assert panel.advanced_body.isVisible() is on
        assert panel.optimizer.isVisible() is on


def _two_runs(window):
    for run_id in ("r1", "r2"):
        window.store.create_run(run_id, name=f"run {run_id}", hosts=["local"], config={"steps": 5}, state="finished")
    window.runs_table.model.reload()
    window.tabs.setCurrentIndex(1)  # the Runs tab
    view = window.runs_table.view
    return view, [view.visualRect(window.runs_table.proxy.index(r, 0)).center() for r in (0, 1)]


def test_clicks_in_the_runs_table_select_without_switching_tabs(window, qtbot):
    view, (first, second) = _two_runs(window)
    runs_page = window.tabs.currentWidget()
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=first)
    assert window.tabs.currentWidget() is runs_page
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ControlModifier, pos=second)
    assert window.tabs.currentWidget() is runs_page
    assert sorted(window.runs_table.selected_ids()) == ["r1", "r2"]
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.RightButton, pos=first)
    assert window.tabs.currentWidget() is runs_page
    assert sorted(window.dashboard.run_ids) == ["r1", "r2"]  # the dashboard follows the selection, unseen


def test_a_run_selected_by_the_app_is_selected_alone_after_a_ctrl_click(window, qtbot):
    """Qt remembers the modifiers of the last input event: after a Ctrl-click, QTableView.selectRow added to the
    selection, and a sweep's first run shown by the app was overlaid on the run looked at before (CI, stop 32)."""
    from PySide6.QtGui import QGuiApplication

    view, (first, second) = _two_runs(window)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ControlModifier, pos=first)
    assert QGuiApplication.keyboardModifiers() & Qt.KeyboardModifier.ControlModifier  # what made it flaky
    table = window.runs_table
    other = next(r for r in ("r1", "r2") if r not in table.selected_ids())
    table.select_run(other)
    assert table.selected_ids() == [other] and window.dashboard.run_ids == [other]


def test_double_click_or_enter_opens_the_dashboard(window, qtbot):
    view, (first, second) = _two_runs(window)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=second)  # a double click's first press
    qtbot.mouseDClick(view.viewport(), Qt.MouseButton.LeftButton, pos=second)
    assert window.tabs.currentWidget() is window.dashboard
    assert window.dashboard.run_ids[0] == window.runs_table.model.run_at(
        window.runs_table.proxy.mapToSource(window.runs_table.proxy.index(1, 0)).row()).id
    window.tabs.setCurrentIndex(1)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=first)
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_Return)
    assert window.tabs.currentWidget() is window.dashboard


def _menu_action(window, name):
    action = window.findChild(QAction, name)
    assert action is not None, name
    return action


def _menus(window):
    return [a.text().replace("&", "") for a in window.menuBar().actions()]


def test_menus_file_view_sweeps_settings_help(window):
    assert _menus(window) == ["File", "View", "Sweeps", "Settings", "Help"]
    for name in ("menu_new_host", "menu_import_ssh", "menu_export", "menu_quit", "menu_shortcuts", "menu_docs",
                 "menu_about"):
        assert _menu_action(window, name).isEnabled()
    _menu_action(window, "menu_view_compare").trigger()
    assert window.tabs.currentWidget() is window.compare
    _menu_action(window, "menu_view_runs").trigger()
    assert window.tabs.currentIndex() == 1
    _menu_action(window, "menu_view_dashboard").trigger()
    assert window.tabs.currentWidget() is window.dashboard


def test_about_names_the_versions_without_importing_torch(window, qtbot):
    import platform
    import subprocess
    import sys
    from importlib import metadata

    import PySide6
    from PySide6.QtWidgets import QMessageBox

    import ddpgui

    _menu_action(window, "menu_about").trigger()
    box = window.findChild(QMessageBox, "about_box")
    qtbot.waitUntil(box.isVisible)
    text = box.text()
    for version in (ddpgui.__version__, platform.python_version(), metadata.version("torch"), PySide6.__version__):
        assert version in text
    box.close()
    code = ("import sys; import ddpgui.ui.menus as m; m.versions(); "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


def test_shortcuts_documentation_and_export(window, qtbot, monkeypatch):
    from PySide6.QtGui import QDesktopServices
    from PySide6.QtWidgets import QDialog, QMessageBox

    _menu_action(window, "menu_shortcuts").trigger()
    box = window.findChild(QMessageBox, "shortcuts_box")
    qtbot.waitUntil(box.isVisible)
    assert "Ctrl+Return" in box.text() and "double-click" in box.text()
    box.close()
    opened = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url) or True)
    _menu_action(window, "menu_docs").trigger()  # the guides in the app's viewer, nothing asked of the desktop
    viewer = window.findChild(QDialog, "docs_viewer")
    qtbot.waitUntil(viewer.isVisible)
    assert opened == [] and viewer.browser.source().toLocalFile().endswith("docs/index.md")
    viewer.close()
    exported = []
    monkeypatch.setattr(window, "run_action", lambda action, ids: exported.append((action, ids)))
    _menu_action(window, "menu_export").trigger()
    assert exported == [] and "Select the runs" in window.statusBar().currentMessage()
    _view, (first, _second) = _two_runs(window)
    qtbot.mouseClick(window.runs_table.view.viewport(), Qt.MouseButton.LeftButton, pos=first)
    _menu_action(window, "menu_export").trigger()
    assert exported == [("export", window.runs_table.selected_ids())] and exported[0][1]


def test_new_host_and_import_and_quit(window, qtbot, monkeypatch):
    calls = []
    monkeypatch.setattr(window.hosts_panel, "add_host", lambda: calls.append("add"))
    monkeypatch.setattr(window.hosts_panel, "import_ssh", lambda: calls.append("import"))
    _menu_action(window, "menu_new_host").trigger()
    _menu_action(window, "menu_import_ssh").trigger()
    assert calls == ["add", "import"]
    _menu_action(window, "menu_quit").trigger()
    qtbot.waitUntil(lambda: not window.isVisible())


def test_every_launch_setting_has_a_tooltip(window):
    from PySide6.QtWidgets import (
        QAbstractButton,
        QAbstractSpinBox,
        QComboBox,
        QGroupBox,
        QLineEdit,
        QPlainTextEdit,
    )

    panel = window.launch_panel
    kinds = (QComboBox, QAbstractSpinBox, QLineEdit, QPlainTextEdit, QAbstractButton)
    inputs = [w for kind in kinds for w in panel.findChildren(kind)
              if not isinstance(w.parent(), (QAbstractSpinBox, QComboBox))]
    inputs += [g for g in panel.findChildren(QGroupBox) if g.isCheckable()]
    assert len(inputs) >= 20
    missing = [w.objectName() or type(w).__name__ for w in inputs if not w.toolTip().strip()]
    assert missing == []


def _cells(model, run_id):
    from ddpgui.ui.widgets.runs_table import COLUMNS

    return {c: model.data(model.index(model.row_of(run_id), i)) for i, c in enumerate(COLUMNS)}


def test_runs_table_processes_host_start_time_and_stop(qtbot, tmp_path):
    from ddpgui.core.store import RunStore
    from ddpgui.ui.widgets.runs_table import COLUMNS, RunsTable

    store = RunStore(tmp_path / "runs.db")
    cpu = {"hostname": "here", "gpu": None, "gpu_count": 0}
    store.create_run("c", name="mlp 2x fp32", hosts=["local"], config={"nproc_per_node": 2}, environment=cpu,
                     state="finished", created_at=1_700_000_000.0)
    store.create_run("d", name="mlp 2x fp32", hosts=["local"], config={"nproc_per_node": 2}, environment=cpu,
                     state="running", created_at=1_700_000_500.0)
    store.create_run("g", name="gpu run", hosts=["box"], config={"nproc_per_node": 4, "device": "cuda"},
                     environment={"gpu_count": 4}, state="running")
    store.create_run("n", name="not placed", hosts=["box", "other"], config={"nproc_per_node": 2, "nnodes": 2},
                     state="launching")
    store.create_run("p", name="on chosen gpus", hosts=["box"], config={"nproc_per_node": 2, "gpus": [0, 3]},
                     environment={"gpu_count": 8}, state="running")
    store.update_run("c", started_at=1_700_000_010.0, ended_at=1_700_000_100.0)
    table = RunsTable(store)
    qtbot.addWidget(table)
    model = table.model
    c, d, g, n = (_cells(model, r) for r in "cdgn")
    assert model.headerData(COLUMNS.index("Processes"), Qt.Orientation.Horizontal) == "Processes"
    assert (c["Processes"], g["Processes"], n["Processes"]) == ("2 × CPU", "4 × GPU", "4")
    column = COLUMNS.index("Processes")
    assert _cells(model, "p")["Processes"] == "2 × GPU 0,3"  # the GPUs it was given
    tip = model.data(model.index(model.row_of("p"), column), Qt.ItemDataRole.ToolTipRole)
    assert "on GPUs 0,3 of each host (CUDA_VISIBLE_DEVICES=0,3" in tip
    assert c["Host"] == "This computer" and g["Host"] == "box" and n["Host"] == "box + other"
    assert c["Name"] == d["Name"] and c["Started"] and d["Started"] and c["Started"] != d["Started"]
    table.find.setText("this computer")  # the filter finds what the Host column shows
    assert table.proxy.rowCount() == 2
    table.find.setText("")
    stop = lambda ids: table.context_menu(ids).findChild(QAction, "run_stop")  # noqa: E731
    assert not stop(["c"]).isEnabled()  # ended: nothing to stop
    assert stop(["d"]).isEnabled() and stop(["c", "d"]).isEnabled()
    store.close()


def test_host_dialog_words_browse_required_and_width(qtbot, monkeypatch, tmp_path):
    from PySide6.QtWidgets import QFileDialog

    from ddpgui.core.hosts import AUTH_METHODS, HostProfile
    from ddpgui.ui.dialogs.host_edit import HostEditDialog

    dialog = HostEditDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    shown = [dialog.auth.itemText(i) for i in range(dialog.auth.count())]
    assert shown == ["SSH agent", "Key file", "Key file with passphrase", "Password"]
    assert [dialog.auth.itemData(i) for i in range(dialog.auth.count())] == list(AUTH_METHODS)
    assert dialog.width() >= 480
    path = str(tmp_path / "keys" / "id_ed25519_for_the_lab_cluster")
    asked = []
    monkeypatch.setattr(QFileDialog, "getOpenFileName",
                        lambda parent, title, start="", *a: asked.append(start) or (path, ""))
    dialog.browse_key.click()
    assert dialog.key_file.text() == path and asked
    assert dialog.key_file.fontMetrics().horizontalAdvance("~/.ssh/id_ed25519_for_the_lab") < dialog.key_file.width()
    dialog.name.setText("lab")
    dialog._save()  # no hostname
    assert dialog.result_profile is None
    assert "got ''" not in dialog.error.text() and 'got ""' not in dialog.error.text()
    assert dialog.error.text().startswith("Hostname is required"), dialog.error.text()
    dialog.hostname.setText("lab.example.org")
    dialog.auth.setCurrentIndex(dialog.auth.findData("key_passphrase"))
    dialog._save()
    assert dialog.result_profile == HostProfile(name="lab", hostname="lab.example.org", auth="key_passphrase",
                                                key_file=path)
    edit = HostEditDialog(dialog.result_profile)
    qtbot.addWidget(edit)
    assert edit.auth.currentText() == "Key file with passphrase" and edit.auth.currentData() == "key_passphrase"


def test_error_texts_never_start_with_a_class_name():
    from ddpgui.core.ssh.connection import HostUnreachable
    from ddpgui.ui.texts import required_or, without_class_name

    assert without_class_name("HostUnreachable: cannot connect to lab:22") == "cannot connect to lab:22"
    assert without_class_name("ddpgui.core.x.TargetError: TimeoutError: timed out") == "timed out"
    assert without_class_name("Launch failed: no route") == "Launch failed: no route"
    assert without_class_name("Hint: try again") == "Hint: try again"
    assert without_class_name(f"{HostUnreachable.__name__}: x") == "x"
    assert required_or("Partition", "slurm.partition: must be a partition name, got \"\"") == \
        "Partition is required (a partition name)"
    assert required_or("Name", "name: must be short, got 'bad name!'") == "name: must be short, got 'bad name!'"


def test_a_failed_test_connection_shows_no_class_name(window, qtbot):
    from ddpgui.core.hosts import HostProfile

    window.hosts.add(HostProfile(name="nowhere", hostname="127.0.0.1", port=1, user="nobody"))
    window.hosts_panel.reload("nowhere")
    window.test_connection("nowhere")
    qtbot.waitUntil(lambda: window.hosts_panel.status.get("nowhere") == "error", timeout=60_000)
    detail = window.hosts_panel.details["nowhere"]
    assert detail.startswith("127.0.0.1:1 ") and "HostUnreachable" not in detail and "Hint: " in detail, detail


def test_this_computer_is_probed_at_start_on_a_worker(window, qtbot):
    from ddpgui.core.hosts import LOCAL

    panel = window.launch_panel
    assert LOCAL not in window.hosts_panel.probes and "(a guess: not probed)" in panel.nproc_label.text()
    window.probe_at_start()  # what the app does once its window is shown
    assert window.hosts_panel.status[LOCAL] == "checking"  # the probe runs on a worker: the window goes on
    qtbot.waitUntil(lambda: window.hosts_panel.status.get(LOCAL) == "reachable", timeout=120_000)
    probe = window.hosts_panel.probes[LOCAL]
    assert "Test connection" not in panel.nproc_label.text()
    model = panel.precision.model()
    for row in range(model.rowCount()):  # the form offers only what the probe found it can run
        assert model.item(row).isEnabled() is (panel.problems[panel.precision.itemText(row)] is None)
    assert probe.get("cpu_count")
    button = window.hosts_panel.buttons["test"]
    assert button.text() == "Test connection" and "host key" in button.toolTip() and "probe" in button.toolTip()


def test_a_longer_name_or_step_widens_its_column(qtbot, tmp_path):
    import dataclasses

    from ddpgui.core.store import RunStore
    from ddpgui.ui.widgets.runs_table import COLUMNS, RunsTable

    store = RunStore(tmp_path / "runs.db")
    store.create_run("s", name="short", hosts=["local"], config={"nproc_per_node": 1}, state="running")
    table = RunsTable(store)
    qtbot.addWidget(table)
    table.resize(1400, 400)  # room for the whole name (a narrow table cuts it: test_walkthrough_dashboard)
    table.show()
    view, metrics = table.view, table.view.fontMetrics()
    name, step = COLUMNS.index("Name"), COLUMNS.index("Step")
    long_name = "a rather long run name that was not there when the table opened"
    table.model.update_run(store.create_run("l", name=long_name, hosts=["local"], state="running"))
    assert view.columnWidth(name) > metrics.horizontalAdvance(long_name)
    table.model.update_run(dataclasses.replace(store.get_run("s"), last_step=123456789, total_steps=987654321))
    assert view.columnWidth(step) > metrics.horizontalAdvance("123456789/987654321")
    store.close()


def test_import_from_ssh_config_lets_the_user_choose(window, qtbot, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host gate\n  HostName gate.example.org\n  User ana\n\n"
                      "Host inner\n  HostName 10.1.0.7\n  ProxyJump gate\n\n"
                      "Host unwanted\n  HostName unwanted.example.org\n\n"
                      "Host old\n  HostName old.example.org\n  ProxyCommand nc %h %p\n")
    dialog = window.hosts_panel.import_ssh(str(config))
    qtbot.waitUntil(dialog.isVisible)
    assert sorted(dialog.chosen()) == ["gate", "inner", "unwanted"]  # every importable one ticked
    skipped = dict(dialog.skipped)
    assert list(skipped) == ["old"] and "ProxyCommand" in skipped["old"]  # no "*: a wildcard pattern"
    dialog.list.item([dialog.list.item(r).data(Qt.ItemDataRole.UserRole)
                      for r in range(dialog.list.count())].index("unwanted")).setCheckState(Qt.CheckState.Unchecked)
    dialog.import_button.click()
    qtbot.waitUntil(lambda: "inner" in window.hosts.names())
    assert "gate" in window.hosts.names() and "unwanted" not in window.hosts.names()
    assert window.hosts.get("inner").proxy_jump == ["gate"]
    assert window.hosts_panel.item("inner") is not None


def test_a_restart_restores_the_selected_runs_the_tab_and_the_comparison(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from ddpgui.core.hosts import HostStore
    from ddpgui.core.store import RunStore
    from ddpgui.ui.main_window import MainWindow

    def open_window():
        settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
        win = MainWindow(store=RunStore(tmp_path / "runs.db"), hosts=HostStore(tmp_path / "hosts.json"),
                         settings=settings)
        qtbot.addWidget(win)
        win.show()
        return win

    first = open_window()
    for run_id in ("r1", "r2", "r3"):
        first.store.create_run(run_id, name=f"run {run_id}", hosts=["local"], config={"steps": 5}, state="finished")
    first.runs_table.model.reload()
    first.runs_table.select_runs(["r2", "r3"])
    first.compare.set_runs(["r1", "r3"])
    first.tabs.setCurrentWidget(first.compare)
    assert first.dashboard.run_ids == ["r2", "r3"]
    first.close()
    second = open_window()
    assert second.tabs.currentWidget() is second.compare
    assert second.dashboard.run_ids == ["r2", "r3"]
    assert sorted(second.runs_table.selected_ids()) == ["r2", "r3"]
    assert second.compare.run_ids == ["r1", "r3"]
    second.close()


def test_an_unticked_advanced_box_is_its_title_alone(window, qtbot):
    panel = window.launch_panel
    panel.advanced.setChecked(False)
    qtbot.waitUntil(lambda: panel.advanced.height() < 2 * panel.advanced.fontMetrics().height() + 6)  # no empty frame
    panel.advanced.setChecked(True)
    qtbot.waitUntil(lambda: panel.advanced.height() > panel.optimizer.height() * 4)
