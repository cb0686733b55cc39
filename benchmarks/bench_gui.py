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

    class CountingPlot(LivePlot):
        paints = 0

        def paintEvent(self, event):  # noqa: N802 (Qt's name)
            CountingPlot.paints += 1
            super().paintEvent(event)

    plot = CountingPlot("bench", "y", "x")
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
    app.processEvents()
    view = plot.getPlotItem().getViewBox()
    times = []
    for k in range(60):
        span = n / (1 + (k % 8))  # zoom levels from everything to 1/8
        start = (k * 37_000) % max(1, int(n - span))
        t = time.perf_counter()
        view.setXRange(start, start + span, padding=0)  # the envelopes for the new view are computed here
        app.processEvents()  # ... and the widget repaints here (one paint, as on screen)
        times.append((time.perf_counter() - t) * 1e3)
    assert CountingPlot.paints >= 60, "the plot did not repaint on every pan/zoom"
    plot.close()
    p95 = percentile(times, 95)
    return [Row("plot repaint 10 curves x 1e6 points, p95", p95, "ms", "<= 33", p95 <= 33,
                f"pan/zoom incl. envelope + paint, offscreen; p50 {percentile(times, 50):.1f} ms")]


def _feed(post, run_ids: list[str], rate: int, halt: threading.Event) -> None:
    """Each run gets ``rate`` metric + telemetry records per second, one update per run per tick."""
    from ddpgui.core.runs.manager import RunUpdate

    step, t0 = 0, time.time()
    while not halt.is_set():
        now = time.time()
        for run_id in run_ids:
            metric = {"seq": step, "t": now, "step": step, "loss": 1 / (1 + step), "samples_per_s": 1000.0}
            telemetry = {"seq": step, "t": now, "kind": "cpu", "cpu_pct": 50.0, "proc_cpu_pct": 40.0}
            post(RunUpdate(run_id, records={"metrics.jsonl": [metric], "telemetry.jsonl": [telemetry]}))
        step += 1
        time.sleep(max(0.0, t0 + step / rate - time.time()))


def _longest_gaps(app, seconds: float, post, run_ids: list[str], rate: int) -> list[float]:
    """Event-loop gaps (ms) seen by a 10 ms timer while the feeder streams."""
    from PySide6.QtCore import QEventLoop, QTimer

    halt = threading.Event()
    ticks: list[float] = []
    timer = QTimer(interval=10)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start()
    feeder = threading.Thread(target=_feed, args=(post, run_ids, rate, halt), daemon=True)
    feeder.start()
    loop = QEventLoop()  # the app's own event loop, as app.exec() runs it
    QTimer.singleShot(int(seconds * 1000), loop.quit)
    loop.exec()
    halt.set()
    feeder.join()
    timer.stop()
    app.processEvents()
    return [(b - a) * 1e3 for a, b in zip(ticks, ticks[1:])]


def _stalls(app, runs: int = 8, rate: int = 100, seconds: float = 6.0) -> list[Row]:
    """The app as used: the main window, its dashboard overlaying 8 selected runs, its runs table."""
    from PySide6.QtCore import QSettings

    from ddpgui.core.hosts import HostStore
    from ddpgui.core.store import RunStore
    from ddpgui.ui.main_window import MainWindow

    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(os.path.join(tmp, "runs.db"))
        run_ids = [f"run{i}" for i in range(runs)]
        for run_id in run_ids:
            store.create_run(run_id, name=run_id, hosts=["local"], config={"steps": 100_000}, state="running")
        window = MainWindow(store=store, hosts=HostStore(os.path.join(tmp, "hosts.json")),
                            settings=QSettings(os.path.join(tmp, "s.ini"), QSettings.Format.IniFormat))
        window.resize(1400, 860)
        window.show()
        window.runs_table.model.reload()
        window.runs_table.view.selectAll()
        deadline = time.time() + 10
        while len(window.dashboard.run_ids) < runs or not all(t.loaded for t in window.dashboard.traces.values()):
            app.processEvents()
            assert time.time() < deadline, "the dashboard did not load the selected runs"
        gaps = _longest_gaps(app, seconds, window.updates.post, run_ids, rate)
        points = sum(len(t.loss) for t in window.dashboard.traces.values())
        window.close()
        store.close()
    p99 = percentile(gaps, 99)
    return [Row(f"event-loop gap, {runs} runs x {rate} records/s overlaid in the window, p99", p99, "ms", "<= 50",
                p99 <= 50, f"max {max(gaps):.0f} ms; {points} points drawn")]


def run() -> list[Row]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    rows = _cold_start()
    from ddpgui.ui.app import create_app

    app = create_app([])
    rows += _repaint(app)
    rows += _stalls(app)
    return rows
