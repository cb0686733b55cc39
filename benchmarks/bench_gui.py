"""GUI measures: cold start to the window shown, repaint of big plots, event-loop stalls under live data."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from benchmarks.common import Row, median, percentile

_COLD_START = r"""
import os, sys, time, json
t0 = float(sys.argv[1])
from ddpgui.ui.app import create_app
app = create_app([])
from ddpgui.ui.main_window import MainWindow
window = MainWindow()
window.show()
app.processEvents()
shown = time.time() - t0
print(json.dumps({"shown_s": shown, "torch": "torch" in sys.modules}))
window.close()
"""


def _cold_start(repeats: int = 3) -> list[Row]:
    times, torch_loaded = [], False
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, QT_QPA_PLATFORM="offscreen", DDPGUI_CONFIG_DIR=f"{tmp}/c", DDPGUI_DATA_DIR=f"{tmp}/d",
                   DDPGUI_CACHE_DIR=f"{tmp}/x")
        for _ in range(repeats):
            out = subprocess.run([sys.executable, "-c", _COLD_START, repr(time.time())], env=env, check=True,
                                 capture_output=True, text=True, timeout=60).stdout
            result = json.loads(out.strip().splitlines()[-1])
            times.append(result["shown_s"])
            torch_loaded |= result["torch"]
    assert not torch_loaded, "the GUI process imported torch"
    value = median(times)
    return [Row("gui cold start to window shown (median of 3)", value, "s", "<= 1.5", value <= 1.5,
                "torch not imported")]


def _repaint(app) -> list[Row]:
    from ddpgui.ui.plots.buffer import SeriesBuffer
    from ddpgui.ui.plots.live_plot import LivePlot

    plot = LivePlot("bench", "y", "x")
    plot.resize(1200, 700)
    plot.show()
    n = 1_000_000
    x = np.arange(n, dtype=np.float64)
    rng = np.random.default_rng(0)
    for i in range(10):
        buffer = SeriesBuffer(n)
        buffer.extend(x, np.cumsum(rng.normal(size=n)) + 50 * i)
        plot.add_curve(f"c{i}", buffer, f"curve {i}")
    plot.redraw()
    plot.grab()
    view = plot.getPlotItem().getViewBox()
    times = []
    for k in range(40):
        span = n / (1 + (k % 8))  # zoom levels from everything to 1/8
        start = (k * 37_000) % max(1, int(n - span))
        view.setXRange(start, start + span, padding=0)
        t = time.perf_counter()
        app.processEvents()
        plot.grab()
        times.append((time.perf_counter() - t) * 1e3)
    plot.close()
    p95 = percentile(times, 95)
    return [Row("plot repaint 10 curves x 1e6 points, p95", p95, "ms", "<= 33", p95 <= 33,
                f"pan/zoom, offscreen grab; p50 {percentile(times, 50):.1f} ms")]


def _stalls(app, runs: int = 8, rate: int = 100, seconds: float = 5.0) -> list[Row]:
    from PySide6.QtCore import QTimer

    from ddpgui.core.manager import RunUpdate
    from ddpgui.core.store import RunStore
    from ddpgui.ui.bridge import RunUpdates
    from ddpgui.ui.widgets.dashboard import Dashboard

    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(os.path.join(tmp, "runs.db"))
        dashboards = []
        for i in range(runs):
            board = Dashboard(store)
            board.resize(900, 600)
            board.show()
            board.run_id = f"run{i}"
            dashboards.append(board)
        bridge = RunUpdates()
        for board in dashboards:
            bridge.update.connect(board.on_update)
        halt = threading.Event()

        def feed() -> None:
            step, t0 = 0, time.time()
            while not halt.is_set():
                now = time.time()
                for i in range(runs):  # one update per run per 10 ms tick = rate records/s
                    metric = {"seq": step, "t": now, "step": step, "loss": 1 / (1 + step), "samples_per_s": 1000.0}
                    telemetry = {"seq": step, "t": now, "kind": "cpu", "cpu_pct": 50.0, "proc_cpu_pct": 40.0}
                    bridge.post(RunUpdate(f"run{i}", records={"metrics.jsonl": [metric], "telemetry.jsonl": [telemetry]}))
                step += 1
                time.sleep(max(0.0, t0 + step / rate - time.time()))

        ticks: list[float] = []
        timer = QTimer(interval=10)
        timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
        timer.start()
        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            app.processEvents()
            time.sleep(0.001)
        halt.set()
        feeder.join()
        timer.stop()
        points = sum(len(b.loss) for b in dashboards)
        for board in dashboards:
            board.close()
        store.close()
    gaps = [(b - a) * 1e3 for a, b in zip(ticks, ticks[1:])]
    p99 = percentile(gaps, 99)
    return [Row(f"event-loop gap, {runs} runs x {rate} records/s, p99", p99, "ms", "<= 50", p99 <= 50,
                f"max {max(gaps):.0f} ms; {points} points drawn")]


def run() -> list[Row]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    rows = _cold_start()
    from ddpgui.ui.app import create_app

    app = create_app([])
    rows += _repaint(app)
    rows += _stalls(app)
    return rows
