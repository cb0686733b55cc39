"""A pyqtgraph plot for live series: peak downsampling, clip-to-view, crosshair with values."""
from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt

from .buffer import SeriesBuffer

PALETTE = ("#4c8df6", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7",
           "#9c755f", "#bab0ac")


class LivePlot(pg.PlotWidget):
    """Curves bound to buffers; :meth:`redraw` pushes only the buffers that changed."""

    def __init__(self, title: str = "", y_label: str = "", x_label: str = "step", parent=None):
        super().__init__(parent=parent)
        self.setObjectName(f"plot:{title}")
        item = self.getPlotItem()
        item.setTitle(title)
        item.setLabel("left", y_label)
        item.setLabel("bottom", x_label)
        item.showGrid(x=True, y=True, alpha=0.15)
        item.setDownsampling(auto=True, mode="peak")
        item.setClipToView(True)
        self.legend = item.addLegend(offset=(-10, 10))
        self.curves: dict[str, tuple[pg.PlotDataItem, SeriesBuffer]] = {}
        self._dirty: set[str] = set()
        self._vline = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#888", style=Qt.PenStyle.DashLine))
        self._readout = pg.TextItem(anchor=(0, 1), color="#888")
        for overlay in (self._vline, self._readout):
            overlay.setVisible(False)
            item.addItem(overlay, ignoreBounds=True)
        self._mouse = pg.SignalProxy(self.scene().sigMouseMoved, rateLimit=20, slot=self._on_mouse)

    def add_curve(self, key: str, buffer: SeriesBuffer, name: str | None = None, color: str | None = None,
                  width: float = 1.5, alpha: int = 255) -> pg.PlotDataItem:
        color = pg.mkColor(color or PALETTE[len(self.curves) % len(PALETTE)])
        color.setAlpha(alpha)
        curve = self.getPlotItem().plot([], [], pen=pg.mkPen(color, width=width), name=name)
        curve.setDownsampling(auto=True, method="peak")
        curve.setClipToView(True)
        self.curves[key] = (curve, buffer)
        self._dirty.add(key)
        return curve

    def remove_curves(self) -> None:
        for curve, _ in self.curves.values():
            self.getPlotItem().removeItem(curve)
        self.legend.clear()
        self.curves.clear()
        self._dirty.clear()

    def mark_dirty(self, key: str | None = None) -> None:
        self._dirty.update(self.curves if key is None else (key,))

    def redraw(self) -> None:
        for key in self._dirty:
            if key in self.curves:
                curve, buffer = self.curves[key]
                curve.setData(buffer.x, buffer.y)
        self._dirty.clear()

    def curve_data(self, key: str):
        """The x/y the curve holds now (for tests)."""
        return self.curves[key][0].getData()

    def _on_mouse(self, event) -> None:
        pos = event[0]
        item = self.getPlotItem()
        if not item.sceneBoundingRect().contains(pos) or not self.curves:
            self._vline.setVisible(False)
            self._readout.setVisible(False)
            return
        point = item.vb.mapSceneToView(pos)
        parts = []
        for key, (curve, buffer) in self.curves.items():
            if not curve.isVisible() or not len(buffer) or not curve.name():
                continue
            i = min(len(buffer) - 1, int(buffer.x.searchsorted(point.x())))
            parts.append(f"{curve.name()}: {buffer.y[i]:.4g}")
        self._vline.setPos(point.x())
        self._readout.setText(f"x={point.x():.4g}  " + "  ".join(parts))
        self._readout.setPos(point.x(), point.y())
        self._vline.setVisible(True)
        self._readout.setVisible(True)
