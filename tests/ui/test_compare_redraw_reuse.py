"""The Compare tab's plots keep their pyqtgraph items from one redraw to the next (making and removing them was half
of a redraw) and still show exactly the latest comparison: no curve, band, bar, dot, mark or legend entry of an
earlier one left over, none missing, and no more items after ten redraws than the first ones made."""
import numpy as np
import pyqtgraph as pg
from helpers.recorded_runs import put_recorded
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QGraphicsPathItem

from ddpgui.core.analysis.curves import group_curves
from ddpgui.core.analysis.stats import MIN_N
from ddpgui.ui.plots.buffer import SeriesBuffer
from ddpgui.ui.plots.compare_curves import mean_key
from ddpgui.ui.plots.live_plot import LivePlot


def _compare(view, qtbot, run_ids):
    view.set_runs(run_ids)
    qtbot.waitUntil(lambda: not view.busy and view.comparison is not None
                    and {r for g in view.comparison.groups for r in g.run_ids} == set(run_ids), timeout=60_000)


def _shown(plot, kind):
    return [i for i in plot.getPlotItem().items if isinstance(i, kind) and i.isVisible()]


def _same(a, b) -> bool:
    return sorted(map(id, a)) == sorted(map(id, b))


def _hidden_are_empty(plot):
    for data in plot.getPlotItem().listDataItems():
        if not data.isVisible():
            assert len(data.data) == 0 if isinstance(data, pg.ScatterPlotItem) else data.xData is None


def _loss_shows_exactly(view):
    plot, groups = view.loss_plot, view.ordered_groups()
    colours = view.colours(groups)
    centres = {c.key: c.centre for c in plot.means}
    expected = {c.key: c for c in group_curves(view.comparison, view.curves, view.align_combo.currentText())}
    keys, legend = set(), []
    for g in groups:
        runs = [r for r in g.run_ids if len(view.curves[r].step)]
        if g.n > 1:
            keys.add(mean_key(g.key))
            if view.individual_box.isChecked() or g.n < MIN_N:
                keys |= set(runs)
            legend.append(f"{g.label} ({centres[g.key]} of n={g.n})")
        else:
            keys.add(runs[0])
            legend.append(g.label)
    assert set(plot.curves) == keys
    assert _same(_shown(plot, pg.PlotDataItem), [curve for curve, _ in plot.curves.values()])
    assert [label.text for _, label in plot.legend.items] == legend
    assert all(any(sample.item is curve for curve, _ in plot.curves.values()) for sample, _ in plot.legend.items)
    assert set(plot.bands) == {g.key for g in groups if g.n >= MIN_N}
    assert _same(_shown(plot, QGraphicsPathItem), [band.fill for band in plot.bands.values()])
    for g in (g for g in groups if g.n > 1):  # each centre: its group's points, in its group's colour
        curve, _ = plot.curves[mean_key(g.key)]
        assert curve.opts["pen"].color().name() == QColor(colours[g.key][0]).name()
        np.testing.assert_allclose(plot.curve_data(mean_key(g.key))[1], expected[g.key].mean)
    _hidden_are_empty(plot)


def _bars_show_exactly(view):
    for plot in view.bar_plots:
        drawn = [i for i, v in enumerate(plot.values) if v is not None]
        bars = _shown(plot, pg.BarGraphItem)
        assert len(bars) == (1 if drawn else 0), plot.objectName()
        if drawn:
            assert list(bars[0].opts["x"]) == drawn
            np.testing.assert_allclose(bars[0].opts["height"], [plot.values[i] for i in drawn])
        with_ci = [i for i in drawn if plot.errors[i] is not None]
        intervals = _shown(plot, pg.ErrorBarItem)
        assert [list(e.opts["x"]) for e in intervals] == ([with_ci] if with_ci else [])
        assert sum(len(d.data) for d in _shown(plot, pg.ScatterPlotItem)) == sum(map(len, plot.dots))
        marks = [t for t in _shown(plot, pg.TextItem) if t is not plot.message.text]
        assert _same(marks, plot.marks)
        _hidden_are_empty(plot)


