"""Words in a plot: a title that wraps instead of being cut off, and a centred message in an empty plot."""
from __future__ import annotations

import html

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics, QTextOption

#: The colour of a plot's message and of "n/a" marks.
QUIET = "#999999"
#: The size of a plot's title (pyqtgraph's own is 11 pt).
TITLE_PT = 10.0


def break_lines(text: str, width_px: float, metrics: QFontMetrics) -> list[str]:
    """``text`` broken at spaces into lines at most ``width_px`` wide (a word wider than that is a line alone)."""
    lines: list[str] = []
    for word in text.split():
        if lines and metrics.horizontalAdvance(f"{lines[-1]} {word}") <= width_px:
            lines[-1] = f"{lines[-1]} {word}"
        else:
            lines.append(word)
    return lines


def wrap_lines(text: str, width_px: float, font: QFont | None = None, max_lines: int = 3) -> list[str]:
    """:func:`break_lines`, at most ``max_lines`` of them, each elided ("…") where it is still too wide."""
    metrics = QFontMetrics(font or QFont())
    lines = break_lines(text, width_px, metrics)
    if len(lines) > max_lines:
        lines = lines[:max_lines - 1] + [" ".join(lines[max_lines - 1:])]
    return [metrics.elidedText(line, Qt.TextElideMode.ElideRight, max(8, int(width_px))) for line in lines]


def title_font() -> QFont:
    """The font of a plot's title."""
    font = QFont()
    font.setPointSizeF(TITLE_PT)
    return font


class FittedTitle:
    """A plot's title wrapped to the plot's width (two lines at most, elided after), the whole of it as tooltip."""

    def __init__(self, widget: pg.PlotWidget, text: str = ""):
        self.widget, self.text = widget, text
        self.lines: list[str] = []

    def set(self, text: str) -> None:
        self.text = text
        self.fit()

    def room(self, width: float) -> float:
        """The title's width on a plot ``width`` px wide: it stands over the data area, the widget less the left
        axis (which grows with its tick labels, after this: keep room for the widest) and the label's margins."""
        return max(60.0, width - max(80.0, self.widget.getPlotItem().getAxis("left").width()) - 20)

    def fits(self, width: float) -> bool:
        """Whether the whole title fits in its two lines (nothing elided) on a plot ``width`` px wide."""
        metrics, room = QFontMetrics(title_font()), self.room(width)
        lines = break_lines(self.text, room, metrics)
        return len(lines) <= 2 and all(metrics.horizontalAdvance(line) <= room for line in lines)

    def fit(self) -> None:
        item = self.widget.getPlotItem()
        font = title_font()
        self.lines = wrap_lines(self.text, self.room(self.widget.width()), font, max_lines=2)
        if not self.text:
            item.setTitle(None)
            return
        shown = "<br>".join(html.escape(line) for line in self.lines)
        if shown != item.titleLabel.text or not item.titleLabel.isVisible():  # setting it lays its HTML out again
            item.setTitle(shown, size=f"{TITLE_PT:g}pt")
        height = 8 + QFontMetrics(font).lineSpacing() * len(self.lines)  # setTitle fixes one line's 30 px
        # a title's text sets its label's minimum width: a wider one pushed the data area past the widget's
        # right edge (blank bars until a resize); wrapped to the room there is, it never widens the plot
        item.titleLabel.setMaximumHeight(max(30, height))
        item.layout.setRowFixedHeight(0, max(30, height))
        self.widget.setToolTip(self.text)


class PlotMessage:
    """Why a plot is empty, in words at the centre of its view (wrapped to the view's width)."""

    def __init__(self, item: pg.PlotItem):
        self.item = item
        self.text = pg.TextItem("", anchor=(0.5, 0.5), color=QUIET)
        self.text.setVisible(False)
        item.addItem(self.text, ignoreBounds=True)
        item.getViewBox().sigRangeChanged.connect(self._place)
        item.getViewBox().sigResized.connect(self._place)

    @property
    def shown(self) -> str:
        return self.text.toPlainText() if self.text.isVisible() else ""

    def show(self, words: str) -> None:
        if self.text.scene() is None:  # item.clear() took it out
            self.item.addItem(self.text, ignoreBounds=True)
        self.text.setPlainText(words)
        self.text.setVisible(True)
        self._place()

    def hide(self) -> None:
        self.text.setVisible(False)

    def _place(self, *_: object) -> None:
        if not self.text.isVisible():
            return
        view = self.item.getViewBox()
        self.text.setTextWidth(max(60.0, view.width() * 0.85))
        self.text.textItem.document().setDefaultTextOption(_centred())
        (x0, x1), (y0, y1) = view.viewRange()
        self.text.setPos((x0 + x1) / 2, (y0 + y1) / 2)


def _centred() -> QTextOption:
    option = QTextOption()
    option.setAlignment(Qt.AlignmentFlag.AlignHCenter)
    option.setWrapMode(QTextOption.WrapMode.WordWrap)
    return option


def set_axis_label(item: pg.PlotItem, side: str, text: str) -> None:
    """``item.setLabel(side, text)``, skipped when the axis says that already: each call lays the label's HTML out
    again, and a redraw of the Compare tab sets its five plots' labels each time."""
    axis = item.getAxis(side)
    if axis.labelText != text or axis.labelUnits or axis.labelUnitPrefix or not axis.isVisible():
        item.setLabel(side, text)
