"""The dashboard's log tail with the run's own lines, and its empty state; a real run stopped from the window."""
import pytest
from helpers.stored_runs import put_spool
from helpers.window_launch import launch_from_panel

from ddpgui.core.runs.loglines import MARK, stored_lines
from ddpgui.core.runs.manager import RunUpdate
from ddpgui.core.store import RunStore
from ddpgui.ui.widgets.dashboard import Dashboard
from ddpgui.ui.workers import WorkerPool

T0 = 1_764_500_000.0
CONFIG = {"workload": "mlp", "nproc_per_node": 2, "precision": "fp32", "compile": "default", "batch_size": 32,
          "steps": 100}


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.db") as s:
        yield s


def _live_run(store, run_id="r"):
    store.create_run(run_id, name="mlp 2x", hosts=["local"], config=CONFIG, state="running", run_dirs={0: "/r"})
    store.update_run(run_id, started_at=T0)
    put_spool(store, run_id, "events.jsonl", [
        {"seq": 0, "t": T0, "event": "started", "world_size": 2, "nnodes": 1},
        {"seq": 1, "t": T0 + 2, "event": "train_start", "backend": "gloo", "device": "cpu"},
        {"seq": 2, "t": T0 + 2.5, "event": "compile_start"}])
    put_spool(store, run_id, "stderr.log", b"==> ddpgui: starting torchrun\nOMP banner\n")
    put_spool(store, run_id, "metrics.jsonl", [{"seq": 0, "t": T0 + 25, "step": 1, "loss": 1.0, "warmup": True}])


def _board(qtbot, store, loader=None):
    board = Dashboard(store, loader=loader)
    qtbot.addWidget(board)
    board.resize(1000, 700)
    board.show()
    return board


def _own(board):
    """The run's own lines in the tail, without their time."""
    return [line.split("  ", 1)[1].strip() for line in board.log.toPlainText().splitlines() if line.startswith(MARK)]


def test_the_run_lines_go_with_its_log_as_they_arrive_and_its_end_brings_the_summary(qtbot, store):
    _live_run(store)
    board = _board(qtbot, store)
    board.set_run("r")
    lines = board.log.toPlainText().splitlines()
    assert [line.split("  ", 1)[-1] for line in lines] == [
        "run started on This computer · 2 processes · mlp ×2 fp32 compile=default batch=32",
        "training · gloo on cpu",
        "torch.compile: compiling the model (the first steps wait for it)",
        "==> ddpgui: starting torchrun", "OMP banner"]

    def arrive(events=(), log=b"", run=None):  # as the follower does: stored first, then announced
        if events:
            put_spool(store, "r", "events.jsonl", list(events))
        if log:
            put_spool(store, "r", "stderr.log", log)
        board.on_update(RunUpdate("r", 0, records={"events.jsonl": list(events)}, logs={"stderr.log": log} if log
                                  else {}, run=run))

    arrive([{"seq": 3, "t": T0 + 24.5, "event": "compile_end", "duration_s": 22.0},
            {"seq": 4, "t": T0 + 25, "event": "warmup_done", "step": 5}], b"W torch warning\n")
    put_spool(store, "r", "metrics.jsonl", [{"seq": i, "t": T0 + 25 + i, "step": i + 1, "loss": 0.5,
                                             "samples_per_s": 1000.0, "warmup": False} for i in range(1, 40)])
    arrive(log=b"torchrun ended by SIGTERM (pid 42): it stopped its workers\n")
    arrive([{"seq": 5, "t": T0 + 70, "event": "stopped", "message": "stopped on request"}])
    assert "run stopped" not in board.log.toPlainText()  # the event alone: the run's end is not stored yet
    arrive(run=store.update_run("r", state="stopped", message="stopped on request", ended_at=T0 + 72))
    text = board.log.toPlainText()
    tail = text.split("OMP banner\n", 1)[1].splitlines()
    assert tail[:4] == [tail[0], tail[1], "W torch warning", "torchrun ended by SIGTERM (pid 42): it stopped its workers"]
    assert tail[0].endswith("compiled in 22.0 s") and tail[1].endswith("warm-up done at step 5: throughput counts "
                                                                       "from here")
    assert tail[4].endswith("run stopped by you (SIGTERM) after 01:12: 40 steps")
    assert [line.split(None, 1)[1] for line in tail[5:]] == [
        "final loss          0.5000", "steady throughput   1.00k samples/s", "compile time        22.0 s"]
    assert "Traceback" not in text
    board.on_update(RunUpdate("r", 0, run=store.get_run("r")))  # the end announced again: shown once
    assert board.log.toPlainText() == text

    board.set_run(None)
    board.set_run("r")  # read back from the store: the same lines, the run's life before its log, its end after
    again = _own(board)
    assert again == [line.split("  ", 1)[1].strip() for line in text.splitlines() if line.startswith(MARK)]