def _scaling_shows_exactly(view):
    plot = view.scaling_plot
    assert len(plot.legend.items) == len(plot.families)
    assert all(sample.item.isVisible() for sample, _ in plot.legend.items)
    shown = _shown(plot, pg.PlotDataItem)
    assert len(shown) == 2 * len(plot.families)  # each family's line and its ideal line
    assert plot.message.shown == ("" if plot.families else plot.message.text.toPlainText())
    _hidden_are_empty(plot)


def _shows_exactly(view):
    _loss_shows_exactly(view)
    _bars_show_exactly(view)
    _scaling_shows_exactly(view)


def _plots(view):
    return (view.loss_plot, *view.bar_plots, view.scaling_plot)


def test_redraws_reuse_the_plot_items_and_leave_nothing_of_an_earlier_comparison(view, store, qtbot):
    put_recorded(store, "sweep")  # 4 settings × 3 repeats
    groups = _groups(view, store, qtbot)
    everything = [r for g in groups for r in g]
    a, _, c, d = groups
    shapes = [everything,
              a[:2] + d[:1],  # 2 settings: 2 repeats (no band, each faintly) and 1 run; no scaling family
              a + c]  # 2 settings of 3 repeats, 1× and 2× of one family
    for run_ids in shapes + [everything]:
        _compare(view, qtbot, run_ids)
        _shows_exactly(view)
    made = {plot: list(plot.getPlotItem().items) for plot in _plots(view)}
    for k in range(10):
        _compare(view, qtbot, shapes[k % 3] if k != 4 else shapes[1][::-1])
        if k == 6:
            view.individual_box.setChecked(not view.individual_box.isChecked())  # drawn again, runs fewer or more
        _shows_exactly(view)
        for plot, items in made.items():  # nothing made since: each item is one of those there already
            now = plot.getPlotItem().items
            assert len(now) <= len(items) and all(any(i is m for m in items) for i in now), plot.objectName()


def _groups(view, store, qtbot):
    """The run ids of each of the sweep's 4 settings (compared once to learn them)."""
    _compare(view, qtbot, [r.id for r in store.list_runs()])
    return [list(g.run_ids) for g in view.comparison.groups]


def test_a_live_plot_uses_its_curves_again_and_its_legend_names_only_the_latest(qtbot):
    plot = LivePlot("loss", "loss")
    qtbot.addWidget(plot)
    plot.resize(600, 400)
    plot.show()

    def buffer(n):
        b = SeriesBuffer()
        b.extend(np.arange(n, dtype=float), np.ones(n))
        return b

    first = [plot.add_curve(f"c{i}", buffer(10 + i), f"curve {i}") for i in range(3)]
    plot.redraw()
    plot.remove_curves()
    assert plot.legend.items == [] and not any(c.isVisible() for c in first)
    again = [plot.add_curve("x", buffer(5), "x"), plot.add_curve("y", buffer(6), None)]
    plot.redraw()
    assert again[0] is first[0] and again[1] is first[1]  # the first made, in order: they stack as added
    assert [label.text for _, label in plot.legend.items] == ["x"] and plot.legend.items[0][0].item is first[0]
    assert all(c.isVisible() for c in again) and not first[2].isVisible() and first[2].xData is None
    assert len(plot.curve_data("x")[0]) == 5 and len(plot.curve_data("y")[0]) == 6
    plot.remove_curves(keep_legend=True)  # the entries that name the same curve again stay as they are
    label = plot.legend.items[0][1]
    plot.add_curve("x", buffer(7), "x", color="#ff0000")
    plot.redraw()
    assert plot.legend.items[0][1] is label and plot.curves["x"][0].opts["pen"].color().name() == "#ff0000"
    plot.remove_curves(keep_legend=True)
    plot.add_curve("z", buffer(7), "z")
    plot.redraw()
    assert [label.text for _, label in plot.legend.items] == ["z"]
    assert len([c for c in plot.getPlotItem().listDataItems() if c.isVisible()]) == 1
