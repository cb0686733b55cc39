"""The Compare tab's scaling plot: throughput against process count per family, with the ideal line.

The legend sits below the axes (:class:`~ddpgui.ui.plots.live_plot.OutsideLegend`), never over
the points; without a family to draw the plot says why at its centre.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from ddpgui.core.analysis.comparison import Comparison, GroupStats, family_key
from ddpgui.core.outputs.figures import estimate_error, interval_words

from .live_plot import OutsideLegend
from .plot_text import FittedTitle, PlotMessage, set_axis_label

NO_FAMILY = "Scaling needs a 1-process run and an N-process run with otherwise the same settings."


@dataclass
class FamilyItems:
    """What one family is drawn with, in the order it stacks: its line, intervals, repeats' dots and ideal line."""

    line: pg.PlotDataItem
    intervals: pg.ErrorBarItem
    dots: pg.ScatterPlotItem
    ideal: pg.PlotDataItem

    def parts(self) -> tuple:
        return self.line, self.intervals, self.dots, self.ideal

    def empty(self) -> None:
        """Hidden, holding no data (pyqtgraph's CSV export reads hidden items too)."""
        self.line.setData([], [])
        self.intervals.setData(x=None, y=None)
        self.dots.clear()
        self.ideal.setData([], [])
        for part in self.parts():
            part.setVisible(False)


class ScalingPlot(pg.PlotWidget):
    def __init__(self, parent=None):
        super().__init__(parent=parent)
        self.setObjectName("scaling_plot")
        item = self.getPlotItem()
        item.setLabel("bottom", "processes (GPUs)")
        item.getAxis("left").enableAutoSIPrefix(False)
        self.legend = OutsideLegend()
        item.layout.addItem(self.legend, 4, 1)
        item.legend = self.legend
        item.getViewBox().sigResized.connect(lambda *_: self.legend.fit(item.getViewBox().width()))
        self.fitted = FittedTitle(self, "scaling")
        self.message = PlotMessage(item)
        self.families: list[list[GroupStats]] = []
        self.drawn: list[FamilyItems] = []  # made for earlier redraws, given new data (the surplus hidden, empty)

    def _items_for(self, index: int) -> FamilyItems:
        """Family ``index``'s items: those an earlier redraw made, else new ones (stacked over the others)."""
        if index == len(self.drawn):
            item = self.getPlotItem()
            line, intervals, dots = item.plot([], []), pg.ErrorBarItem(), pg.ScatterPlotItem()
            item.addItem(intervals)
            item.addItem(dots)
            self.drawn.append(FamilyItems(line, intervals, dots, item.plot([], [])))
        drawn = self.drawn[index]
        for part in drawn.parts():
            part.setVisible(True)
        return drawn

    def _empty_from(self, index: int) -> None:
        for spare in self.drawn[index:]:
            if spare.line.isVisible():
                spare.empty()

    def show_scaling(self, comparison: Comparison, colours: Mapping[str, str], order: list[GroupStats]) -> None:
        item = self.getPlotItem()
        families: dict[str, list[GroupStats]] = {}
        for g in order:
            if comparison.scaling[g.key].value is not None:
                families.setdefault(family_key(g), []).append(g)
        self.families = [v for v in families.values() if len(v) >= 2]
        set_axis_label(item, "left", comparison.groups[0].runs[0].throughput_unit)
        if not self.families:
            self._empty_from(0)
            self.legend.keep_first(0)
            self.fitted.set("scaling")
            item.getAxis("bottom").setTicks(None)
            item.setXRange(0, 1)
            item.setYRange(0, 1)
            self.message.show(NO_FAMILY)
            self.legend.updateSize()
            return
        self.message.hide()
        shown = [g.metrics["throughput"] for members in self.families for g in members]
        words = interval_words(shown)
        self.fitted.set("scaling" + (f" ({words})" if words else "") + "; dotted: ideal N × 1-process")
        for index, members in enumerate(self.families):
            members.sort(key=lambda g: g.world_size)
            colour = colours[members[0].key]
            n = np.array([g.world_size for g in members], float)
            est = [g.metrics["throughput"] for g in members]
            mean = np.array([e.mean for e in est], float)
            one = next(e.mean for g, e in zip(members, est) if g.world_size == 1)
            words = [w for w in members[0].label.split() if not w.endswith("×")]
            repeats = [(size, v) for size, e in zip(n, est) if len(e.values) >= 2 for v in e.values]
            drawn = self._items_for(index)
            name = " ".join(words) or "throughput"
            drawn.line.setData(n, mean, pen=pg.mkPen(colour, width=1.5), symbol="o", symbolBrush=colour, name=name)
            self.legend.put(index, drawn.line, name)
            errors = np.array([estimate_error(e) or (0.0, 0.0) for e in est], float)
            drawn.intervals.setData(x=n, y=mean, bottom=errors[:, 0], top=errors[:, 1], beam=0.1, pen=pg.mkPen(colour))
            if repeats:  # each repeat a dot (the only spread shown where there are fewer than 3)
                x, y = np.array(repeats, float).T
                drawn.dots.setData(x, y, size=5, pen=pg.mkPen(colour), brush=pg.mkBrush("w"))
            else:
                drawn.dots.clear()
                drawn.dots.setVisible(False)
            drawn.ideal.setData(n, n * one, pen=pg.mkPen(colour, width=1, style=Qt.PenStyle.DotLine))
        self._empty_from(len(self.families))
        self.legend.keep_first(len(self.families))
        sizes = sorted({g.world_size for members in self.families for g in members})
        item.getAxis("bottom").setTicks([[(s, str(s)) for s in sizes]])
        item.enableAutoRange()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if "fitted" not in self.__dict__:  # a resize while the base class builds the widget
            return
        self.fitted.fit()
