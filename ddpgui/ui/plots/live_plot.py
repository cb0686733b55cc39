"""A pyqtgraph plot for live series: every point kept, drawn as an exact per-pixel min/max envelope.

Curves are bound to :class:`SeriesBuffer`s.  Each redraw (at most the dashboard's timer
rate) and each pan/zoom asks the buffers for the envelope of the visible range at the
plot's pixel width (see :meth:`SeriesBuffer.envelope`), so drawing costs O(pixels) per
curve however many points a run has, and the data is never sampled.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QFont, QTextOption
from PySide6.QtWidgets import QFileDialog

from ddpgui.core.runs.live import format_number

from .buffer import SeriesBuffer

#: What an empty plot says unless told otherwise (:meth:`LivePlot.set_placeholder`).
WAITING = "waiting for the first points"
#: The smallest font a long placeholder text is set in before it is cut short.
PLACEHOLDER_MIN_PT = 8.0
PALETTE = ("#4c8df6", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7",
           "#9c755f", "#bab0ac")


def _opaque_grid(item: pg.PlotItem) -> None:
    """A faint grid drawn in an opaque colour: alpha-blended grid lines cost half of a repaint offscreen."""
    background = pg.mkColor(pg.getConfigOption("background"))
    foreground = pg.mkColor(pg.getConfigOption("foreground"))
    mix = [round(b + 0.15 * (f - b)) for b, f in zip(background.getRgb()[:3], foreground.getRgb()[:3])]
    for name in ("left", "bottom"):
        axis = item.getAxis(name)
        axis.setTickPen(pg.mkPen(mix))
        axis.setStyle(tickAlpha=255, maxTickLevel=1)  # opaque, and no third level of faint lines
        axis.setZValue(-1)  # behind the curves: an opaque grid line would hide a curve that runs along it
    item.showGrid(x=True, y=True, alpha=1.0)


#: Wall-clock tick spacings (seconds): whole seconds, never "22.500 23.000".
CLOCK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


class ClockAxis(pg.DateAxisItem):
    """Wall-clock x axis: ticks on whole seconds, read HH:MM:SS (with the date when ticks are a day apart)."""

    def tickSpacing(self, minVal, maxVal, size):  # noqa: N802 (pyqtgraph's name)
        span = max(maxVal - minVal, 1e-9)
        want = span / max(2.0, size / 90.0)  # about one label per 90 px
        major = next((s for s in CLOCK_STEPS if s >= want), CLOCK_STEPS[-1] * math.ceil(want / CLOCK_STEPS[-1]))
        minor = next((s for s in reversed(CLOCK_STEPS) if s <= major / 4), None)
        return [(major, 0)] + ([(minor, 0)] if minor else [])

    def tickValues(self, minVal, maxVal, size):  # noqa: N802
        return pg.AxisItem.tickValues(self, minVal, maxVal, size)

    def tickStrings(self, values, scale, spacing):  # noqa: N802
        fmt = "%m-%d %H:%M" if spacing >= 86400 else "%H:%M:%S"
        return [time.strftime(fmt, time.localtime(v)) for v in values]


class NumberAxis(pg.AxisItem):
    """Ticks as integers when they are whole, and log ticks all as 10ᵏ (never "0.0001" beside "10⁻⁵")."""

    def tickStrings(self, values, scale, spacing):  # noqa: N802
        if not self.logMode and values and all(float(v * scale).is_integer() and abs(v * scale) < 1e7
                                               for v in values):
            return [str(int(v * scale)) for v in values]
        return super().tickStrings(values, scale, spacing)

    def logTickStrings(self, values, scale, spacing):  # noqa: N802
        """Decades as 10ᵏ (other ticks unlabelled); within less than a decade every tick as m×10ᵏ."""
        logs = np.asarray(values, dtype=float) + math.log10(scale or 1.0)
        whole = [abs(v - round(v)) < 1e-6 for v in logs]
        if any(whole):
            return [power_of_ten(round(v)) if w else "" for v, w in zip(logs, whole)]
        return [f"{10 ** (v - math.floor(v)):.2g}×{power_of_ten(math.floor(v))}" for v in logs]


def power_of_ten(k: int) -> str:
    return f"10{str(k).translate(SUPERSCRIPT)}"


class OutsideLegend(pg.LegendItem):
    """A legend in the plot's layout below the axes, never on top of a curve: as many columns as the width
    takes (the widest entry sets the column width), as many rows as that needs; it never widens the plot."""

    MARGIN, GAP = 2, 16

    def __init__(self):
        super().__init__(offset=None, colCount=1, verSpacing=0, labelTextSize="8pt")
        self.layout.setContentsMargins(4, self.MARGIN, 4, self.MARGIN)
        self.available = 400.0  # the width there is (the view box's), set by the plot on resize
        self._fitting = False
        self.setMinimumWidth(0)

    def fit(self, width: float) -> None:
        self.available = max(40.0, float(width))
        self.updateSize()

    def updateSize(self):  # noqa: N802 (pyqtgraph's name)
        if self._fitting:
            return
        self._fitting = True
        try:
            labels = [label.item.boundingRect() for _, label in self.items]
            widest = max((20 + 5 + r.width() for r in labels), default=0.0) + self.GAP
            columns = max(1, min(len(labels), int(self.available // widest))) if labels else 1
            self.setColumnCount(columns)
            rows = math.ceil(len(labels) / columns)
            height = rows * max((r.height() for r in labels), default=0.0) + 2 * self.MARGIN if labels else 0.0
            self.setMinimumHeight(height)
            self.setMaximumHeight(height)
            self.setMaximumWidth(self.available)
            self.setVisible(bool(labels))
        finally:
            self._fitting = False

    def put(self, index: int, item: pg.GraphicsObject, name: str) -> None:
        """Make entry ``index`` name ``item``: kept as it is when it does already (no new label laid out), else it
        and every entry after it are replaced."""
        if index < len(self.items) and self.items[index][0].item is item and self.items[index][1].text == name:
            self.items[index][0].update()  # the item's pen may have changed: the sample shows it
            return
        self.keep_first(index)
        self.addItem(item, name)

    def keep_first(self, count: int) -> None:
        """Drop every entry after the first ``count`` (the others keep their labels and places)."""
        if len(self.items) <= count:
            return
        for sample, label in self.items[count:]:
            self._removeItemFromLayout(sample, label)
        del self.items[count:]
        for i in range(self.layout.count() - 1, -1, -1):  # laid out again from the first cell, as setColumnCount does
            self.layout.removeAt(i)
        self.rowCount = 0
        for sample, label in self.items:
            self._addItemToLayout(sample, label)
        self.updateSize()


def _mark_lone_point(curve: pg.PlotDataItem, lone: bool) -> None:
    """A curve of one point draws no line: show that point as a dot (a script that logged once), and no dots
    once it has two."""
    if lone == (curve.opts.get("symbol") is not None):
        return
    if lone:
        color = curve.opts["pen"].color()
        curve.setSymbol("o")
        curve.setSymbolSize(6)
        curve.setSymbolPen(color)
        curve.setSymbolBrush(color)
    else:
        curve.setSymbol(None)


class LivePlot(pg.PlotWidget):
    """Curves bound to buffers; :meth:`redraw` pushes the buffers that changed, or all after a pan/zoom."""

    def __init__(self, title: str = "", y_label: str = "", x_label: str = "step", parent=None):
        super().__init__(parent=parent, axisItems={"left": NumberAxis("left"), "bottom": NumberAxis("bottom")})
        self.setObjectName(f"plot:{title}")
        item = self.getPlotItem()
        item.setTitle(title)
        item.setLabel("left", y_label)
        item.setLabel("bottom", x_label)
        _opaque_grid(item)
        self.legend = OutsideLegend()  # below the axes, outside the data area
        item.layout.addItem(self.legend, 4, 1)
        item.legend = self.legend  # named curves register with it
        self.curves: dict[str, tuple[pg.PlotDataItem, SeriesBuffer]] = {}
        #: Every curve made, in the order made (their stacking order); those from ``_used`` on are hidden, spare.
        self._made: list[pg.PlotDataItem] = []
        self._used = 0
        self._legend_count = 0  # legend entries named since remove_curves
        self._dirty: set[str] = set()
        self._drawn: dict[str, tuple[int, int] | None] = {}  # what a curve holds when it holds raw points
        self._view_moved = False
        self._drawing = False
        self._wall_clock = False
        self._vline = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#888", style=Qt.PenStyle.DashLine))
        self._readout = pg.TextItem(anchor=(0, 1), color="#888")
        #: Said in the empty plot (no points yet: a run starting or compiling); hidden once a curve has points.
        self.placeholder = pg.TextItem(WAITING, anchor=(0.5, 0.5), color="#888")
        self.placeholder_text = WAITING  # all of it (what is shown may be cut short to fit)
        self.placeholder.textItem.document().setDefaultTextOption(QTextOption(Qt.AlignmentFlag.AlignCenter))
        for overlay in (self._vline, self._readout, self.placeholder):
            overlay.setVisible(False)
            item.addItem(overlay, ignoreBounds=True)
        self._mouse = pg.SignalProxy(self.scene().sigMouseMoved, rateLimit=20, slot=self._on_mouse)
        view = item.getViewBox()
        view.sigXRangeChanged.connect(self._on_view_moved)
        view.sigResized.connect(self._on_view_moved)
        view.sigResized.connect(lambda *_: self.legend.fit(view.width()))
        view.sigResized.connect(self._fit_placeholder)
        menu = view.menu
        menu.addSeparator()
        for fmt in ("PNG", "SVG"):
            action = QAction(f"Save this plot as {fmt}…", menu)
            action.triggered.connect(lambda _=False, f=fmt: self._ask_export(f))
            menu.addAction(action)

    # ---- curves ----------------------------------------------------------------------------
    def add_curve(self, key: str, buffer: SeriesBuffer, name: str | None = None, color: str | None = None,
                  width: float = 1.0, alpha: int = 255, style: Qt.PenStyle = Qt.PenStyle.SolidLine,
                  legend: bool = True) -> pg.PlotDataItem:
        """A curve drawing ``buffer``; ``name`` in the legend (unless ``legend`` is False) and the hover readout.

        A curve that :meth:`remove_curves` hid is used again (creating and removing pyqtgraph items took half of a
        Compare tab redraw); the k-th curve added after it is the k-th made, so curves stack in the order added."""
        color = pg.mkColor(color or PALETTE[len(self.curves) % len(PALETTE)])
        if alpha < 255:  # a faint curve in an opaque tint: alpha blending would cost more than the curve
            background = pg.mkColor(pg.getConfigOption("background"))
            f = alpha / 255
            color = pg.mkColor([round(f * c + (1 - f) * b) for c, b in zip(color.getRgb()[:3],
                                                                         background.getRgb()[:3])])
        pen = pg.mkPen(color, width=width, style=style)
        if self._used < len(self._made):
            curve = self._made[self._used]
            if curve.opts["symbol"] is not None:
                curve.setSymbol(None)  # a lone point's dot in the previous curve's colour (redraw sets it again)
            if curve.opts["pen"] != pen:
                curve.setPen(pen)
            curve.setVisible(True)
        else:
            curve = self.getPlotItem().plot([], [], pen=pen, connect="finite")
            self._made.append(curve)
        self._used += 1
        curve.opts["name"] = name  # the hover readout names it also when the legend does not
        if legend and name is not None:
            self.legend.put(self._legend_count, curve, name)
            self._legend_count += 1
        self.curves[key] = (curve, buffer)
        self._drawn.pop(key, None)
        self._dirty.add(key)
        return curve

    def remove_curves(self, keep_legend: bool = False) -> None:
        """Take every curve away (hidden, to be used again by :meth:`add_curve`); ``keep_legend``: the legend's
        entries stay until the next :meth:`redraw`, and those the curves added again name as before are not laid
        out again."""
        for curve in self._made[:self._used]:
            curve.setVisible(False)
        self._used = 0
        self._legend_count = 0
        if not keep_legend:
            self.legend.keep_first(0)
        self.curves.clear()
        self._dirty.clear()
        self._drawn.clear()

    def set_placeholder(self, text: str | None) -> None:
        """What the plot says while no curve has a point (None: "waiting for the first points"); a long text
        wraps to the plot's width, in a smaller font where the plot is low, cut short with "…" as the last resort."""
        text = text or WAITING
        if text != self.placeholder_text:
            self.placeholder_text = text
            self._fit_placeholder()
            self._view_moved = True  # placed again at the next redraw

    def _fit_placeholder(self, *_: object) -> None:
        view = self.getPlotItem().getViewBox()
        width, height = 0.9 * view.width(), 0.9 * view.height()
        item, text = self.placeholder.textItem, self.placeholder_text
        font = QFont(self.font())
        item.setFont(font)
        self.placeholder.setText(text)

        def fits(shown: str) -> bool:
            item.setPlainText(shown)
            item.setTextWidth(-1)
            if width > 0 and item.boundingRect().width() > width:
                item.setTextWidth(width)
            return height <= 0 or item.boundingRect().height() <= height

        while not fits(text) and font.pointSizeF() > PLACEHOLDER_MIN_PT:
            font.setPointSizeF(font.pointSizeF() - 1)
            item.setFont(font)
        if not fits(text):  # the longest start of the text, in whole words, that fits
            words = text.split(" ")
            low, high = 1, len(words)
            while low < high:
                middle = (low + high + 1) // 2
                low, high = (middle, high) if fits(" ".join(words[:middle]) + " …") else (low, middle - 1)
            fits(" ".join(words[:low]) + " …")
        self.placeholder.updateTextPos()

    def mark_dirty(self, key: str | None = None) -> None:
        self._dirty.update(self.curves if key is None else (key,))

    def set_wall_clock(self, on: bool, x_label: str) -> None:
        """Bottom axis as dates/times (x in Unix seconds) or plain numbers."""
        item = self.getPlotItem()
        if on != self._wall_clock:
            self._wall_clock = on
            item.setAxisItems({"bottom": ClockAxis(orientation="bottom") if on else NumberAxis("bottom")})
            _opaque_grid(item)
        item.setLabel("bottom", x_label)

    def reset_view(self) -> None:
        """Forget the previous curves' range (a new run: no old axes while it has no points yet)."""
        self.getPlotItem().getViewBox().setRange(xRange=(0, 1), yRange=(0, 1), padding=0)
        self.hide_readout()

    # ---- drawing ---------------------------------------------------------------------------
    def _on_view_moved(self, *_: object) -> None:
        """A pan/zoom by the user is redrawn at once; an auto-range that follows live data (it happens while
        the scene prepares to paint) waits for the next timer tick, so each frame paints only once."""
        self._view_moved = True
        if not self._drawing and not self.getPlotItem().getViewBox().autoRangeEnabled()[0]:
            self.redraw()

    def redraw(self) -> None:
        """Give the changed curves (all of them after a pan, zoom or resize) their envelope for the view."""
        self.legend.keep_first(self._legend_count)  # what remove_curves(keep_legend=True) left and no curve named
        for spare in self._made[self._used:]:
            if spare.xData is not None:  # a hidden curve holds no data: pyqtgraph's CSV export reads it too
                spare.setData([], [])
        if self._drawing or not (self._dirty or self._view_moved):
            return
        empty = bool(self.curves) and not any(len(buffer) for _, buffer in self.curves.values())
        if empty:
            (x0, x1), (y0, y1) = self.getPlotItem().getViewBox().viewRange()
            self.placeholder.setPos((x0 + x1) / 2, (y0 + y1) / 2)
        self.placeholder.setVisible(empty)
        self._drawing = True
        try:
            for _ in range(2):  # a second pass when the new data moved an auto-ranged view
                keys = set(self.curves) if self._view_moved else self._dirty & set(self.curves)
                self._dirty.clear()
                self._view_moved = False
                if not keys:
                    break
                view = self.getPlotItem().getViewBox()
                (x0, x1), _ = view.viewRange()
                pixels = max(1, int(view.width()))
                for key in keys:
                    curve, buffer = self.curves[key]
                    drawn = (buffer.version, pixels) if buffer.is_raw(pixels) else None
                    if drawn is not None and self._drawn.get(key) == drawn:
                        continue  # the raw points, unchanged: the view alone moved
                    curve.setData(*buffer.envelope(x0, x1, pixels))
                    _mark_lone_point(curve, len(buffer) == 1)
                    self._drawn[key] = drawn
                if any(view.state["autoRange"]):
                    # follow the new data now: left to paint time, the range change would paint the frame twice
                    view.updateAutoRange()
                if not self._view_moved:
                    break
        finally:
            self._drawing = False

    def curve_data(self, key: str):
        """The x/y the curve holds now (for tests)."""
        return self.curves[key][0].getData()

    # ---- export ----------------------------------------------------------------------------
    def export_image(self, path: str | Path) -> Path:
        """Write this plot alone as PNG or SVG (by the file's suffix)."""
        from pyqtgraph.exporters import ImageExporter

        path = Path(path)
        if path.suffix.lower() == ".svg":
            # pyqtgraph's SVGExporter cannot parse the paths Qt 6 writes; Qt's own SVG painter is vector too
            from PySide6.QtGui import QPainter
            from PySide6.QtSvg import QSvgGenerator

            generator = QSvgGenerator()
            generator.setFileName(str(path))
            generator.setSize(self.size())
            generator.setViewBox(self.rect())
            generator.setTitle(self.getPlotItem().titleLabel.text or "plot")
            generator.setDescription("exported by ddpgui")
            painter = QPainter(generator)
            try:
                self.render(painter)
            finally:
                painter.end()
            return path
        if path.suffix.lower() == ".png":
            exporter = ImageExporter(self.getPlotItem())
            exporter.parameters()["width"] = max(1200, int(self.width() * 2))
        else:
            raise ValueError(f"export a plot as .png or .svg, not {path.suffix or 'a file without a suffix'}")
        exporter.export(str(path))
        return path

    def _ask_export(self, fmt: str) -> None:
        title = self.getPlotItem().titleLabel.text or "plot"
        path, _ = QFileDialog.getSaveFileName(self, f"Save plot as {fmt}", f"{title}.{fmt.lower()}",
                                              f"{fmt} (*.{fmt.lower()})")
        if path:
            if not path.lower().endswith(f".{fmt.lower()}"):
                path += f".{fmt.lower()}"
            self.export_image(path)

    # ---- crosshair -------------------------------------------------------------------------
    def hide_readout(self) -> None:
        self._vline.setVisible(False)
        self._readout.setVisible(False)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802
        self._inside = True
        super().mouseMoveEvent(event)

    def leaveEvent(self, event) -> None:  # noqa: N802
        """The readout goes with the mouse (a move the rate limit still holds back cannot bring it back)."""
        self._inside = False
        self.hide_readout()
        super().leaveEvent(event)

    def _on_mouse(self, event) -> None:
        pos = event[0]
        item = self.getPlotItem()
        if not getattr(self, "_inside", True) or not item.vb.sceneBoundingRect().contains(pos) or not self.curves:
            self._vline.setVisible(False)
            self._readout.setVisible(False)
            return
        point = item.vb.mapSceneToView(pos)
        parts = []
        for curve, buffer in self.curves.values():
            if not curve.isVisible() or not len(buffer) or not curve.name():
                continue
            i = min(len(buffer) - 1, int(buffer.x.searchsorted(point.x())))
            parts.append(f"{curve.name()}: {format_number(buffer.y[i], 4)}")
        self._vline.setPos(point.x())
        x = time.strftime("%H:%M:%S", time.localtime(point.x())) if self._wall_clock else format_number(point.x(), 4)
        self._readout.setText(f"x={x}  " + "  ".join(parts))
        self._readout.setPos(point.x(), point.y())
        self._vline.setVisible(True)
        self._readout.setVisible(True)
