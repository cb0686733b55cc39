"""The Compare tab's loss plot: each setting's smoothed centre over its repeats with a shaded 95% interval.

The aggregation is :func:`ddpgui.core.analysis.curves.group_curves` (the exported loss figure's
own: each run smoothed by TensorBoard's debiased EMA, then the centre; a band only where 3 or more
repeats logged the step); the band is reduced to pixel columns as the figure does
(:func:`ddpgui.core.outputs.curves.band_envelope`).  Like the figure, the y range is the
curves' (runs and centres), never the interval's.  A group of 2 repeats has no band: its
repeats are drawn faintly whatever "Each run" says; each group's centre has its own line style,
so centres that coincide stay apart.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QPainterPath
from PySide6.QtWidgets import QGraphicsPathItem

from ddpgui.core.analysis.comparison import Comparison, Curve
from ddpgui.core.analysis.curves import MeanCurve, group_curves
from ddpgui.core.analysis.stats import MIN_N
from ddpgui.core.outputs.curves import band_envelope
from ddpgui.core.outputs.style import X_LABELS

from .buffer import SeriesBuffer
from .live_plot import LivePlot
from .plot_text import FittedTitle, PlotMessage, set_axis_label

#: Pen styles that go with figures.LINESTYLES (a repeat gets the next one).
PEN_STYLES = (Qt.PenStyle.SolidLine, Qt.PenStyle.DashLine, Qt.PenStyle.DashDotLine, Qt.PenStyle.DotLine)
#: Pixel columns the band is reduced to (at most; fewer points are drawn as they are).
BAND_COLUMNS = 2000
#: How faint each run is under its group's mean (alpha of its opaque tint).
FAINT = 90


def mean_key(group_key: str) -> str:
    """The curve key of a group's mean (runs are keyed by their run id)."""
    return f"mean:{group_key}"


@dataclass
class Band:
    """A group's shaded interval: the filled outline (kept to take it out again) and its reduced edges."""

    fill: QGraphicsPathItem
    x: np.ndarray
    low: np.ndarray
    high: np.ndarray


def band_path(x: np.ndarray, low: np.ndarray, high: np.ndarray) -> QPainterPath:
    """The interval as closed outlines, one per stretch where it is defined (the high edge forward, the low one
    back), each built in one go by pyqtgraph's array-to-path: a FillBetweenItem of two 2000-point edges walks
    their polygons in Python and took 14 of the redraw's 100 ms for 4 groups."""
    ok = np.isfinite(x) & np.isfinite(low) & np.isfinite(high)
    bounds = np.flatnonzero(np.diff(np.concatenate(([0], ok.astype(np.int8), [0]))))
    path = QPainterPath()
    for start, end in zip(bounds[::2], bounds[1::2]):
        part = pg.arrayToQPath(np.concatenate((x[start:end], x[start:end][::-1])),
                               np.concatenate((high[start:end], low[start:end][::-1])), connect="all")
        part.closeSubpath()
        path.addPath(part)
    return path


def series(x: np.ndarray, y: np.ndarray) -> SeriesBuffer:
    """A buffer holding these points, its min/max pyramid built (so that a worker can do it)."""
    buffer = SeriesBuffer(max(16, len(x)))
    buffer.extend(x, y)
    buffer.build_pyramid()
    return buffer


@dataclass
class ReadyCurves:
    """One group's loss curves as :class:`MeanCurvesPlot` draws them: its centre's and each run's buffer and its
    band (reduced edges and outline; None where it has no interval). :func:`ready_curves` makes them on the
    Compare tab's worker: filling the buffers and reducing the bands took the GUI thread 20 ms of each redraw."""

    curve: MeanCurve
    centre: SeriesBuffer
    runs: list[SeriesBuffer]
    band: tuple[np.ndarray, np.ndarray, np.ndarray, QPainterPath] | None

    @classmethod
    def of(cls, c: MeanCurve) -> ReadyCurves:
        ok = np.isfinite(c.x) & np.isfinite(c.mean)
        valid = np.isfinite(c.x) & np.isfinite(c.ci_lo) & np.isfinite(c.ci_hi)
        band = None
        if valid.any():
            x, low, high = band_envelope(c.x, c.ci_lo, c.ci_hi, valid, BAND_COLUMNS, float(np.nanmin(c.x)),
                                         float(np.nanmax(c.x)))
            band = (x, low, high, band_path(x, low, high))
        return cls(c, series(c.x[ok], c.mean[ok]), [series(rx, ry) for rx, ry in c.runs], band)


def ready_curves(means: Sequence[MeanCurve]) -> list[ReadyCurves]:
    """The groups' curves ready to be drawn (QPainterPath and numpy only: a worker thread may make them)."""
    return [ReadyCurves.of(c) for c in means]


