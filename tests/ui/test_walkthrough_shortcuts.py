"""Issue 24's walk-through: Help ▸ Keyboard shortcuts lists every shortcut the window has (Ctrl+4 was left out
of a hand-written list); it is made from the registered actions and shortcuts, so a new one is listed too."""
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import QMessageBox

from ddpgui.ui.menus import shortcut_rows, shortcuts_box


def _registered(window) -> set[str]:
    native = QKeySequence.SequenceFormat.NativeText
    keys = {k.toString(native) for a in window.findChildren(QAction) for k in a.shortcuts() if not k.isEmpty()}
    return keys | {s.key().toString(native) for s in window.findChildren(QShortcut) if not s.key().isEmpty()}


def test_every_shortcut_the_window_has_is_listed(window, qtbot):
    registered = _registered(window)
    assert {"Ctrl+1", "Ctrl+2", "Ctrl+3", "Ctrl+4", "Ctrl+Return", "Ctrl+Shift+Return", "Ctrl+Q", "F5"} <= registered
    box = shortcuts_box(window)
    qtbot.waitUntil(box.isVisible)
    assert window.findChild(QMessageBox, "shortcuts_box") is box
    listed = {key for keys, _ in shortcut_rows(window) for key in keys.split(", ")}
    assert registered <= listed, registered - listed
    for keys, what in shortcut_rows(window):  # each row in the box, its keys in bold
        assert f"<b>{keys}</b>" in box.text() and what in box.text(), keys
    rows = dict(shortcut_rows(window))
    assert rows["Ctrl+4"] == "View ▸ GPUs" and rows["Ctrl+Q"].startswith("File ▸ Quit: runs go on")
    assert rows["Return, Enter"].startswith("Open the selected run") and all(what for what in rows.values())
    box.close()


def test_a_shortcut_added_later_is_listed_without_a_word_in_the_help(window, qtbot):
    action = QAction("Do the new thing", window, shortcut=QKeySequence("Ctrl+Alt+N"))
    window.addAction(action)
    assert ("Ctrl+Alt+N", "Do the new thing") in shortcut_rows(window)


def test_the_list_fits_its_box_without_wrapping_each_line(window, qtbot):
    box = shortcuts_box(window)
    qtbot.waitUntil(box.isVisible)
    box.adjustSize()
    assert box.width() >= 620 and box.height() <= 700  # a readable table that fits a 1024 × 700 screen
    box.close()
