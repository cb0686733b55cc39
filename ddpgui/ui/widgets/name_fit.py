"""Long run and sweep names cut to the width there is, where names differ least.

A sweep's runs are named ``SWEEP NAME: compile=off precision=fp32 #1``: cut at the right, every one of them
reads ``compile×precision sweep 2025-11-30 14:22: comp…``.  :func:`fitted_name` cuts the shared part (before the
last ": ") first and keeps the part that tells the runs apart; the runs table, the run header and the status
bar's sweep line all use it, the full text always in the tooltip.
"""
from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QSizePolicy

from .dashboard_header import MIN_WIDTH, ElidedLabel


def fitted_name(text: str, metrics, width: int) -> str:
    """``text`` as fits in ``width`` pixels (``metrics``: a QFontMetrics), cut where names differ least: the
    part before the last ": " is cut first (``compile×precis…: compile=off precision=fp32 #1``); what is still
    too long loses its middle, keeping both ends."""
    if metrics.horizontalAdvance(text) <= width:
        return text
    head, sep, tail = text.rpartition(": ")
    if sep:
        room = width - metrics.horizontalAdvance(sep + tail)
        if room >= metrics.horizontalAdvance(head[:4] + "…"):
            return metrics.elidedText(head, Qt.TextElideMode.ElideRight, room) + sep + tail
        return "…" + sep + metrics.elidedText(tail, Qt.TextElideMode.ElideMiddle,
                                              width - metrics.horizontalAdvance("…" + sep))
    return metrics.elidedText(text, Qt.TextElideMode.ElideMiddle, width)


class FittedLabel(ElidedLabel):
    """An :class:`ElidedLabel` cut by :func:`fitted_name`.  With ``preferred`` (pixels) it asks for its full
    text's width up to that (a status bar's part, which gives each part what it asks), and gives it up to
    MIN_WIDTH when the room is not there; without, it asks for no width (a header's line)."""

    def __init__(self, text: str = "", parent=None, preferred: int = 0, **kwargs):
        super().__init__(text, parent, **kwargs)
        self.preferred = preferred
        if preferred:
            self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)

    def elided(self) -> str:
        return fitted_name(self.text(), self.fontMetrics(), self.contentsRect().width())

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        hint = super().sizeHint()
        if not self.preferred:
            return hint
        wanted = self.fontMetrics().horizontalAdvance(self.text()) + 2 * self.margin() + 4
        return QSize(max(MIN_WIDTH, min(self.preferred, wanted)), hint.height())


__all__ = ["FittedLabel", "fitted_name"]