def test_lines_that_arrive_while_the_store_is_read_are_shown_once(qtbot, store):
    _live_run(store)
    pool = WorkerPool(2)
    board = _board(qtbot, store, loader=pool.start)
    board.set_run("r")
    event = {"seq": 3, "t": T0 + 24.5, "event": "compile_end", "duration_s": 22.0}
    put_spool(store, "r", "events.jsonl", [event])  # stored and announced while the worker reads the store
    board.on_update(RunUpdate("r", 0, records={"events.jsonl": [event]}))
    qtbot.waitUntil(lambda: len(_own(board)) >= 4, timeout=10_000)
    qtbot.wait(200)  # a late read must not add them again
    assert _own(board).count("compiled in 22.0 s") == 1 and _own(board)[0].startswith("run started on This computer")
    pool.shutdown()


def test_no_run_selected_shows_one_clear_empty_state(qtbot, store):
    _live_run(store)
    board = _board(qtbot, store)
    board.redraw()
    assert board.empty.isVisible()
    assert board.empty.text() == "No run selected — launch one on the left or pick one in Runs"
    for widget in (board.state, board.device_metric, board.x_axis_box, board.smoothing, board.stop_button,
                   board.log, board.log_find, board.loss_plot, board.title, board.stats):
        assert not widget.isVisible(), widget.objectName()
    board.set_run("r")
    board.redraw()
    assert not board.empty.isVisible()
    assert board.state.isVisible() and board.state.text() == "running" and board.device_metric.isVisible()
    assert board.device_metric.count() > 0 and board.log.isVisible() and board.stop_button.isEnabled()
    board.set_runs([])
    board.redraw()
    assert board.empty.isVisible() and not board.device_metric.isVisible() and not board.state.isVisible()


def test_open_logs_under_the_tail_opens_the_viewer_of_the_run_shown(qtbot, store):
    _live_run(store)
    board = _board(qtbot, store)
    board.set_run("r")
    board.log_tail.open_button.click()
    assert [v.run_id for v in board.viewers] == ["r"] and board.viewers[0].isVisible()
    assert board.viewers[0].text.toPlainText().endswith("OMP banner")  # stderr; the run's own lines are the tail's
    board.viewers[0].close()


def test_a_deleted_run_leaves_the_empty_state(qtbot, store):
    board = _board(qtbot, store)
    board.set_run("gone")  # not in the store (deleted meanwhile)
    board.redraw()
    assert board.run_id is None and board.empty.isVisible()


@pytest.mark.slow
def test_a_real_run_stopped_from_the_window_ends_its_log_without_a_traceback(window, qtbot):
    launch_from_panel(window, qtbot, steps=1_000_000)
    board = window.dashboard
    qtbot.waitUntil(lambda: any("warm-up done" in line for line in _own(board)), timeout=120_000)
    assert _own(board)[0].startswith("run started on This computer · 2 processes · mlp ×2 fp32 compile=off")
    board.stop_button.click()
    qtbot.waitUntil(lambda: any("stopped by you (SIGTERM)" in line for line in _own(board)), timeout=120_000)
    text = board.log.toPlainText()
    assert "Traceback" not in text and "SignalException" not in text, text
    own = _own(board)
    assert own.index(next(line for line in own if "warm-up done" in line)) < own.index(
        next(line for line in own if "stopped by you" in line))
    window.run_action("logs", [board.run_id])  # the whole stderr, searchable
    viewer = board.viewers[-1]
    qtbot.waitUntil(lambda: "torchrun ended by SIGTERM" in viewer.text.toPlainText(), timeout=60_000)
    viewer.search.setText("SIGTERM")
    assert viewer.find_next() and "Traceback" not in viewer.text.toPlainText()
    viewer.close()


def test_a_started_line_that_arrives_before_the_stored_read_names_the_host_and_settings(qtbot, store):
    """On a loaded machine the live "started" event can reach the tail before its read of the stored lines
    (which brings the run's record) returns: the line still names the host and the settings."""
    store.create_run("r", name="mlp 2x", hosts=["local"], config=CONFIG, state="running", run_dirs={0: "/r"})
    held = []  # the read of the stored lines, held back; the other reads return at once

    def loader(func, *args, on_return=None, on_error=None):
        if func is stored_lines:
            held.append(func)
        else:
            on_return(func(*args))

    board = _board(qtbot, store, loader=loader)
    board.set_run("r")
    assert held and board.log_tail.run is None
    started = {"seq": 0, "t": T0, "event": "started", "world_size": 2, "nnodes": 1}
    put_spool(store, "r", "events.jsonl", [started])
    board.on_update(RunUpdate("r", records={"events.jsonl": [started]}))
    assert _own(board) == ["run started on This computer · 2 processes · mlp ×2 fp32 compile=default batch=32"]
