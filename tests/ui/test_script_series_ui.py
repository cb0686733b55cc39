"""A script run's series on the dashboard, on a real RunStore holding what the host's own readers wrote for the real
captures in tests/fixtures/scriptlogs (stored as the follower stores them), read on real worker threads:
the header's tooltip names each series' source as ``ddpgui show`` does, a run that gave no metric says so
(a warning, not a failure) and its loss plot too, the loss can be another series (kept in the store, reset),
and a script's own progress bar gives the header its position and ETA."""

import html
import re

import numpy as np
import pytest
from helpers.stored_runs import put_spool, store_run
from PySide6.QtGui import QPalette
from script_runs import SCRIPT, T0, host_run, store_capture_run

from ddpgui.core.runs.manager import RunUpdate
from ddpgui.core.runs.series import run_series_lines, series_info
from ddpgui.core.store import RunStore
from ddpgui.ui.plots.live_plot import WAITING
from ddpgui.ui.texts import as_rich
from ddpgui.ui.widgets.dashboard import Dashboard
from ddpgui.ui.widgets.dashboard_header import STALL_COLOR
from ddpgui.ui.widgets.run_series import TIP_WIDTH
from ddpgui.ui.workers import WorkerPool

WAIT = 10_000


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.db") as s:
        yield s


@pytest.fixture
def pool():
    workers = WorkerPool(2)
    yield workers
    assert workers.shutdown(5000)


@pytest.fixture
def board(qtbot, store, pool):
    widget = Dashboard(store, loader=pool.start)  # the store is read on workers, as in the app
    qtbot.addWidget(widget)
    widget.resize(1000, 700)
    widget.show()
    return widget


def _shown(qtbot, board, run_id):
    board.set_run(run_id)
    qtbot.waitUntil(lambda: board.traces[run_id].loaded and board.series.facts is not None
                    and board.series.facts.run_id == run_id, timeout=WAIT)
    board.redraw()


def _finite(board, key="raw"):
    x, y = board.loss_plot.curve_data(f"{board.run_id}:{key}")
    keep = np.isfinite(y)
    return list(zip(x[keep].tolist(), y[keep].tolist()))


def test_the_header_tooltip_names_where_each_series_came_from(qtbot, board, store):
    store_capture_run(store, "light", "lightning_tqdm")
    _shown(qtbot, board, "light")
    tip = board.title.toolTip()
    assert tip == board.stats.toolTip().replace(as_rich(board.stats.text()), as_rich(board.title.text()))
    words = " ".join(re.sub(r"<[^>]+>|&nbsp;", " ", tip).split())
    for label, text in run_series_lines(store, "light", 90):  # what `ddpgui show` prints, line for line
        assert " ".join(as_rich(f"{label} {text}").split()) in words
    assert "loss  from train_loss, progress bar (stdout)" in tip
    assert "epoch, val_loss" in tip and "v_num" not in tip
    assert board.loss_plot.getPlotItem().titleLabel.text == "Loss (train_loss)"
    assert not board.series.warning.isVisible()

    store_capture_run(store, "trainer", "trainer_gpt2")  # Trainer's closing summary is said there too
    _shown(qtbot, board, "trainer")
    tip = board.title.toolTip()
    assert "<b>script</b>" in tip and "train_runtime 0.425 · train_samples_per_second 301" in tip
    assert "eval_loss" in tip and "printed lines (stdout)" in tip
    x, y = board.loss_plot.curve_data("trainer:raw")  # its evaluations' records between leave no gaps
    assert len(y) == 8 and np.isfinite(y).all()
    more = [{"seq": 100, "t": T0 + 300, "step": 17, "eval_loss": 4.2, "src": "stdout", "phase": "script"},
            {"seq": 101, "t": T0 + 301, "step": 18, "loss": 4.1, "src": "stdout", "phase": "script"}]
    board.on_update(RunUpdate("trainer", records={"metrics.jsonl": more}))  # live too
    board.redraw()
    x, y = board.loss_plot.curve_data("trainer:raw")
    assert len(y) == 9 and np.isfinite(y).all() and (x[-1], y[-1]) == (18, 4.1)


