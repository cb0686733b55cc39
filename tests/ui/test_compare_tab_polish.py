"""The Compare tab on real recorded runs: repeats as mean and 95% band, runs that never settled, words in empty
plots, titles that fit, the redraw after Add sweep, the sweep chooser kept current, the status bar's Compare."""
import json

import numpy as np
import pytest
from helpers.recorded_runs import events_of, metrics_of, put_recorded, recorded
from helpers.stored_runs import store_run
from PySide6.QtGui import QColor, QFont, QFontMetrics

from ddpgui.core import analysis
from ddpgui.core.analysis.curves import group_curves
from ddpgui.core.analysis.steady import FALLBACK_MIN_INTERVALS, WHOLE_RUN_RULE
from ddpgui.core.hosts import HostStore
from ddpgui.core.outputs import figures
from ddpgui.core.runs.follower import RunUpdate
from ddpgui.core.store import RunStore
from ddpgui.core.sweeps import SweepProgress
from ddpgui.ui.plots.compare_curves import mean_key
from ddpgui.ui.plots.plot_text import TITLE_PT
from ddpgui.ui.plots.scaling import NO_FAMILY
from ddpgui.ui.widgets.compare_rows import COLUMNS

SWEEP = recorded("sweep")
SWEEP_ID = SWEEP["sweeps"][0]["id"]


def _computed(view, qtbot):
    qtbot.waitUntil(lambda: view.comparison is not None and not view.busy, timeout=60_000)


def _ordinary(view, store, qtbot):
    ids = put_recorded(store, "ordinary")
    view.set_runs(ids)
    _computed(view, qtbot)
    return ids


def _title_fits(plot):
    metrics = QFontMetrics(_title_font())
    assert plot.fitted.lines and len(plot.fitted.lines) <= 2
    for line in plot.fitted.lines:
        assert metrics.horizontalAdvance(line) <= plot.width(), (line, plot.width())
    assert " ".join(plot.fitted.lines).replace("…", "") in plot.fitted.text or plot.fitted.lines[-1].endswith("…")
    assert plot.fitted.text in plot.toolTip()


def _title_font():
    font = QFont()
    font.setPointSizeF(TITLE_PT)
    return font


def _centred(message, plot):
    """The message is shown, in the plot's scene, at the centre of its view."""
    assert message.text.isVisible() and message.text.scene() is plot.scene()
    (x0, x1), (y0, y1) = plot.getPlotItem().getViewBox().viewRange()
    pos = message.text.pos()
    assert pos.x() == pytest.approx((x0 + x1) / 2) and pos.y() == pytest.approx((y0 + y1) / 2)


def test_repeats_are_drawn_as_their_mean_with_a_shaded_interval(view, store, settings, qtbot):
    ids = put_recorded(store, "sweep")
    view.compare_sweep(SWEEP_ID)
    qtbot.waitUntil(lambda: view.run_ids == ids, timeout=30_000)
    _computed(view, qtbot)
    comparison = view.comparison
    assert [g.n for g in comparison.groups] == [3, 3, 3, 3]
    expected = {c.key: c for c in group_curves(comparison, view.curves, "step")}  # the exported figure's code
    plot = view.loss_plot
    for g in comparison.groups:
        x, y = plot.curve_data(mean_key(g.key))
        np.testing.assert_array_equal(x, expected[g.key].x)
        np.testing.assert_allclose(y, expected[g.key].mean)
        band = plot.bands[g.key]
        valid = np.isfinite(expected[g.key].ci_lo)
        assert valid.sum() > 100  # three repeats logged each step: an interval at every one
        np.testing.assert_allclose(band.low[np.isfinite(band.low)], expected[g.key].ci_lo[valid])
        np.testing.assert_allclose(band.high[np.isfinite(band.high)], expected[g.key].ci_hi[valid])
        assert band.fill.scene() is plot.scene()
        for run_id in g.run_ids:  # each repeat faintly, out of the legend
            assert run_id in plot.curves and plot.curves[run_id][0].name() not in [
                label.text for _, label in plot.legend.items]
    assert len(plot.legend.items) == 4 and "n=3" in plot.legend.items[0][1].text
    assert "95% CI" in plot.fitted.text

    view.individual_box.setChecked(False)  # the toggle: means and bands only
    assert set(plot.curves) == {mean_key(g.key) for g in comparison.groups} and len(plot.bands) == 4
    assert settings.value("compare/individual") == "false"
    view.align_combo.setCurrentText("time")
    expected = {c.key: c for c in group_curves(comparison, view.curves, "time")}
    key = comparison.groups[0].key
    np.testing.assert_allclose(plot.curve_data(mean_key(key))[0], expected[key].x)


