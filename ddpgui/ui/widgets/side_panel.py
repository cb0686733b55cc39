"""The window's left panel: the hosts over the launch form, and the toggle that hides it.

Hidden (View ▸ Hosts and launch panel, Ctrl+B, the arrow at the tabs' corner, or its splitter handle dragged
to the edge), the panel gives the tabs the whole width and takes nothing from the window's minimum width; the
choice is kept in the window's QSettings (``window/side_panel``) for the next launch.
"""
from __future__ import annotations

from PySide6.QtCore import QEvent, QSettings, QSize, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFrame, QScrollArea, QSplitter, QTabWidget, QToolButton, QWidget

#: The shortcut of the toggle (the Help menu's list names it too).
TOGGLE_KEYS = "Ctrl+B"
#: The panel's width when it is shown again after it was dragged shut (its own minimum when that is wider).
REOPEN_WIDTH = 340


class FormScroll(QScrollArea):
    """The launch form in a vertical scroll area (a script's Advanced settings are taller than a small window)
    that is never narrower than the form needs: the form is never cut at its right edge."""

    def __init__(self, form: QWidget):
        super().__init__(objectName="launch_scroll", widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWidget(form)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        hint = super().minimumSizeHint()
        width = (self.widget().minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width()
                 + 2 * self.frameWidth())
        return QSize(width, hint.height())

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name; QScrollArea filters its widget)
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()  # the form's rows changed (a script's, Advanced): its minimum width with them
        return super().eventFilter(watched, event)


class SidePanel(QSplitter):
    """The hosts list over the launch form (vertical splitter)."""

    def __init__(self, hosts: QWidget, form: QWidget):
        super().__init__(Qt.Orientation.Vertical, objectName="side_panel")
        self.addWidget(hosts)
        self.form = FormScroll(form)
        self.addWidget(self.form)
        self.setSizes([260, 560])


class SidePanelToggle(QAction):
    """Checked: the panel is shown.  Also a corner button on ``tabs``; the state is saved in ``settings``."""

    def __init__(self, panel: QWidget, splitter: QSplitter, tabs: QTabWidget, settings: QSettings):
        super().__init__("Hosts and launch panel", splitter, checkable=True, objectName="side_panel_toggle",
                         shortcut=QKeySequence(TOGGLE_KEYS), statusTip="hide it to give the tabs the whole width")
        self.panel, self.splitter, self.settings = panel, splitter, settings
        self.button = QToolButton(objectName="side_panel_button", autoRaise=True)
        self.button.clicked.connect(self.toggle)
        tabs.setCornerWidget(self.button, Qt.Corner.TopLeftCorner)
        self.toggled.connect(self._apply)
        splitter.splitterMoved.connect(self._moved)
        self.restore()

    def restore(self) -> None:
        """The state saved last (shown when nothing was saved); call again after the splitter's own state."""
        shown = str(self.settings.value("window/side_panel", "true")).lower() != "false"
        self.setChecked(shown)
        self._apply(shown)

    def _apply(self, shown: bool) -> None:
        self.panel.setVisible(shown)
        index = self.splitter.indexOf(self.panel)
        if shown and self.splitter.sizes()[index] == 0:  # dragged shut before: open it at a usable width
            sizes = self.splitter.sizes()
            width = max(REOPEN_WIDTH, self.panel.minimumSizeHint().width())
            sizes[index], sizes[1 - index] = width, max(0, sum(sizes) - width)
            self.splitter.setSizes(sizes)
        self.button.setArrowType(Qt.ArrowType.LeftArrow if shown else Qt.ArrowType.RightArrow)
        verb = "Hide" if shown else "Show"
        self.button.setToolTip(f"{verb} the hosts and launch panel ({TOGGLE_KEYS})")
        self.settings.setValue("window/side_panel", "true" if shown else "false")

    def _moved(self, *_: object) -> None:
        """The handle dragged to the edge hides the panel (and its minimum width with it)."""
        if self.isChecked() and self.splitter.sizes()[self.splitter.indexOf(self.panel)] == 0:
            self.setChecked(False)
