"""Bars with 95% CI error bars, one tick label per bar (the Compare tab's throughput, memory and speedup).

Each repeat is a dot on its bar; a bar with fewer than 3 repeats has no interval (docs/ANALYSIS.md) and
shows its dots with a plain line over their range instead.

Nothing is cut off or left blank without a word: the title wraps to the plot's width (the
whole of it as tooltip), tick labels wrap to their bar's width, a bar without a value is an
"n/a" mark at its place, a bar whose value comes with a note (a run that never settled) has a
"*" over it, the notes are in the tooltip, and a plot without any bar says why at its centre.
"""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont, QFontMetrics

from ddpgui.core.outputs.figures import bars_bottom, group_key

from .plot_text import QUIET, FittedTitle, PlotMessage, break_lines, set_axis_label


def _fit(text: str, width: float, metrics: QFontMetrics) -> list[str] | None:
    """``text`` broken at spaces into at most two lines of at most ``width`` pixels; None when it does not fit."""
    lines = break_lines(text, width, metrics)
    fits = len(lines) <= 2 and all(metrics.horizontalAdvance(line) <= width for line in lines)
    return lines if fits else None


class BarPlot(pg.PlotWidget):
    """Bars with 95% CI error bars (pyqtgraph BarGraphItem + ErrorBarItem), one tick label per bar."""

    keyed_changed = Signal(bool)  # the bars are named A, B, … (True) or by their labels

    def __init__(self, title: str, y_label: str, parent=None):
        super().__init__(parent=parent)
        self.setObjectName(f"bars:{title}")
        self.title = title
        self.fitted = FittedTitle(self, title)
        item = self.getPlotItem()
        item.setLabel("left", y_label)
        item.getAxis("left").enableAutoSIPrefix(False)  # "GiB (x0.001)" reads wrong: the caller picks the unit
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        self.message = PlotMessage(item)
        self.values: list[float | None] = []
        self.errors: list[tuple[float, float] | None] = []
        self.labels: list[str] = []
        self.notes: list[str] = []
        self.marks: list[pg.TextItem] = []
        self.dots: list[list[float]] = []
        self.keyed = False
        # made once and given new data at each redraw (creating and removing pyqtgraph items cost more than the
        # rest of a redraw), in the order they stack: bars, intervals, the reference line, ranges, dots, marks
        self._bars = pg.BarGraphItem(x=[0.0], height=[0.0], width=0.6)
        self._intervals = pg.ErrorBarItem(beam=0.2)
        self._reference = pg.InfiniteLine(1.0, angle=0, pen=pg.mkPen("#888", style=Qt.PenStyle.DotLine))
        self._ranges = pg.PlotDataItem([], [], connect="pairs")
        self._dots = pg.ScatterPlotItem(size=5, symbol="o")
        for part in self._parts():
            part.setVisible(False)
            item.addItem(part)
        self._spare_marks: list[pg.TextItem] = []  # made for earlier redraws, hidden
        self.fitted.fit()

    def _parts(self) -> tuple:
        return self._bars, self._intervals, self._reference, self._ranges, self._dots

    def set_y_label(self, text: str) -> None:
        """The y axis's label (the unit of the bars)."""
        set_axis_label(self.getPlotItem(), "left", text)

    def show_bars(self, labels: list[str], values: list[float | None], errors: list[tuple[float, float] | None],
                  colors: list[str], reason: str = "", reference: float | None = None,
                  notes: list[str] | None = None, title: str | None = None,
                  dots: list | None = None) -> None:
        """Draw one bar per label; ``errors`` are (below, above) distances to the interval's ends (asymmetric);
        ``reason`` is said when no bar.

        ``notes[i]`` (optional): why bar i has no value, or what its value comes with; a value with
        a note gets "*", a missing one "n/a"; ``title`` replaces the plot's title; ``dots[i]``: the values of
        bar i's repeats (each a dot; where bar i has no interval, a line over their range too).
        """
        item = self.getPlotItem()
        for part in (*self._parts(), *self.marks):
            part.setVisible(False)
        self._spare_marks = self.marks + self._spare_marks
        self.values, self.errors, self.labels = values, errors, labels
        self.notes = list(notes) if notes is not None else [""] * len(labels)
        self.marks, self.dots = [], []
        self.fitted.set(title or self.title)
        drawn = [i for i, v in enumerate(values) if v is not None]
        self._ticks()
        if not drawn:
            self.message.show(reason or "no values")
            self._tooltip()
            item.setXRange(-0.6, max(1, len(labels)) - 0.4, padding=0)
            item.setYRange(0, 1, padding=0)
            self._empty_hidden()
            return
        self.message.hide()
        x = np.array(drawn, float)
        heights = np.array([values[i] for i in drawn], float)
        self._bars.setOpts(x=x, height=heights, width=0.6, brushes=[pg.mkBrush(colors[i]) for i in drawn],
                           pens=[pg.mkPen(pg.getConfigOption("background"), width=0.5)] * len(drawn))
        self._bars.setVisible(True)
        with_ci = [i for i in drawn if errors[i] is not None]
        if with_ci:
            self._intervals.setData(x=np.array(with_ci, float), y=np.array([values[i] for i in with_ci], float),
                                    bottom=np.array([errors[i][0] for i in with_ci], float),
                                    top=np.array([errors[i][1] for i in with_ci], float),
                                    pen=pg.mkPen(pg.getConfigOption("foreground"), width=1.5))
            self._intervals.setVisible(True)
        if reference is not None:
            self._reference.setValue(reference)
            self._reference.setVisible(True)
        self.dots = [list(d) if i in drawn and len(d) >= 2 else [] for i, d in enumerate(dots or [])]
        self._draw_dots(errors)
        tops = [max([v + (e[1] if e is not None else 0.0)] + (self.dots[i] if i < len(self.dots) else []))
                for i, (v, e) in enumerate(zip(values, errors)) if v is not None]
        bottom = bars_bottom(values, errors)
        top = max(tops + [reference or 0.0]) * 1.15 - bottom * 0.15  # room for the marks over the bars
        for i, value in enumerate(values):
            if value is None:
                self._mark(i, "n/a", bottom, (0.5, 1.0))
            elif self.notes[i]:
                over = max([value + (errors[i][1] if errors[i] is not None else 0.0)]
                           + (self.dots[i] if i < len(self.dots) else []))
                self._mark(i, "*", over, (0.5, 1.0))
        item.setXRange(-0.6, len(labels) - 0.4, padding=0)
        item.setYRange(bottom, top if top > bottom else bottom + 1.0, padding=0)
        self._tooltip()
        self._empty_hidden()

    def _empty_hidden(self) -> None:
        """What this redraw hides holds no data: pyqtgraph's CSV export reads hidden items too."""
        if not self._intervals.isVisible() and self._intervals.opts["x"] is not None:
            self._intervals.setData(x=None, y=None)
        if not self._ranges.isVisible() and self._ranges.getData()[0] is not None:
            self._ranges.setData([], [])
        if not self._dots.isVisible() and len(self._dots.data):
            self._dots.clear()

    def _draw_dots(self, errors: list) -> None:
        """Each repeat a small open dot spread across its bar; a bar without an interval: a line over the range."""
        xs, ys, ranges = [], [], []
        for i, points in enumerate(self.dots):
            if not points:
                continue
            xs += list(i + np.linspace(-0.12, 0.12, len(points)))
            ys += points
            if errors[i] is None:
                ranges += [(i, min(points)), (i, max(points))]
        foreground = pg.getConfigOption("foreground")
        if ranges:
            x, y = np.array(ranges, float).T
            self._ranges.setData(x, y, pen=pg.mkPen(foreground, width=1))
            self._ranges.setVisible(True)
        if xs:
            self._dots.setData(np.array(xs, float), np.array(ys, float), pen=pg.mkPen(foreground, width=1),
                               brush=pg.mkBrush("w"))
            self._dots.setVisible(True)

    def _mark(self, i: int, text: str, y: float, anchor: tuple[float, float]) -> None:
        if self._spare_marks:
            mark = self._spare_marks.pop(0)
            if mark.toPlainText() != text:
                mark.setText(text)
            mark.setAnchor(anchor)
            mark.setVisible(True)
        else:
            mark = pg.TextItem(text, anchor=anchor, color=QUIET)
            self.getPlotItem().addItem(mark, ignoreBounds=True)
        mark.setPos(i, y)
        self.marks.append(mark)

    def _ticks(self) -> None:
        """Each bar's label wrapped to its width (two lines, then "n=…"); when one does not fit, every bar is
        named by its key A, B, … instead (the Compare tab's key line and the tooltip say which is which)."""
        per_bar = max(40, (self.width() - 70) / max(1, len(self.labels))) - 8
        axis = self.getPlotItem().getAxis("bottom")
        metrics = QFontMetrics(axis.style["tickFont"] or QFont())
        heads, counts = [], []
        for label in self.labels:
            head, _, n = label.rpartition("\n")
            heads.append(head or label)
            counts.append([n] if head else [])
        fitted = [_fit(h, per_bar, metrics) for h in heads]
        keyed = any(f is None for f in fitted)
        lines = [[group_key(i)] if keyed else f for i, f in enumerate(fitted)]
        ticks = [(i, "\n".join(head + n)) for i, (head, n) in enumerate(zip(lines, counts))]
        axis.setTicks([ticks])
        rows = max((len(text.split("\n")) for _, text in ticks), default=1)
        axis.setHeight(metrics.lineSpacing() * rows + 14)
        if keyed != self.keyed:
            self.keyed = keyed
            self.keyed_changed.emit(keyed)

    def _tooltip(self) -> None:
        """The whole title, every label, and every bar's note (the "*" and "n/a" marks)."""
        lines = [self.fitted.text]
        for label, value, note in zip(self.labels, self.values, self.notes):
            shown = " ".join(label.split())
            lines.append(f"{shown}: " + ("n/a" if value is None else f"{value:.4g}") + (f" — {note}" if note else ""))
        if any(d for d, e in zip(self.dots, self.errors) if e is None):
            lines.append("Dots: the repeats; a line: their range (an interval needs ≥ 3 repeats)")
        self.setToolTip("\n".join(lines))

    def tick_texts(self) -> list[str]:
        """The bottom axis's tick labels as drawn (for tests)."""
        ticks = self.getPlotItem().getAxis("bottom")._tickLevels
        return [text for _, text in ticks[0]] if ticks else []

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if "fitted" not in self.__dict__:  # a resize while the base class builds the widget
            return
        self.fitted.fit()
        self._ticks()
        if self.toolTip():
            self._tooltip()
