"""The Compare tab on a real run store: its numbers are analysis.compare's, baseline and colour-by, export."""

import numpy as np
import pypdf
import pyqtgraph as pg
import pytest
from helpers.stored_runs import store_run

from ddpgui.core import analysis
from ddpgui.core.analysis.curves import ema
from ddpgui.core.runs.manager import RunUpdate
from ddpgui.core.store import RunStore, SweepRecord
from ddpgui.ui.dialogs.export import ExportDialog
from ddpgui.ui.plots.bars import BarPlot
from ddpgui.ui.plots.compare_curves import mean_key
from ddpgui.ui.widgets.compare import EMPTY_TEXT

POINTS = 60
#: (run id, processes, precision, throughput level): two repeats of 1× and 2× fp32, one 1× bf16.
RUNS = [("a1", 1, "fp32", 100.0), ("a2", 1, "fp32", 104.0), ("b1", 2, "fp32", 190.0), ("b2", 2, "fp32", 186.0),
        ("c1", 1, "bf16", 150.0)]


def _metrics(rate: float, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    loss = 2.0 * np.exp(-np.arange(POINTS) / 20) + 0.3 + 0.01 * rng.standard_normal(POINTS)
    rates = rate * (1 + 0.01 * rng.standard_normal(POINTS))
    return [{"t": 1000.0 + 0.5 * i, "phase": "train", "step": i + 1, "loss": float(loss[i]),
             "samples_per_s": float(rates[i]), "mem_peak_gib": 1.0 + 0.5 * (rate > 120) + 0.01 * seed,
             "warmup": i < 3} for i in range(POINTS)]


def _put_runs(store: RunStore) -> list[str]:
    for seed, (run_id, nproc, precision, rate) in enumerate(RUNS):
        config = {"workload": "mlp", "compile": "off", "precision": precision, "nproc_per_node": nproc,
                  "steps": POINTS, "seed": seed}
        store_run(store, run_id, config, _metrics(rate, seed))
    return [r[0] for r in RUNS]


def _computed(view, qtbot):
    qtbot.waitUntil(lambda: view.comparison is not None and not view.busy, timeout=30_000)


def _expected(store, run_ids, baseline):
    return analysis.compare([analysis.run_stats(store, r) for r in run_ids], baseline=baseline)


def test_empty_state_says_how_to_add_runs(view):
    assert view.stack.currentWidget() is view.empty
    assert "right-click → Add to comparison" in view.empty.text() and view.empty.text() == EMPTY_TEXT
    assert not view.export_button.isEnabled()


def test_table_numbers_are_those_of_analysis_compare(view, store, qtbot):
    ids = _put_runs(store)
    view.add_runs(ids)
    _computed(view, qtbot)
    expected = _expected(store, ids, ids[0])
    assert view.stack.currentWidget() is not view.empty
    assert [g.key for g in view.comparison.groups] == [g.key for g in expected.groups]
    assert [g.n for g in expected.groups] == [2, 2, 1]
    for g in expected.groups:
        for metric in analysis.RUN_METRICS:
            est = g.metrics[metric]
            assert view.table_value(g.key, metric) == est.mean, metric
            if est.has_interval:
                assert (view.table_value(g.key, metric, "Low"), view.table_value(g.key, metric, "High")) == \
                    (est.low, est.high), metric
            elif est.range is not None:  # fewer than 3 repeats: Low and High are the repeats' range, said so
                assert (view.table_value(g.key, metric, "Low"), view.table_value(g.key, metric, "High")) == \
                    est.range, metric
                assert view.table_value(g.key, metric, "Interval") == "range", metric
            assert view.table_value(g.key, metric, "n") == est.n, metric
        assert view.table_value(g.key, "speedup") == expected.speedup[g.key].value
        speedup = expected.speedup[g.key]
        shown = (view.table_value(g.key, "speedup", "Low"), view.table_value(g.key, "speedup", "High"))
        assert shown == ((speedup.low, speedup.high) if speedup.has_interval else speedup.range or (None, None))
        assert view.table_value(g.key, "scaling_efficiency") == expected.scaling[g.key].value
        assert view.table_value(g.key, "memory_saving") == expected.memory_saving[g.key].value
    # two repeats give no interval (an interval needs 3): the bars carry each repeat as a dot instead
    throughput = [g.metrics["throughput"] for g in expected.groups]
    assert view.throughput_plot.values == [e.mean for e in throughput]
    assert view.throughput_plot.errors == [None, None, None]
    assert view.throughput_plot.dots[0] == list(throughput[0].values) and len(view.throughput_plot.dots[0]) == 2
    assert view.throughput_plot.dots[2] == []  # one run: its bar alone
    assert "an interval needs ≥ 3 repeats" in view.throughput_plot.toolTip()
    assert view.speedup_plot.values[0] == 1.0 and view.speedup_plot.values[1] == pytest.approx(1.85, rel=0.05)
    assert view.memory_plot.values == [g.metrics["mem_peak_gib"].mean for g in expected.groups]
    # every run's whole loss curve, by step (faintly), and the mean of each group of repeats
    means = {mean_key(g.key) for g in expected.groups if g.n > 1}
    assert set(view.loss_plot.curves) == set(ids) | means and len(means) == 2
    # drawn whole (every point) once the plot has its width: 60 points take fewer pixels than that; smoothed as
    # the figure is (TensorBoard's debiased EMA, weight 0.6)
    qtbot.waitUntil(lambda: len(view.loss_plot.curve_data("b1")[0]) == POINTS, timeout=10_000)
    x, y = view.loss_plot.curve_data("b1")
    np.testing.assert_array_equal(x, np.arange(1, POINTS + 1))
    np.testing.assert_allclose(y, ema(np.array([r["loss"] for r in _metrics(190.0, 2)]), 0.6))
    # the scaling family 1×/2× fp32 is drawn, with its ideal line
    assert "needs" not in view.scaling_plot.getPlotItem().titleLabel.text
    items = view.scaling_plot.getPlotItem().listDataItems()  # the family, its ideal line, and its repeats' dots
    dots = [i for i in items if isinstance(i, pg.ScatterPlotItem)]
    assert len(items) == 3 and len(dots) == 1 and len(dots[0].points()) == 4  # 1× and 2×: two repeats each


def test_change_baseline_grouping_and_alignment(view, store, settings, qtbot):
    ids = _put_runs(store)
    view.add_runs(ids)
    _computed(view, qtbot)
    two = view.comparison.groups[1].key
    index = view.baseline_combo.findData(two)
    view.baseline_combo.setCurrentIndex(index)
    view.baseline_combo.activated.emit(index)
    qtbot.waitUntil(lambda: view.comparison.baseline == two and not view.busy, timeout=30_000)
    expected = _expected(store, ids, "b1")
    assert view.table_value(two, "speedup") == 1.0
    for g in expected.groups:
        assert view.table_value(g.key, "speedup") == expected.speedup[g.key].value
    assert view.speedup_plot.values[0] == pytest.approx(expected.speedup[expected.groups[0].key].value)

    choices = [view.group_combo.itemData(i) for i in range(view.group_combo.count())]
    assert set(choices) == {"setting", "precision", "world_size"}  # only the settings that differ
    view.set_group_by("precision")
    assert settings.value("compare/group") == "precision"
    ordered = view.ordered_groups()
    assert [g.settings["precision"] for g in ordered] == ["fp32", "fp32", "bf16"]
    colours = view.colours(ordered)
    assert colours[ordered[0].key] == colours[ordered[1].key] != colours[ordered[2].key]
    pens = {run_id: view.loss_plot.curves[run_id][0].opts["pen"].color().name().lower() for run_id in ids}
    assert pens["a1"] == pens["b2"] != pens["c1"]
    assert "precision=bf16" in view.legend.text()

    view.align_combo.setCurrentText("time")
    x, _ = view.loss_plot.curve_data("a1")
    np.testing.assert_allclose(x, 0.5 * np.arange(POINTS))
    assert settings.value("compare/align") == "time"


def test_export_writes_every_format_where_asked(view, store, qtbot, tmp_path):
    ids = _put_runs(store)
    view.add_runs(ids)
    _computed(view, qtbot)
    out = tmp_path / "paper"
    view.export(out, ["pdf", "svg", "png", "csv", "tex", "json"], "double")
    qtbot.waitUntil(lambda: view.exported is not None, timeout=120_000)
    names = {p.name for p in view.exported.paths}
    for figure in ("loss", "throughput", "memory", "speedup", "scaling"):
        assert {f"{figure}.pdf", f"{figure}.svg", f"{figure}.png"} <= names
    assert {"summary.csv", "summary.tex", "runs.json"} <= names
    assert all(p.is_file() and p.parent == out for p in view.exported.paths)
    reader = pypdf.PdfReader(out / "throughput.pdf", strict=True)
    assert len(reader.pages) == 1 and float(reader.pages[0].mediabox.width) == pytest.approx(7.0 * 72)
    assert str(out) in view.status.text() and "Wrote" in view.status.text()


def test_export_dialog_remembers_the_last_choices(qtbot, settings, tmp_path):
    dialog = ExportDialog(settings)
    qtbot.addWidget(dialog)
    dialog.folder.setText(str(tmp_path / "figs"))
    for fmt in ("png", "json"):
        dialog.formats[fmt].setChecked(False)
    dialog.double.setChecked(True)
    dialog.accept()
    again = ExportDialog(settings)
    qtbot.addWidget(again)
    assert again.folder.text() == str(tmp_path / "figs")
    assert again.chosen_formats() == ["pdf", "svg", "csv", "tex", "curves"] and again.width() == "double"
    for box in again.formats.values():
        box.setChecked(False)
    assert not again.buttons.buttons()[0].isEnabled() and "at least one format" in again.error.text()


def test_add_a_whole_sweep_from_the_chooser(view, store, qtbot):
    ids = _put_runs(store)
    store.create_sweep(SweepRecord(id="sw1", name="precision sweep", state="done"), [])
    for run_id in ("a1", "c1"):
        store.update_run(run_id, sweep_id="sw1")
    view.refresh_sweeps()
    qtbot.waitUntil(lambda: view.sweep_combo.currentData() == "sw1", timeout=10_000)
    assert "precision sweep" in view.sweep_combo.currentText()
    view.add_sweep_button.click()
    qtbot.waitUntil(lambda: view.run_ids == ["a1", "c1"], timeout=10_000)
    _computed(view, qtbot)
    assert [g.label for g in view.comparison.groups] == ["fp32", "bf16"]
    assert ids  # the other runs stay out


def test_runs_table_action_adds_runs_to_the_compare_tab(window, qtbot):
    _put_runs(window.store)
    assert ("compare", "Add to comparison") in window.runs_table.ACTIONS
    window.run_action("compare", ["a1", "b1"])
    assert window.tabs.currentWidget() is window.compare
    _computed(window.compare, qtbot)
    assert window.compare.run_ids == ["a1", "b1"]
    window.compare.remove_button.setEnabled(True)
    window.compare.runs_list.item(0).setSelected(True)
    window.compare.remove_button.click()
    qtbot.waitUntil(lambda: window.compare.run_ids == ["b1"] and not window.compare.busy, timeout=30_000)
    assert [g.run_ids for g in window.compare.comparison.groups] == [["b1"]]
    assert isinstance(window.compare.throughput_plot, BarPlot)


def test_a_compared_run_that_ends_is_computed_again(window, qtbot):
    _put_runs(window.store)
    window.store.update_run("b2", state="running")
    window.compare.add_runs(["b1", "b2"])
    _computed(window.compare, qtbot)
    assert [g.n for g in window.compare.comparison.groups] == [2]
    assert "b2" not in window.compare.known  # a running run's statistics are not kept
    record = window.store.update_run("b2", state="finished")
    generation = window.compare._generation
    window._on_update(RunUpdate("b2", run=record))
    assert window.compare._generation == generation + 1
    _computed(window.compare, qtbot)
    assert "b2" in window.compare.known and window.compare.known["b2"].n_steps == POINTS