def test_a_second_source_of_a_series_is_named_beside_the_first(qtbot, board, store):
    metrics = [{"step": s, "loss": 1.0 / s, "src": "stdout", "phase": "script", "t": T0 + s} for s in (1, 2, 3)]
    events = [{"event": "series", "name": "loss", "from": "train_loss", "source": "progress bar (stdout)",
               "loss": True},
              {"event": "series", "name": "loss", "also": "TensorBoard tag train_loss"}]
    store_run(store, "r1", SCRIPT, metrics, events=events)
    _shown(qtbot, board, "r1")
    assert as_rich("loss  from train_loss, progress bar (stdout); also TensorBoard tag train_loss") in \
        board.title.toolTip()
    (action,) = [a for a in _menu_actions(board).values() if a.objectName() == "loss_choice:loss"]
    assert action.text() == "train_loss\tprogress bar (stdout) (+1 other source)"  # a menu item stays short
    assert action.toolTip() == "progress bar (stdout); also TensorBoard tag train_loss"


def test_a_built_in_workloads_run_has_no_series_part(qtbot, board, store):
    metrics = [{"step": s, "loss": 1.0 / s, "samples_per_s": 10.0, "t": T0 + s} for s in range(1, 5)]
    store_run(store, "mlp", {"workload": "mlp", "steps": 4}, metrics)
    _shown(qtbot, board, "mlp")
    assert board.title.toolTip() == board.title.text()
    assert not board.series.button.isVisible() and not board.series.warning.isVisible()


def _no_metric_run(store, run_id, state="finished"):
    """A script that printed lines, none of them a metric: the host's no_metrics report, as the sink writes it."""
    output = {"stdout": b"loading the data\nepoch done, all is well\n", "stderr": b"a warning\n"}
    metrics, events = host_run("accelerate_print", streams=("stdout", "stderr"), data=output)
    assert not metrics and events[-1]["event"] == "no_metrics"
    store_run(store, run_id, SCRIPT, metrics, events=events + [{"event": state, "t": T0 + 200}], state=state)
    return events[-1]


def test_a_run_with_no_metric_says_so_with_its_hint_and_the_plot_too(qtbot, board, store):
    report = _no_metric_run(store, "quiet")
    _shown(qtbot, board, "quiet")
    warning = board.series.warning
    qtbot.waitUntil(warning.isVisible, timeout=WAIT)
    assert report["message"].startswith("the script gave no metric ddpgui could read (rank 0 printed 2 lines on")
    assert as_rich(report["message"]) in warning.text() and "Hint: " + as_rich(report["hint"]) in warning.text()
    assert warning.palette().color(QPalette.ColorRole.WindowText).name() == STALL_COLOR  # a warning, not red
    assert not board.error.isVisible()
    assert "loading the data" in warning.toolTip() and "a warning" in warning.toolTip()  # the last lines it saw
    rows = [html.unescape(r) for r in re.findall(r"white-space:pre'>(.*?)</td>", board.title.toolTip())]
    assert any("no metric ddpgui could read" in r for r in rows)
    assert max(len(r) for r in rows) <= TIP_WIDTH  # the header's tooltip wraps the report: never screen-wide
    plot = board.loss_plot
    placeholder, view = plot.placeholder, plot.getPlotItem().getViewBox()
    assert placeholder.isVisible() and plot.placeholder_text == f"no metric was read: {report['hint']}"
    for width, height in ((1000, 700), (1000, 1000), (1600, 1000)):
        board.resize(width, height)
        qtbot.waitUntil(lambda w=width: abs(board.width() - w) < 2, timeout=WAIT)
        shown = placeholder.textItem.toPlainText()
        assert shown == plot.placeholder_text or (shown.endswith(" …") and plot.placeholder_text.startswith(shown[:-2]))
        box = placeholder.textItem.boundingRect()
        assert box.width() <= view.width() and box.height() <= view.height()  # wrapped (and shrunk) to the plot
    assert shown == plot.placeholder_text  # a large plot shows all of it
    assert board.rate_plot.placeholder_text == "no metric was read"  # not "waiting for the first points"
    assert not board.series.button.isVisible()  # no series to choose from

    store_capture_run(store, "light", "lightning_tqdm")  # the next run shown is not told the same
    _shown(qtbot, board, "light")
    assert not warning.isVisible() and plot.placeholder_text == WAITING == placeholder.textItem.toPlainText()
    assert board.rate_plot.placeholder_text != "no metric was read"


