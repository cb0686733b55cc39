"""The live dashboard: a header that never widens the window, the compiling state, one smoothing for every
series, a readout that leaves with the mouse, readable ticks, legends off the curves."""
import json
import time
from pathlib import Path

import numpy as np
from helpers.stored_runs import put_spool
from PySide6.QtCore import QEvent, QPoint
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from ddpgui.core.runs.manager import RunUpdate
from ddpgui.ui.plots.live_plot import ClockAxis, NumberAxis

T0 = 1_764_500_000.0
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "compile"


def _run(store, run_id, n=100, scale=1.0, rates=None):
    store.create_run(run_id, name=f"name-{run_id}", hosts=["local"], config={"steps": n}, state="running")
    put_spool(store, run_id, "events.jsonl", [{"seq": 0, "t": T0, "event": "started"}])
    rates = rates if rates is not None else [100.0] * n
    put_spool(store, run_id, "metrics.jsonl", [
        {"seq": i, "t": T0 + 1 + 0.5 * i, "step": i + 1, "loss": scale / (i + 1) + 0.01 * i,
         "samples_per_s": float(rates[i]), "warmup": i < 2} for i in range(n)])


def test_a_300_character_header_does_not_widen_the_window(board, store):
    _run(store, "a")
    board.set_run("a")
    board.redraw()
    QApplication.processEvents()
    hint, width = board.minimumSizeHint().width(), board.width()
    long = "compile 22.0 s · peak mem 0.78 GiB · " * 9
    assert len(long) >= 300
    store.create_run("b", name="x" * 300, hosts=["local"], config={"steps": 10}, state="running")
    board.set_run("b")  # a 300-character run name in the title
    board.redraw()
    QApplication.processEvents()
    assert board.title.text() == "x" * 300 and board.minimumSizeHint().width() <= hint
    board.timer.stop()  # the running header would be redrawn over the text set below
    for label in (board.title, board.stats):
        label.setText(long)
    board.nodes.setText("/a/very/long/path/without/spaces/" * 10)
    board.nodes.setVisible(True)
    QApplication.processEvents()
    board.layout().activate()
    assert board.minimumSizeHint().width() <= hint
    assert board.width() == width
    assert board.stop_button.geometry().right() < board.width()  # Stop stays on screen
    assert board.stats.toolTip() == long and board.stats.text() == long  # the full text stays readable
    assert board.stats.elided().endswith("…") and len(board.stats.elided()) < len(long)


def _recorded(name):
    return [json.loads(line) for line in (FIXTURE / name).read_text().splitlines()]


def test_while_compiling_the_header_says_so_and_a_new_run_starts_with_clear_plots(board, store):
    _run(store, "old", n=400, scale=50.0)
    board.set_run("old")
    board.redraw()
    old_x = board.loss_plot.getPlotItem().getViewBox().viewRange()[0]
    assert old_x[1] > 300
    events = _recorded("events.jsonl")
    store.create_run("new", name="new", hosts=["local"], config={"steps": 30}, state="running")
    board.set_run("new")
    board.redraw()
    for plot in board.plots:  # nothing of the previous run's axes
        (x0, x1), _ = plot.getPlotItem().getViewBox().viewRange()
        assert x1 < 10, (plot.objectName(), x0, x1)
    # the recorded run's events up to compile_start, as if it started 12 s ago
    start = next(i for i, e in enumerate(events) if e["event"] == "compile_start")
    shift = time.time() - 12.0 - events[start]["t"]
    live = [dict(e, t=e["t"] + shift) for e in events[:start + 1]]
    board.on_update(RunUpdate("new", records={"events.jsonl": live}))
    board.redraw()
    text = board.stats.text()
    assert text.startswith("compiling · 00:1"), text
    assert "step 0" not in text and "ETA" not in text
    assert board.loss_plot.placeholder.isVisible() and board.rate_plot.placeholder.isVisible()  # no old axes
    board.on_update(RunUpdate("new", records={"events.jsonl": [dict(events[start + 1], t=events[start + 1]["t"] + shift)],
                                              "metrics.jsonl": _recorded("metrics.jsonl")[:5]}))
    board.redraw()
    assert board.stats.text().startswith("step 5/30"), board.stats.text()
    assert not board.loss_plot.placeholder.isVisible()