def test_ordinary_runs_that_never_settled_use_what_they_have_and_say_so(view, store, qtbot):
    ids = _ordinary(view, store, qtbot)
    runs = {r["id"]: r for r in recorded("ordinary")["runs"]}
    assert sorted(r["state"] for r in runs.values()) == ["finished", "finished", "finished", "stopped"]
    strict = {r: analysis.run_stats(store, r) for r in ids}
    unsettled = [r for r in ids if strict[r].throughput.mean is None]
    assert unsettled and all("never settled" in strict[r].throughput.reason for r in unsettled)
    comparison = view.comparison
    # every run has its throughput bar, and a speedup against a baseline that never settled
    assert all(v is not None for v in view.throughput_plot.values) and len(view.throughput_plot.values) == 4
    assert all(v is not None for v in view.speedup_plot.values)
    for run_id in unsettled:
        group = next(g for g in comparison.groups if g.run_ids == [run_id])
        est = group.metrics["throughput"]
        whole = analysis.run_stats(store, run_id, rule=WHOLE_RUN_RULE).throughput
        assert est.mean == whole.mean and est.n == 1  # one run: the group's value has no interval
        assert group.runs[0].throughput.n == whole.n >= FALLBACK_MIN_INTERVALS
        assert est.reason.startswith(f"from {whole.n} intervals after warm-up, not settled (only the last")
        i = [g.key for g in view.ordered_groups()].index(group.key)
        assert view.throughput_plot.notes[i] == est.reason and est.reason in view.throughput_plot.toolTip()
        # the table's note cell holds the whole reason as its tooltip
        row = next(r for r in range(view.table_model.rowCount())
                   if view.table_model.item(r, 0).data(256) == group.key and
                   view.table_model.item(r, 1).data(256) == "throughput")
        assert view.table_model.item(row, COLUMNS.index("Note")).toolTip() == est.reason
    stars = [m for m in view.throughput_plot.marks if m.toPlainText() == "*"]
    assert len(stars) == len(unsettled)
    assert "never settled" in view.legend.text()
    base = comparison.baseline_group
    assert base.run_ids == [ids[0]] and base.run_ids[0] not in unsettled
    for g in comparison.groups:  # a speedup from a throughput that did not settle says so
        rough = g.run_ids[0] in unsettled
        assert ("not settled" in comparison.speedup[g.key].reason) == rough, g.label
    assert not view.speedup_plot.message.shown


def test_a_run_stopped_in_its_warm_up_is_n_a_and_empty_plots_say_why_inside(view, store, qtbot):
    _early(store)
    view.set_runs(["early"])
    _computed(view, qtbot)
    assert view.throughput_plot.values == [None]
    _centred(view.throughput_plot.message, view.throughput_plot)
    assert view.throughput_plot.message.shown == "no training intervals after warm-up and compile"
    assert "One setting only" in view.speedup_plot.message.shown
    _centred(view.speedup_plot.message, view.speedup_plot)
    _centred(view.scaling_plot.message, view.scaling_plot)
    assert view.scaling_plot.message.shown == NO_FAMILY
    assert not view.memory_plot.message.shown  # it has its bar
    # with a second run the early one is an "n/a" mark at its place, the other bars drawn
    short = put_recorded(store, "ordinary")[0]
    view.set_runs(["early", short])
    _computed(view, qtbot)
    assert view.throughput_plot.values[0] is None and view.throughput_plot.values[1] is not None
    assert [m.toPlainText() for m in view.throughput_plot.marks] == ["n/a"]
    assert view.throughput_plot.marks[0].pos().x() == 0
    assert "no training intervals" in view.throughput_plot.toolTip()
    assert not view.throughput_plot.message.shown


def test_titles_fit_ticks_become_keys_and_memory_reads_in_mib(view, store, qtbot):
    _ordinary(view, store, qtbot)
    view.resize(1000, 800)
    qtbot.waitUntil(lambda: view.speedup_plot.width() < 400, timeout=10_000)
    for plot in (view.throughput_plot, view.memory_plot, view.speedup_plot, view.loss_plot, view.scaling_plot):
        _title_fits(plot)
    assert view.speedup_plot.fitted.text == "speedup vs batch_size=32 steps=40"  # single runs: no interval
    # the long labels do not fit under their bars: A, B, … there, and the key line says which is which
    assert view.throughput_plot.keyed and view.throughput_plot.tick_texts()[0] == "A\nn=1"
    assert "Bars: <b>A</b> batch_size=32 steps=40 (n=1); <b>B</b> batch_size=32 steps=150" in view.legend.text()
    assert view.memory_plot.getPlotItem().getAxis("left").labelText == "MiB"
    assert not view.memory_plot.getPlotItem().getAxis("left").autoSIPrefix
    mib = [g.metrics["mem_peak_gib"].mean * 1024 for g in view.ordered_groups()]
    assert view.memory_plot.values == pytest.approx(mib)
    # the loss legend is below the axes, outside the data
    item = view.loss_plot.getPlotItem()
    assert view.loss_plot.legend.parentItem() is item and not item.vb.sceneBoundingRect().intersects(
        view.loss_plot.legend.sceneBoundingRect())
    assert not view.scaling_plot.getPlotItem().vb.sceneBoundingRect().intersects(
        view.scaling_plot.legend.sceneBoundingRect()) or not view.scaling_plot.legend.isVisible()


