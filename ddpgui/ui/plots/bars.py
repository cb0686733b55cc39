"""Bars with 95% CI error bars, one tick label per bar (the Compare tab's throughput, memory and speedup)."""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt


class BarPlot(pg.PlotWidget):
    """Bars with 95% CI error bars (pyqtgraph BarGraphItem + ErrorBarItem), one tick label per bar."""

    def __init__(self, title: str, y_label: str, parent=None):
        super().__init__(parent=parent)
        self.setObjectName(f"bars:{title}")
        self.title = title
        self.getPlotItem().setLabel("left", y_label)
        self.getPlotItem().setMouseEnabled(x=False, y=False)
        self.values: list[float | None] = []
        self.errors: list[tuple[float, float] | None] = []

    def show_bars(self, labels: list[str], values: list[float | None], errors: list[tuple[float, float] | None],
                  colors: list[str], reason: str = "", reference: float | None = None) -> None:
        """Draw one bar per label; ``errors`` are (below, above) half-widths; ``reason`` shown when no bar."""
        item = self.getPlotItem()
        item.clear()
        self.values, self.errors = values, errors
        drawn = [i for i, v in enumerate(values) if v is not None]
        item.setTitle(self.title if drawn else f"{self.title}: {reason or 'no values'}")
        item.getAxis("bottom").setTicks([[(i, label) for i, label in enumerate(labels)]])
        if not drawn:
            return
        x = np.array(drawn, float)
        heights = np.array([values[i] for i in drawn], float)
        item.addItem(pg.BarGraphItem(x=x, height=heights, width=0.6, brushes=[pg.mkBrush(colors[i]) for i in drawn],
                                     pens=[pg.mkPen("k", width=0.5)] * len(drawn)))
        with_ci = [i for i in drawn if errors[i] is not None]
        if with_ci:
            item.addItem(pg.ErrorBarItem(x=np.array(with_ci, float), y=np.array([values[i] for i in with_ci], float),
                                         bottom=np.array([errors[i][0] for i in with_ci], float),
                                         top=np.array([errors[i][1] for i in with_ci], float), beam=0.2,
                                         pen=pg.mkPen("k", width=1)))
        if reference is not None:
            item.addItem(pg.InfiniteLine(reference, angle=0, pen=pg.mkPen("#888", style=Qt.PenStyle.DotLine)))
        item.setXRange(-0.6, len(labels) - 0.4, padding=0)
        item.enableAutoRange(axis="y")
