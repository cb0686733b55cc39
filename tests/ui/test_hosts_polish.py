"""The hosts list: a long host name, address or error is elided to the list's width with the whole text as the
entry's tooltip; it never scrolls sideways and never widens the window."""
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QStyleOptionViewItem

from ddpgui.core.hosts import HostProfile

LONG_HOSTNAME = "node-" + "a" * 183 + ".example.org"  # 200 characters
NAME = "h" + "x" * 63  # the longest name a profile may have


def _settle(qtbot) -> None:
    for _ in range(3):
        QApplication.processEvents()
        qtbot.wait(20)


def test_a_200_character_host_is_elided_and_never_widens_the_window(window, qtbot):
    window.resize(1200, 800)
    _settle(qtbot)
    width, list_width, least = window.width(), window.hosts_panel.list.width(), window.minimumSizeHint().width()
    assert len(LONG_HOSTNAME) == 200
    window.hosts.add(HostProfile(name=NAME, hostname=LONG_HOSTNAME, user="someone", notes="n" * 300))
    panel = window.hosts_panel
    panel.reload(NAME)
    panel.hosts_changed.emit()
    error = "cannot connect to " + LONG_HOSTNAME + " port 22: connection refused"
    panel.set_status(NAME, "error", error + "\nHint: " + "check the address " * 12)
    _settle(qtbot)
    assert (window.width(), panel.list.width()) == (width, list_width)
    assert window.minimumSizeHint().width() <= least  # the list asks for no more width than before
    view = panel.list
    assert view.horizontalScrollBar().maximum() == 0  # nothing to scroll to: every entry fits the width
    item = panel.item(NAME)
    rect = view.visualItemRect(item)
    assert rect.width() <= view.viewport().width()
    option = QStyleOptionViewItem()
    option.rect = rect
    view.itemDelegate().initStyleOption(option, view.indexFromItem(item))
    assert option.textElideMode == Qt.TextElideMode.ElideRight  # each line elided, not wrapped
    assert not option.features & QStyleOptionViewItem.ViewItemFeature.WrapText
    tip = item.toolTip()
    assert LONG_HOSTNAME in tip and error in tip and "n" * 300 in tip and "error" in tip  # the whole text
    window.resize(900, 800)  # narrower still: it re-elides, the window keeps the width it is given
    _settle(qtbot)
    assert window.width() <= max(900, window.minimumSizeHint().width())
    assert view.horizontalScrollBar().maximum() == 0
    assert view.visualItemRect(item).width() <= view.viewport().width()