def _inside(plot) -> None:
    """The plot's data area and title lie inside the widget: nothing is laid out beyond its edges (cut off)."""
    item = plot.getPlotItem()
    widget = plot.rect()
    for part in (item.getViewBox(), item.titleLabel):
        box = plot.mapFromScene(part.sceneBoundingRect()).boundingRect()
        assert widget.adjusted(-1, -1, 1, 1).contains(box), (plot.objectName(), part, box, widget)


def _bar_pixels(plot) -> int:
    """Pixels of the plot's bar colours in a grab of it (what the screen shows)."""
    image = plot.grab().toImage()
    colours = {QColor(c).rgb() & 0xFFFFFF for c in figures.OKABE_ITO}
    count = 0
    for y in range(0, image.height(), 2):
        for x in range(0, image.width(), 2):
            if image.pixel(x, y) & 0xFFFFFF in colours:
                count += 1
    return count


def _early(store) -> str:
    """The recorded stopped run as if stopped during its warm-up: no interval to measure (throughput n/a)."""
    run = next(r for r in recorded("ordinary")["runs"] if r["state"] == "stopped")
    head = [m for m in metrics_of(run["id"]) if m["step"] <= run["config"]["warmup_steps"]]
    store_run(store, "early", run["config"], head, events=events_of(run["id"]), state="stopped")
    return "early"


@pytest.mark.parametrize("before", ["nothing", "an empty speedup plot"])
def test_the_speedup_plot_is_drawn_right_after_add_sweep(view, store, qtbot, before):
    put_recorded(store, "sweep")
    if before == "nothing":
        assert view.stack.currentWidget() is view.empty  # the plots were never shown before
    else:  # a baseline without throughput: the speedup plot had no bar and said why
        short = put_recorded(store, "ordinary")[0]
        view.set_runs([_early(store), short])
        _computed(view, qtbot)
        assert all(v is None for v in view.speedup_plot.values)
        qtbot.wait(50)
    view.refresh_sweeps()
    qtbot.waitUntil(lambda: view.sweep_combo.currentData() == SWEEP_ID, timeout=10_000)
    if before != "nothing":
        view.set_runs([])
    view.add_sweep_button.click()
    qtbot.waitUntil(lambda: len(view.run_ids) == len(SWEEP["runs"]), timeout=10_000)
    _computed(view, qtbot)
    qtbot.wait(50)
    for plot in (view.speedup_plot, view.throughput_plot):
        (x0, x1), (y0, y1) = plot.getPlotItem().getViewBox().viewRange()
        assert x0 < 0 < len(plot.values) - 1 < x1
        assert y0 <= 0 < max(v for v in plot.values if v is not None) < y1
        assert plot.getPlotItem().getViewBox().width() > 100
        _inside(plot)
        assert _bar_pixels(plot) > 100, plot.objectName()


def test_the_sweep_chooser_follows_sweeps_without_a_tab_switch(view, store, qtbot):
    view.refresh_sweeps()
    qtbot.waitUntil(lambda: view.sweep_combo.currentText() == "no sweeps yet", timeout=10_000)
    put_recorded(store, "sweep")
    store.update_sweep(SWEEP_ID, state="running")
    run = store.get_run(SWEEP["runs"][-1]["id"])
    view.on_update(RunUpdate(run.id, run=run))  # what the window forwards when a sweep's run changes
    qtbot.waitUntil(lambda: view.sweep_combo.currentData() == SWEEP_ID and
                    "(running)" in view.sweep_combo.currentText(), timeout=10_000)
    store.update_sweep(SWEEP_ID, state="done")
    view.on_update(RunUpdate(run.id, run=store.update_run(run.id, state="finished")))
    qtbot.waitUntil(lambda: "(done)" in view.sweep_combo.currentText(), timeout=10_000)
    assert view.add_sweep_button.isEnabled()


