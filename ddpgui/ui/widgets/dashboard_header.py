"""The dashboard header's one-line labels: long text is elided to the width there is, never widening the window.

:class:`ElidedLabel` keeps its full text (``text()`` and the tooltip hold it) and paints as much as fits with
"…"; its size hints ask for no width, so however long the header gets, the layout (and the window) keeps its size.
Details given with :meth:`ElidedLabel.set_details` (rich text: a run's series and their sources) follow the full
text in the tooltip.
"""
from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPalette
from PySide6.QtWidgets import QLabel, QSizePolicy, QStyleOption

from ..texts import as_rich

#: Width an elided label asks for: enough for a few characters and "…".
MIN_WIDTH = 40
#: The colour of a "stalled?" line (as a stopped run's state: something to look at, not an error).
STALL_COLOR = "#e37400"


class ElidedLabel(QLabel):
    """A one-line plain-text label elided at the right; the full text is its tooltip when it does not fit."""

    def __init__(self, text: str = "", parent=None, **kwargs):
        super().__init__(text, parent, **kwargs)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.details = ""
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        if text != self.text():
            super().setText(text)
        self.setToolTip(f"<qt>{as_rich(text)}<hr>{self.details}</qt>" if self.details else text)

    def set_details(self, details: str) -> None:
        """Rich text shown in the tooltip under the full text ("": the full text alone)."""
        if details != self.details:
            self.details = details
            self.setText(self.text())

    def elided(self) -> str:
        """The text as painted now."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(MIN_WIDTH, super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(MIN_WIDTH, super().sizeHint().height())

    def paintEvent(self, event) -> None:  # noqa: N802
        painter = QPainter(self)
        option = QStyleOption()
        option.initFrom(self)
        self.style().drawItemText(painter, self.contentsRect(), int(self.alignment()) | int(Qt.AlignmentFlag.AlignVCenter),
                                  option.palette, self.isEnabled(), self.elided(), self.foregroundRole())
        painter.end()


def never_widening(label: QLabel) -> QLabel:
    """A word-wrapped label whose long words (paths, URLs) cannot widen the window: its width is what it is given."""
    label.setSizePolicy(QSizePolicy.Policy.Ignored, label.sizePolicy().verticalPolicy())
    label.setMinimumWidth(MIN_WIDTH)
    return label


def stall_text(decision) -> str:
    """The header's line for a run's :class:`~ddpgui.core.runs.stalls.StallDecision`: ``stalled? · no metrics for
    4 min 10 s, usually every 0.8 s; …``, a slow phase (``in evaluation (no metrics expected), 12 s so far``), or
    nothing (progressing, not judged, or no decision)."""
    if decision is None or not decision.label:
        return ""
    return f"stalled? · {decision.reason}" if decision.stalled else decision.reason


class StallLine(ElidedLabel):
    """One elided line under the header's stats: a running run's stall or slow phase, hidden otherwise."""

    def __init__(self, parent=None, **kwargs):
        super().__init__("", parent, **kwargs)
        self.setVisible(False)
        self.stalled = False
        self.plain = QPalette(self.palette())

    def show_decision(self, decision) -> None:
        """Show ``decision`` (None: nothing); "stalled?" in its colour, a phase in the header's own."""
        text = stall_text(decision)
        stalled = bool(text) and decision.stalled
        if stalled != self.stalled:
            self.stalled = stalled
            palette = QPalette(self.plain)
            if stalled:
                palette.setColor(QPalette.ColorRole.WindowText, QColor(STALL_COLOR))
            self.setPalette(palette)
        self.setText(text)
        self.setVisible(bool(text))


__all__ = ["ElidedLabel", "MIN_WIDTH", "StallLine", "never_widening", "stall_text"]
