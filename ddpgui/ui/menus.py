"""The main window's menu bar: File, View, Sweeps, Settings, Help.

Every dialog here is opened window-modal with ``open()`` (never ``exec()``) and returned, so that tests
read and close it instead of blocking.  The About box reads torch's version from the installed package's
metadata: torch is never imported by the app itself.
"""
from __future__ import annotations

import platform
from importlib import metadata

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QMessageBox

from .tensorboard_io import export_to_tensorboard, import_tensorboard_folder

#: The shortcuts the Help menu lists (keys, what they do); the window's own actions use the same keys.
SHORTCUTS = (
    ("Ctrl+Return", "Launch the run in the launch form"),
    ("Ctrl+Shift+Return", "New sweep from the launch form's settings"),
    ("Ctrl+.", "Stop the run on the dashboard"),
    ("F5", "Reload the runs and test the connection to the selected host"),
    ("Ctrl+F", "Find in the log (Dashboard) or filter the runs (Runs)"),
    ("Ctrl+1 / Ctrl+2 / Ctrl+3", "Show the Dashboard, Runs or Compare tab"),
    ("Ctrl+B", "Hide or show the hosts and launch panel (the tabs get the whole width)"),
    ("Enter, double-click", "Open the selected run on the dashboard (a click only selects)"),
    ("Ctrl+click, Shift+click", "Select several runs (overlaid on the dashboard) or several hosts (one run "
                                "across hosts)"),
    ("Ctrl+Q", "Quit (runs go on; the app reattaches when it starts again)"),
)


def package_version(name: str) -> str:
    """The installed version of a distribution, or "not installed" (never imports it)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, str]:
    import PySide6

    import ddpgui

    return {"ddpgui": ddpgui.__version__, "Python": platform.python_version(), "torch": package_version("torch"),
            "PySide6": PySide6.__version__}


def open_documentation(window, opener=None):
    """Help ▸ Documentation: docs/index.md in the desktop's browser, else in the app (``dialogs.docs_viewer``)."""
    from .dialogs.docs_viewer import open_guides

    return open_guides(window, opener)


def build_menus(window) -> None:
    bar = window.menuBar()
    file_menu = bar.addMenu("&File")
    file_menu.addAction("New host…", lambda: window.hosts_panel.add_host()).setObjectName("menu_new_host")
    file_menu.addAction("Import hosts from ~/.ssh/config…", lambda: window.hosts_panel.import_ssh()).setObjectName(
        "menu_import_ssh")
    file_menu.addAction("Export selected runs as CSV…", lambda: export_selected(window)).setObjectName("menu_export")
    file_menu.addAction("Export selected runs to TensorBoard…", lambda: export_to_tensorboard(window)).setObjectName(
        "menu_export_tensorboard")
    file_menu.addAction("Import TensorBoard folder…", lambda: import_tensorboard_folder(window)).setObjectName(
        "menu_import_tensorboard")
    file_menu.addSeparator()
    file_menu.addAction("Quit", QKeySequence("Ctrl+Q"), window.close).setObjectName("menu_quit")
    view_menu = bar.addMenu("&View")
    for index in range(window.tabs.count()):
        action = view_menu.addAction(window.tabs.tabText(index), QKeySequence(f"Ctrl+{index + 1}"),
                                     lambda i=index: window.tabs.setCurrentIndex(i))
        action.setObjectName(f"menu_view_{window.tabs.tabText(index).lower()}")
    view_menu.addSeparator()
    view_menu.addAction(window.side_toggle)  # checkable, Ctrl+B
    sweep_menu = bar.addMenu("S&weeps")
    sweep_menu.addAction("New sweep…", QKeySequence("Ctrl+Shift+Return"), window.new_sweep)
    settings_menu = bar.addMenu("&Settings")
    settings_menu.addAction("Idle host reminder…", window.set_idle_minutes)
    settings_menu.addAction("Stall detection…", window.stall_alerts.open_settings).setObjectName("menu_stalls")
    help_menu = bar.addMenu("&Help")
    help_menu.addAction("Keyboard shortcuts", lambda: shortcuts_box(window)).setObjectName("menu_shortcuts")
    help_menu.addAction("Documentation", lambda: open_documentation(window)).setObjectName(
        "menu_docs")
    help_menu.addAction("About ddpgui", lambda: about_box(window)).setObjectName("menu_about")


def export_selected(window) -> None:
    ids = window.runs_table.selected_ids()
    if ids:
        window.run_action("export", ids)
    else:
        window.statusBar().showMessage("Select the runs to export in the Runs tab first", 8000)


def _box(window, title: str, text: str, name: str) -> QMessageBox:
    box = QMessageBox(QMessageBox.Icon.Information, title, text, QMessageBox.StandardButton.Close, window)
    box.setObjectName(name)
    box.open()
    return box


def shortcuts_box(window) -> QMessageBox:
    rows = "".join(f"<tr><td><b>{keys}</b>&nbsp;&nbsp;</td><td>{what}</td></tr>" for keys, what in SHORTCUTS)
    return _box(window, "Keyboard shortcuts", f"<table>{rows}</table>", "shortcuts_box")


def about_box(window) -> QMessageBox:
    lines = "<br>".join(f"{name} {version}" for name, version in versions().items())
    return _box(window, "About ddpgui", "<b>ddpgui</b>: launch, watch and compare PyTorch DDP runs on this "
                f"computer, SSH hosts and Slurm clusters.<br><br>{lines}", "about_box")
