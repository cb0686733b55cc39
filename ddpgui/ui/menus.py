"""The main window's menu bar: File, View, Sweeps, Settings, Help.

Every dialog here is opened window-modal with ``open()`` (never ``exec()``) and returned, so that tests
read and close it instead of blocking.  The About box reads torch's version from the installed package's
metadata: torch is never imported by the app itself.
"""
from __future__ import annotations

import platform
from importlib import metadata

from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import QDialog, QMenu, QMessageBox

from .tensorboard_io import export_to_tensorboard, import_tensorboard_folder
from .texts import as_rich

#: What the Help menu lists after the window's shortcuts: mouse gestures, which are no action of their own.
GESTURES = (
    ("double-click", "Open the run on the dashboard (a click only selects)"),
    ("Ctrl+click, Shift+click", "Select several runs (overlaid on the dashboard) or several hosts (one run "
                                "across hosts)"),
)


def _plain(text: str) -> str:
    """A menu or action text without its mnemonic ``&``."""
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&")


def _in_dialog(obj) -> bool:
    while obj is not None:
        if isinstance(obj, QDialog):
            return True
        obj = obj.parent()
    return False


def shortcut_rows(window) -> list[tuple[str, str]]:
    """(keys, what they do) of every shortcut the window has: each action with a shortcut (a menu's as ``View ▸
    GPUs``, its status tip after it; the others by their text), each QShortcut by its what's-this, keys of the
    same thing on one row; then :data:`GESTURES`.  Made from what is registered, so none is left out."""
    rows: dict[str, tuple[int, list[str]]] = {}  # what → (rank: the window's, menus', widgets', keys)
    native = QKeySequence.SequenceFormat.NativeText
    for action in window.findChildren(QAction):
        keys = [k.toString(native) for k in action.shortcuts() if not k.isEmpty()]
        if not keys or _in_dialog(action):
            continue
        menus = [o for o in action.associatedObjects() if isinstance(o, QMenu)]
        what = f"{_plain(menus[0].title())} ▸ {_plain(action.text())}" if menus else action.toolTip()
        tip = action.statusTip()
        rank = 1 if menus else 0 if action.parent() is window else 2
        rows.setdefault(f"{what}: {tip}" if tip else what, (rank, []))[1].extend(keys)
    for shortcut in window.findChildren(QShortcut):
        if not shortcut.key().isEmpty() and not _in_dialog(shortcut):
            rows.setdefault(shortcut.whatsThis() or "(no description)", (2, []))[1].append(shortcut.key().toString(native))
    ordered = sorted(rows.items(), key=lambda row: row[1][0])  # stable: creation order within a rank
    return [(", ".join(dict.fromkeys(keys)), what) for what, (_, keys) in ordered] + list(GESTURES)


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
    quit_action = file_menu.addAction("Quit", QKeySequence("Ctrl+Q"), window.close)
    quit_action.setObjectName("menu_quit")
    quit_action.setStatusTip("runs go on; the app reattaches when it starts again")
    view_menu = bar.addMenu("&View")
    for index in range(window.tabs.count()):
        action = view_menu.addAction(window.tabs.tabText(index), QKeySequence(f"Ctrl+{index + 1}"),
                                     lambda i=index: window.tabs.setCurrentIndex(i))
        action.setObjectName(f"menu_view_{window.tabs.tabText(index).lower()}")
    view_menu.addSeparator()
    view_menu.addAction(window.side_toggle)  # checkable, Ctrl+B
    sweep_menu = bar.addMenu("S&weeps")
    sweep_menu.addAction("New sweep…", QKeySequence("Ctrl+Shift+Return"), window.new_sweep).setStatusTip(
        "the launch form's settings with axes to sweep")
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


def _box(window, title: str, text: str, name: str, min_width: int = 0) -> QMessageBox:
    """``min_width``: of its text, in pixels (QMessageBox wraps a table's last column to a narrow strip)."""
    box = QMessageBox(QMessageBox.Icon.Information, title, text, QMessageBox.StandardButton.Close, window)
    box.setObjectName(name)
    if min_width:
        box.setStyleSheet(f"QLabel#qt_msgbox_label {{ min-width: {min_width}px; }}")
    box.open()
    return box


def shortcuts_box(window) -> QMessageBox:
    rows = "".join(f"<tr><td style='white-space:pre'><b>{as_rich(keys)}</b>&nbsp;&nbsp;</td><td>{as_rich(what)}</td></tr>"
                   for keys, what in shortcut_rows(window))
    return _box(window, "Keyboard shortcuts", f"<table>{rows}</table>", "shortcuts_box", min_width=620)


def about_box(window) -> QMessageBox:
    lines = "<br>".join(f"{name} {version}" for name, version in versions().items())
    return _box(window, "About ddpgui", "<b>ddpgui</b>: launch, watch and compare PyTorch DDP runs on this "
                f"computer, SSH hosts and Slurm clusters.<br><br>{lines}", "about_box")