def test_the_smoothing_control_smooths_throughput_and_device_curves(board, store):
    rng = np.random.default_rng(3)
    rates = 18_000 + 12_000 * rng.uniform(-1, 1, 300)
    _run(store, "a", n=300, rates=rates)
    put_spool(store, "a", "telemetry.jsonl", [{"seq": i, "t": T0 + i, "kind": "cpu", "cpu_pct": float(v),
                                               "proc_cpu_pct": 40.0} for i, v in enumerate(rng.uniform(0, 100, 200))])
    board.set_run("a")
    board.smoothing.setValue(90)
    board.redraw()
    _, smooth = board.rate_plot.curve_data("a:rate")
    _, raw = board.rate_plot.curve_data("a:rate:raw")
    assert np.std(smooth[50:]) < 0.5 * np.std(raw[50:])
    _, cpu = board.device_plot.curve_data("a:cpu_pct")
    assert np.std(cpu[50:]) < 0.5 * np.std(board.traces["a"].device["cpu_pct", -1, 0].y[50:])
    board.smoothing.setValue(0)  # no smoothing: the raw points
    board.redraw()
    np.testing.assert_allclose(board.rate_plot.curve_data("a:rate")[1], raw)


def test_the_hover_readout_leaves_with_the_mouse(board, store, qtbot):
    _run(store, "a")
    board.set_run("a")
    board.redraw()
    plot = board.loss_plot
    view = plot.getPlotItem().getViewBox()
    center = plot.mapFromScene(view.sceneBoundingRect().center())
    QTest.mouseMove(plot.viewport(), center)
    QTest.mouseMove(plot.viewport(), center + QPoint(5, 3))
    qtbot.waitUntil(lambda: plot._readout.isVisible(), timeout=5000)
    QApplication.sendEvent(plot, QEvent(QEvent.Type.Leave))
    assert not plot._readout.isVisible() and not plot._vline.isVisible()
    qtbot.wait(200)  # a move the rate limit held back does not bring it back
    assert not plot._readout.isVisible()


def test_ticks_wall_clock_in_whole_seconds_and_log_ticks_all_as_powers_of_ten():
    axis = ClockAxis(orientation="bottom")
    values = [v for spacing, ticks in axis.tickValues(T0 + 22.2, T0 + 25.1, 800) for v in ticks]
    assert values and all(float(v).is_integer() for v in values)
    strings = axis.tickStrings(values, 1.0, 1.0)
    assert all(len(s) == 8 and s.count(":") == 2 for s in strings), strings
    left = NumberAxis("left")
    left.setLogMode(False, True)
    assert left.logTickStrings([-5.0, -4.0, -3.0], 1.0, 1.0) == ["10⁻⁵", "10⁻⁴", "10⁻³"]
    assert left.logTickStrings([-4.3, -4.0], 1.0, 0.1) == ["", "10⁻⁴"]
    assert left.logTickStrings([-0.5, -0.3], 1.0, 0.1) == ["3.2×10⁻¹", "5×10⁻¹"]  # within a decade: m×10ᵏ
    plain = NumberAxis("bottom")
    assert plain.tickStrings([0.0, 200.0, 400.0], 1.0, 200.0) == ["0", "200", "400"]


def test_legends_of_eight_overlaid_runs_sit_outside_the_data_area(board, store):
    ids = [f"r{i}" for i in range(8)]
    for i, run_id in enumerate(ids):
        _run(store, run_id, n=100, scale=i + 1)
    board.set_runs(ids)
    board.redraw()
    QApplication.processEvents()
    for plot in (board.loss_plot, board.rate_plot):
        legend = plot.legend.sceneBoundingRect()
        data = plot.getPlotItem().getViewBox().sceneBoundingRect()
        assert len(plot.legend.items) == 8 and legend.height() > 0
        assert not legend.intersects(data), (plot.objectName(), legend, data)
