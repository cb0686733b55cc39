"""The dashboard on real stores: overlaid runs, x axes, off-thread loading without duplicates, hints, export."""
import xml.etree.ElementTree as ET

import numpy as np
import pyqtgraph as pg
import pytest
from helpers.stored_runs import put_spool

from ddpgui.core.runs.manager import RunUpdate
from ddpgui.ui.widgets.dashboard import Dashboard
from ddpgui.ui.workers import WorkerPool

T0 = 1_764_500_000.0


def _metrics(n, scale=1.0, t0=T0, first=0, warmup_steps=2):
    return [{"seq": i, "t": t0 + 1 + 0.5 * i, "step": i + 1, "loss": scale / (i + 1), "samples_per_s": 100.0 + i,
             "warmup": i < warmup_steps} for i in range(first, n)]


def _run(store, run_id, n=100, scale=1.0, telemetry=()):
    store.create_run(run_id, name=f"name-{run_id}", hosts=["local"], config={"steps": n}, state="running")
    put_spool(store, run_id, "events.jsonl", [{"seq": 0, "t": T0, "event": "started"}])
    put_spool(store, run_id, "metrics.jsonl", _metrics(n, scale))
    if telemetry:
        put_spool(store, run_id, "telemetry.jsonl", list(telemetry))


def _cpu(n, t0=T0):
    return [{"seq": i, "t": t0 + i, "kind": "cpu", "cpu_pct": 50.0 + i, "proc_cpu_pct": 40.0} for i in range(n)]


def test_selected_runs_are_overlaid_each_with_all_its_points(board, store):
    for i, run_id in enumerate(("a", "b", "c")):
        _run(store, run_id, n=100 + 10 * i, scale=i + 1, telemetry=_cpu(5))
    board.set_runs(["b", "a", "c"])
    board.redraw()
    assert board.run_id == "b" and board.title.text() == "name-b" and board.overlaid.text() == "+2 overlaid"
    for i, run_id in enumerate(("a", "b", "c")):
        x, y = board.loss_plot.curve_data(f"{run_id}:raw")
        np.testing.assert_array_equal(x, np.arange(1, 101 + 10 * i))
        np.testing.assert_allclose(y, (i + 1) / np.arange(1, 101 + 10 * i))
        assert f"{run_id}:cpu_pct" in board.device_plot.curves
    names = [item[1].text for item in board.loss_plot.legend.items]
    assert names == ["name-b", "name-a", "name-c"]
    colors = {board.loss_plot.curves[f"{r}:ema"][0].opts["pen"].color().name() for r in "abc"}
    assert len(colors) == 3
    board.set_runs(["c"])  # narrowing the selection keeps the loaded run and drops the others' curves
    board.redraw()
    assert set(board.loss_plot.curves) == {"c:raw", "c:ema"} and board.title.text() == "name-c"


def test_x_axis_step_elapsed_and_wall_clock(board, store):
    _run(store, "a", n=50, telemetry=_cpu(10))
    board.set_run("a")
    t = np.array([r["t"] for r in _metrics(50)])
    for axis, expected in (("elapsed", t - T0), ("wall clock", t), ("step", np.arange(1, 51)), ("wall clock", t),
                           ("elapsed", t - T0)):
        board.set_x_axis(axis)
        board.redraw()
        np.testing.assert_allclose(board.loss_plot.curve_data("a:raw")[0], expected)
        rate_x = board.rate_plot.curve_data("a:rate")[0]
        np.testing.assert_allclose(rate_x, t if axis == "wall clock" else t - T0)
        cpu_x = board.device_plot.curve_data("a:cpu_pct")[0]
        np.testing.assert_allclose(cpu_x, T0 + np.arange(10) - (0 if axis == "wall clock" else T0))
        bottom = board.loss_plot.getPlotItem().getAxis("bottom")
        assert isinstance(bottom, pg.DateAxisItem) == (axis == "wall clock")
    # live points arrive in the current axis
    board.on_update(RunUpdate("a", records={"metrics.jsonl": _metrics(52, first=50)}))
    board.redraw()
    x, _ = board.loss_plot.curve_data("a:raw")
    np.testing.assert_allclose(x[-2:], np.array([r["t"] for r in _metrics(52, first=50)]) - T0)


def test_updates_during_an_off_thread_load_are_shown_once(qtbot, store):
    _run(store, "a", n=50)
    pool = WorkerPool(2)
    board = Dashboard(store, loader=pool.start)
    qtbot.addWidget(board)
    board.set_run("a")
    assert not board.traces["a"].loaded  # the store is being read on a worker
    # the follower delivers records 40..59 meanwhile (40..49 are also in the store)
    board.on_update(RunUpdate("a", records={"metrics.jsonl": _metrics(60, first=40)},
                              logs={"stdout.log": b"hello\n"}))
    qtbot.waitUntil(lambda: board.traces["a"].loaded, timeout=10_000)
    board.redraw()
    x, _ = board.loss_plot.curve_data("a:raw")
    np.testing.assert_array_equal(x, np.arange(1, 61))
    assert board.live.step == 60
    assert "hello" in board.log.toPlainText()
    pool.shutdown()


def test_a_deleted_run_leaves_the_dashboard(board, store):
    _run(store, "a", n=5)
    board.set_runs(["a", "gone"])
    assert board.run_ids == ["a"]


def _gpu(n, util, t0=T0):
    return [{"seq": i, "t": t0 + 2 + 0.5 * i, "kind": "gpu", "gpu": i % 2, "name": "NVIDIA H100 80GB HBM3",
             "util_pct": util, "mem_used_gib": 10.0, "power_w": 300.0, "temp_c": 60.0} for i in range(n)]


@pytest.mark.parametrize("util, advice", [(35.0, True), (92.0, False)])
def test_low_gpu_utilization_after_warm_up_gives_the_input_pipeline_hint(board, store, util, advice):
    # warm-up samples at 0% must not count: only samples after the first step past warm-up do
    warm = [dict(r, util_pct=0.0) for r in _gpu(4, util, T0 - 2.1)]  # before the first step past warm-up (T0 + 2)
    _run(store, "a", n=100, telemetry=warm + [dict(r, seq=r["seq"] + 4) for r in _gpu(60, util, T0 + 2)])
    board.set_run("a")
    board.redraw()
    assert board.advice.isVisibleTo(board) == advice
    if advice:
        assert "input pipeline" in board.advice.text() and "35%" in board.advice.text()
    assert board.device_metric.currentText() == "GPU utilization %"
    assert {"a:gpu0", "a:gpu1"} <= set(board.device_plot.curves)
    legend = [item[1].text for item in board.device_plot.legend.items]
    assert "GPU 0 NVIDIA H100 80GB HBM3" in legend


def test_a_plot_exports_alone_to_png_and_svg(board, store, tmp_path):
    _run(store, "a", n=30)
    board.set_run("a")
    board.redraw()
    png = board.loss_plot.export_image(tmp_path / "loss.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = board.loss_plot.export_image(tmp_path / "loss.svg")
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and "Loss" in svg.read_text()
    with pytest.raises(ValueError, match="png or .svg"):
        board.loss_plot.export_image(tmp_path / "loss.jpg")
