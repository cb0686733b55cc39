"""The rest of the window (issue 14): the Advanced box, the runs table's clicks, menus, tooltips, hosts."""
from __future__ import annotations

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