def test_status_bar_compare_replaces_the_comparison_with_the_sweep(window, qtbot, tmp_path):
    ordinary = put_recorded(window.store, "ordinary")
    sweep_runs = put_recorded(window.store, "sweep")
    window.compare.set_runs(ordinary[:2])
    _computed(window.compare, qtbot)
    window.sweeps.compare_requested.emit(SWEEP_ID)
    qtbot.waitUntil(lambda: window.compare.run_ids == sweep_runs and not window.compare.busy, timeout=60_000)
    _computed(window.compare, qtbot)
    assert window.tabs.currentWidget() is window.compare
    assert window.compare.comparison.baseline_group.run_ids[0] == sweep_runs[0]
    assert window.compare.sweep_combo.currentData() == SWEEP_ID
    window.close()  # the comparison is saved and comes back after a restart
    assert json.loads(window.settings.value("compare/runs")) == sweep_runs
    from ddpgui.ui.main_window import MainWindow

    again = MainWindow(store=RunStore(tmp_path / "runs.db"), hosts=HostStore(tmp_path / "hosts.json"),
                       settings=window.settings)
    qtbot.addWidget(again)
    try:
        assert again.compare.run_ids == sweep_runs
        _computed(again.compare, qtbot)
    finally:
        again.close()


def test_every_plot_shows_all_its_data_right_after_add_sweep_in_the_window(window, qtbot):
    put_recorded(window.store, "sweep")
    window.resize(1600, 1000)
    window.tabs.setCurrentWidget(window.compare)  # the tab as a user opens it: the empty state, then Add sweep
    view = window.compare
    qtbot.waitUntil(lambda: view.sweep_combo.currentData() == SWEEP_ID, timeout=10_000)
    view.add_sweep_button.click()
    qtbot.waitUntil(lambda: len(view.run_ids) == len(SWEEP["runs"]), timeout=10_000)
    _computed(view, qtbot)
    qtbot.wait(100)
    for plot in (view.speedup_plot, view.throughput_plot, view.memory_plot):
        (x0, x1), (y0, y1) = plot.getPlotItem().getViewBox().viewRange()
        assert x0 < 0 and len(plot.values) - 1 < x1, plot.objectName()
        tops = [v + (e[1] if e else 0.0) for v, e in zip(plot.values, plot.errors) if v is not None]
        assert y0 <= 0 and max(tops) <= y1, plot.objectName()
        _inside(plot)
        assert _bar_pixels(plot) > 100, plot.objectName()
    scaling = view.scaling_plot.getPlotItem()
    (x0, x1), (y0, y1) = scaling.getViewBox().viewRange()
    points = [(x, y) for data in scaling.listDataItems() for x, y in zip(*data.getData())]
    assert points and all(x0 <= x <= x1 and y0 <= y <= y1 for x, y in points)
    _inside(view.scaling_plot)
    _inside(view.loss_plot)


def test_the_sweep_chooser_follows_the_status_bars_progress_and_keeps_an_unchanged_list(view, store, qtbot):
    view.refresh_sweeps()
    qtbot.waitUntil(lambda: view.sweep_combo.currentText() == "no sweeps yet", timeout=10_000)
    put_recorded(store, "sweep")
    progress = SweepProgress(SWEEP_ID, SWEEP["sweeps"][0]["name"], "done", 12, {"done": 12}, 1.0, None, [])
    view.on_sweep_progress(progress)  # what the status bar's sweeps part reports as a sweep ends
    qtbot.waitUntil(lambda: view.sweep_combo.currentData() == SWEEP_ID, timeout=10_000)
    assert "(done)" in view.sweep_combo.currentText()
    removed, read = [], []
    view.sweep_combo.model().rowsRemoved.connect(lambda *args: removed.append(args))
    set_sweeps = view._set_sweeps
    view._set_sweeps = lambda sweeps: (set_sweeps(sweeps), read.append(len(sweeps)))
    view.refresh_sweeps()  # as when the drop-down opens: read again, nothing changed
    qtbot.waitUntil(lambda: read == [1], timeout=10_000)
    assert not removed and view.sweep_combo.currentData() == SWEEP_ID  # not rebuilt under an open list
    store.update_sweep(SWEEP_ID, state="stopped")
    view.sweep_combo.showPopup()  # opening it reads the sweeps again
    qtbot.waitUntil(lambda: "(stopped)" in view.sweep_combo.currentText(), timeout=10_000)
    view.sweep_combo.hidePopup()


def test_a_long_sweep_name_never_widens_the_tab_and_is_its_chooser_s_tooltip(view, store, qtbot):
    from ddpgui.core.store import SweepRecord

    view.refresh_sweeps()
    qtbot.waitUntil(lambda: view.sweep_combo.currentText() == "no sweeps yet", timeout=10_000)
    narrow = view.minimumSizeHint().width()
    name = "nproc 1,2,4 × precision fp32,bf16 × compile off,default, 5 repeats on gpu-a and gpu-b " * 3
    store.create_sweep(SweepRecord(id="long", name=name, state="done"), [])
    view.refresh_sweeps()
    qtbot.waitUntil(lambda: view.sweep_combo.currentData() == "long", timeout=10_000)
    assert view.minimumSizeHint().width() == narrow
    assert view.sweep_combo.sizeHint().width() < 400
    assert view.sweep_combo.toolTip() == f"{name} (done)"