def test_the_report_arriving_live_shows_at_the_runs_end(qtbot, board, store):
    store.create_run("live", name="quiet script", hosts=["local"], config=SCRIPT, state="running",
                     run_dirs={0: "/runs/live"})
    put_spool(store, "live", "events.jsonl", [{"seq": 0, "t": T0, "event": "started"}])
    _shown(qtbot, board, "live")
    assert not board.series.warning.isVisible()
    assert board.loss_plot.placeholder_text == WAITING
    output = {"stdout": b"hello\n", "stderr": b""}
    _, events = host_run("accelerate_print", streams=("stdout",), data=output)
    ending = [dict(events[-1], seq=1), {"seq": 2, "t": T0 + 5, "event": "finished"}]
    put_spool(store, "live", "events.jsonl", ending)  # as the follower stores them, then reports them
    run = store.update_run("live", state="finished")
    board.on_update(RunUpdate("live", records={"events.jsonl": ending}, run=run))
    qtbot.waitUntil(board.series.warning.isVisible, timeout=WAIT)
    board.redraw()
    assert board.loss_plot.placeholder_text.startswith("no metric was read: ddpgui reads lines")


def _menu_actions(board):
    board.series.fill_menu()
    return {a.objectName(): a for a in board.series.menu.actions() if a.objectName()}


def test_another_series_becomes_the_loss_and_the_one_the_script_gave_comes_back(qtbot, board, store, pool):
    metrics = store_capture_run(store, "light", "lightning_tqdm")
    train = [(float(r["step"]), r["loss"]) for r in metrics if "loss" in r]
    val = [(float(r["step"]), r["val_loss"]) for r in metrics if "val_loss" in r]
    assert len(val) == 3
    changed = []
    board.series.run_changed.connect(changed.append)
    _shown(qtbot, board, "light")
    assert board.series.button.isVisible() and _finite(board) == train
    actions = _menu_actions(board)
    assert set(actions) == {"loss_choice:loss", "loss_choice:epoch", "loss_choice:val_loss", "loss_choice_reset"}
    assert actions["loss_choice:loss"].isChecked() and actions["loss_choice:loss"].text().startswith("train_loss\t")
    assert actions["loss_choice:val_loss"].text() == "val_loss\tprogress bar (stdout)"
    assert not actions["loss_choice_reset"].isEnabled()  # nothing chosen yet

    with qtbot.waitSignal(board.series.message, timeout=WAIT) as said:
        actions["loss_choice:val_loss"].trigger()  # set on a worker, then the run is read again
    assert said.args == ["lightning_tqdm 2x: the loss is now val_loss (your choice)"]
    assert store.get_run("light").loss_series == "val_loss"
    qtbot.waitUntil(lambda: board.traces["light"].loaded and board.series.facts.chosen == "val_loss", timeout=WAIT)
    board.redraw()
    assert _finite(board) == val
    assert board.loss_plot.getPlotItem().titleLabel.text == "Loss (val_loss)"
    assert changed[-1].id == "light" and changed[-1].loss_series == "val_loss"
    actions = _menu_actions(board)
    assert actions["loss_choice:loss"].text().startswith("val_loss\t") and actions["loss_choice:loss"].isChecked()
    assert "loss_choice:train_loss" in actions and actions["loss_choice_reset"].isEnabled()
    assert "your choice" in board.title.toolTip()

    again = Dashboard(store, loader=pool.start)  # remembered: another window (or a restart) reads the same
    qtbot.addWidget(again)
    _shown(qtbot, again, "light")
    assert _finite(again) == val

    with qtbot.waitSignal(board.series.message, timeout=WAIT) as said:
        actions["loss_choice_reset"].trigger()
    assert said.args == ["lightning_tqdm 2x: the loss is now the series the script gave"]
    qtbot.waitUntil(lambda: board.series.facts.chosen is None and board.traces["light"].loaded, timeout=WAIT)
    board.redraw()
    assert store.get_run("light").loss_series is None and _finite(board) == train
    assert board.loss_plot.getPlotItem().titleLabel.text == "Loss (train_loss)"