class MeanCurvesPlot(LivePlot):
    """Loss per group: the mean (and its band where n ≥ 2) in the group's colour; each run faint (``individual``)."""

    def __init__(self, parent=None):
        super().__init__("loss", "training loss", "step", parent)
        self.setObjectName("compare_loss")
        self.fitted = FittedTitle(self, "loss")
        self.message = PlotMessage(self.getPlotItem())
        self.bands: dict[str, Band] = {}
        self._fills: list[QGraphicsPathItem] = []  # every band's fill made; those past len(bands) hidden, spare
        self.means: list[MeanCurve] = []
        # nothing else redraws this plot (the dashboard has a timer): a resize of the auto-ranged view, as when
        # the tab is first laid out, redraws the curves for the new width at once
        self._later = QTimer(self, singleShot=True, interval=0)
        self._later.timeout.connect(self.redraw)
        self.getPlotItem().getViewBox().sigResized.connect(self._later.start)

    def show_groups(self, comparison: Comparison, curves: Mapping[str, Curve], x_axis: str,
                    colours: Mapping[str, str], order: Sequence[str], labels: Mapping[str, str],
                    individual: bool = True, means: Sequence[MeanCurve | ReadyCurves] | None = None) -> None:
        """Draw the groups in ``order`` (group keys) in ``colours``; ``labels``: run id → its name; ``means``: the
        groups' mean curves along ``x_axis`` computed already (on a worker, best made ready there:
        :func:`ready_curves`), else they are computed here."""
        self.remove_curves(keep_legend=True)  # the same groups again: the legend's entries stay as they are
        item = self.getPlotItem()
        set_axis_label(item, "bottom", X_LABELS[x_axis])
        means = group_curves(comparison, curves, x_axis) if means is None else means
        ready = [c if isinstance(c, ReadyCurves) else ReadyCurves.of(c) for c in means]
        ready = [c for c in ready if len(c.curve.x)]
        self.means = [c.curve for c in ready]
        by_key = {c.curve.key: c for c in ready}
        banded = small = False
        for i, key in enumerate(order):
            group, ready_group = comparison.group(key), by_key.get(key)
            if ready_group is None:
                continue
            mean = ready_group.curve
            colour = colours[key]
            drawn = [r for r in group.run_ids if r in curves and len(curves[r].step)]  # mean.runs' order
            if group.n > 1:
                small |= group.n < MIN_N
                if individual or group.n < MIN_N:  # fewer than 3: no band, the repeats themselves instead
                    for run_id, buffer in zip(drawn, ready_group.runs):
                        self._run(run_id, buffer, labels[run_id], colour, legend=False)
                banded |= self._band(key, ready_group.band, colour)
                self.add_curve(mean_key(key), ready_group.centre, f"{group.label} ({mean.centre} of n={group.n})",
                               colour, width=2.0, style=PEN_STYLES[i % len(PEN_STYLES)])
            elif drawn:  # one run: its own (smoothed) curve, the group's centre
                self._run(drawn[0], ready_group.runs[0], group.label, colour, style=PEN_STYLES[i % len(PEN_STYLES)])
        smoothing = f"EMA {self.means[0].smoothing:g}" if self.means and self.means[0].smoothing else "raw"
        self.fitted.set(f"loss ({smoothing}" + ("; shaded: 95% CI" if banded else "")
                        + ("; faint: repeats, n < 3 has no CI" if small else "") + ")")
        if self.means:
            self.message.hide()
        else:
            self.message.show("no compared run has logged a loss yet")
        item.enableAutoRange()
        self.mark_dirty()
        self.redraw()

    def _run(self, run_id: str, buffer: SeriesBuffer, name: str, colour: str, legend: bool = True,
             style: Qt.PenStyle = Qt.PenStyle.SolidLine) -> None:
        if not len(buffer):
            return
        self.add_curve(run_id, buffer, name, colour, alpha=255 if legend else FAINT, style=style, legend=legend)

    def _band(self, key: str, band: tuple | None, colour: str) -> bool:
        """The group's shaded interval where it has one (3 or more repeats at a step); whether it drew any."""
        if band is None:
            return False
        x, low, high, path = band
        tint = pg.mkColor(colour)
        tint.setAlpha(60)
        if len(self.bands) < len(self._fills):  # one that remove_curves hid
            fill = self._fills[len(self.bands)]
            fill.setPath(path)
            fill.setVisible(True)
        else:
            fill = QGraphicsPathItem(path)
            fill.setPen(pg.mkPen(None))
            fill.setZValue(-0.5)  # under the curves, over the grid
            self.getPlotItem().addItem(fill, ignoreBounds=True)  # the view follows the curves, not the wide interval
            self._fills.append(fill)
        if fill.brush().color() != tint:
            fill.setBrush(pg.mkBrush(tint))
        self.bands[key] = Band(fill, x, low, high)
        return True

    def remove_curves(self, keep_legend: bool = False) -> None:
        super().remove_curves(keep_legend)
        for band in self.bands.values():
            band.fill.setVisible(False)
        self.bands.clear()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if "fitted" not in self.__dict__:  # a resize while the base class builds the widget
            return
        self.fitted.fit()