def test_a_refused_choice_is_said_and_changes_nothing(qtbot, board, store):
    store_capture_run(store, "light", "lightning_tqdm")
    _shown(qtbot, board, "light")
    before = _finite(board)
    with qtbot.waitSignal(board.series.message, timeout=WAIT) as said:
        board.series.choose("no_such_series")
    assert said.args[0].startswith("Could not choose the loss: run light has no series 'no_such_series' (its series:")
    assert store.get_run("light").loss_series is None and _finite(board) == before
    assert [i.name for i in series_info(store, "light")][0] == "loss"


def test_the_header_shows_the_scripts_own_bar_and_its_eta(qtbot, board, store):
    metrics, events = host_run("tqdm_stderr")  # tqdm's bar: n/40 and the time left it drew
    assert all(r["bar_total"] == 40 for r in metrics)
    store.create_run("bar", name="tqdm loop", hosts=["local"], config=SCRIPT, state="running", run_dirs={0: "/r"})
    put_spool(store, "bar", "events.jsonl", [dict(e, seq=i) for i, e in enumerate(events[:2])])
    put_spool(store, "bar", "metrics.jsonl", [dict(r, seq=i) for i, r in enumerate(metrics[:21])])
    _shown(qtbot, board, "bar")  # read back from the store: the bar as its last stored frame drew it
    stats = board.stats.text()
    eta = metrics[20]["eta_s"]
    assert stats.startswith(f"step 20   ·   bar 20/40   ·   loss {metrics[20]['loss']:.3g}"), stats
    assert f"ETA 00:{eta:02.0f}" in stats and "/200" not in stats, stats
    more = [dict(r, seq=i) for i, r in enumerate(metrics[21:31], start=21)]
    board.on_update(RunUpdate("bar", records={"metrics.jsonl": more}))  # and live
    board.redraw()
    assert "bar 30/40" in board.stats.text() and f"ETA 00:{metrics[30]['eta_s']:02.0f}" in board.stats.text()

    plain = [{"step": s, "loss": 1.0 / s, "src": "stdout", "phase": "script", "t": T0 + s} for s in range(1, 9)]
    store_run(store, "plain", SCRIPT, plain, state="running")
    _shown(qtbot, board, "plain")  # a script without a bar: no made-up total, no ETA
    assert "bar" not in board.stats.text() and "ETA" not in board.stats.text()


def test_in_the_window_a_choice_is_said_in_the_status_bar_and_the_table_keeps_the_new_record(window, qtbot):
    store_capture_run(window.store, "light", "lightning_tqdm")
    window.runs_table.model.reload()
    window.runs_table.select_runs(["light"])
    window.show_run("light")
    board = window.dashboard
    qtbot.waitUntil(lambda: board.series.facts is not None and board.series.facts.run_id == "light", timeout=WAIT)
    _menu_actions(board)["loss_choice:val_loss"].trigger()
    qtbot.waitUntil(lambda: window.statusBar().currentMessage() == "lightning_tqdm 2x: the loss is now val_loss "
                    "(your choice)", timeout=WAIT)
    model = window.runs_table.model
    assert model.runs[model.row_of("light")].loss_series == "val_loss"


def test_an_ended_script_without_throughput_says_so_in_its_throughput_plot(qtbot, board, store):
    store_capture_run(store, "light", "lightning_tqdm")  # Lightning's bar shows no samples/s
    _shown(qtbot, board, "light")
    assert board.rate_plot.placeholder_text == "no throughput: the script gave no samples_per_s or tokens_per_s"
    store_capture_run(store, "titan", "torchtitan", state="running", streams=("stdout",))  # still running: waits
    _shown(qtbot, board, "titan")
    assert board.rate_plot.placeholder_text == WAITING
