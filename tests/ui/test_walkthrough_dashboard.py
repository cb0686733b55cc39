"""Issue 24's walk-through, dashboard and runs table: rates from one mean to 3 significant digits, sweep run names
that leave State/Step/Throughput in view, overlaid runs told apart, a failed run's plots and a log tail that opens
at its left edge."""
import re

import pytest
from helpers.stored_runs import put_spool
from PySide6.QtWidgets import QApplication
from walkthrough_runs import GLOBAL_BATCH, SWEEP_NAME, run_name, store_sweep

from ddpgui.ui.widgets.dashboard import Dashboard
from ddpgui.ui.widgets.name_fit import fitted_name
from ddpgui.ui.widgets.run_series import NO_POINTS
from ddpgui.ui.widgets.runs_table import ALWAYS_SHOWN, COLUMNS


def _settle(board):
    for _ in range(3):
        QApplication.processEvents()
    board.redraw()
    QApplication.processEvents()


def test_the_headers_two_rates_agree_to_three_significant_digits(board, store):
    _, ids = store_sweep(store)
    board.set_run(ids[0])
    _settle(board)
    line = board.stats.text()
    steps = re.search(r"([\d.]+)(k?) steps/s", line)
    samples = re.search(r"([\d.]+)(k?) samples/s", line)
    assert steps and samples, line
    steps_per_s = float(steps[1]) * (1000 if steps[2] else 1)
    samples_per_s = float(samples[1]) * (1000 if samples[2] else 1)
    assert steps_per_s * GLOBAL_BATCH == pytest.approx(samples_per_s, rel=0.01), line  # one mean: steps × batch
    for number in (steps[1], samples[1]):
        assert len(number.replace(".", "").lstrip("0")) <= 3, line
    assert "6.40k samples/s" in line and "100 steps/s" in line, line


def test_sweep_names_leave_state_step_and_throughput_in_view_at_1024(window, qtbot):
    window.resize(1024, 700)
    _, ids = store_sweep(window.store)
    table = window.runs_table
    table.model.reload()
    window.tabs.setCurrentIndex(1)
    QApplication.processEvents()
    view = table.view
    for column in ALWAYS_SHOWN:
        c = COLUMNS.index(column)
        assert view.columnViewportPosition(c) + view.columnWidth(c) <= view.viewport().width(), column
    metrics = view.fontMetrics()
    state = COLUMNS.index("State")
    assert view.columnWidth(state) >= metrics.horizontalAdvance("finished") + 12  # "failed", never "fa"
    name = run_name("default", "bf16", 2)
    row = table.model.row_of(ids[-1])
    index = table.model.index(row, 0)
    assert table.model.data(index) == name and name in table.model.data(index, 3)  # full name: text and tooltip
    shown = fitted_name(name, metrics, view.columnWidth(0) - 12)
    assert shown != name and shown.endswith(" #2") and ": compile=def" in shown, shown  # the sweep's name cut first
    window.resize(1920, 1080)
    QApplication.processEvents()
    assert view.columnWidth(0) >= metrics.horizontalAdvance(name)  # room enough: the whole name


def test_fitted_names_cut_the_shared_part_first_then_the_middle(qtbot):
    from PySide6.QtWidgets import QLabel

    metrics = QLabel().fontMetrics()
    name = run_name("off", "fp32", 1)
    assert fitted_name(name, metrics, 10_000) == name
    tail = ": compile=off precision=fp32 #1"
    cut = fitted_name(name, metrics, metrics.horizontalAdvance("compile×pr…" + tail))
    assert cut.endswith(tail) and cut.startswith("compile×") and "…" in cut
    assert metrics.horizontalAdvance(cut) <= metrics.horizontalAdvance("compile×pr…" + tail)
    narrow = fitted_name(name, metrics, 90)
    assert narrow.startswith("…: ") and narrow.endswith(" #1") and metrics.horizontalAdvance(narrow) <= 90


def test_overlaid_runs_are_told_apart_in_legends_and_header(board, store):
    _, ids = store_sweep(store)
    board.set_runs([ids[0], ids[2]])  # compile=off and compile=default, both precision=fp32 #1
    _settle(board)
    for plot in (board.loss_plot, board.rate_plot):
        assert [label.text for _, label in plot.legend.items] == ["compile=off", "compile=default"]
    assert board.title.text() == run_name("off", "fp32", 1)
    assert board.title.elided().endswith("compile=off precision=fp32 #1")  # the sweep's shared name cut first
    overlaid = board.overlaid
    assert overlaid.isVisible() and overlaid.text() == "+1 overlaid"
    assert overlaid.width() >= overlaid.fontMetrics().horizontalAdvance("+1 overlaid")  # never "(+1 ov…"
    assert run_name("default", "fp32", 1) in overlaid.toolTip()
    assert overlaid.geometry().right() < board.state.geometry().left()
    board.set_runs([ids[0]])
    _settle(board)
    assert not overlaid.isVisible() and [label.text for _, label in board.loss_plot.legend.items] == ["loss (EMA)"]


def test_a_run_that_failed_before_its_first_step_says_so_in_its_plots(board, store):
    _, ids = store_sweep(store)
    board.set_run(ids[-1])
    _settle(board)
    for plot in (board.loss_plot, board.rate_plot):
        assert plot.placeholder.isVisible() and plot.placeholder_text == NO_POINTS["failed"], plot.placeholder_text
    assert "waiting" not in board.loss_plot.placeholder.textItem.toPlainText()
    board.set_run(ids[0])  # a run with points: no such words
    _settle(board)
    assert not board.loss_plot.placeholder.isVisible()


def test_a_running_run_without_points_still_waits(board, store):
    store.create_run("new", name="new", hosts=["local"], config={"steps": 10}, state="running")
    board.set_run("new")
    _settle(board)
    assert board.loss_plot.placeholder_text == "waiting for the first points"


def test_the_log_tail_opens_at_its_left_edge(qtbot, store):
    board = Dashboard(store)  # not shown yet, as at start-up
    qtbot.addWidget(board)
    board.resize(1000, 700)
    store.create_run("a", name=f"{SWEEP_NAME}: compile=off", hosts=["local"], config={"steps": 10}, state="running")
    put_spool(store, "a", "stdout.log", b"short line\n" * 30 + b"W1130 a warning of torch: " + b"y" * 400 + b"\n")
    board.set_run("a")  # read while the dashboard is not shown yet
    QApplication.processEvents()
    board.show()
    _settle(board)
    log = board.log
    assert log.horizontalScrollBar().maximum() > 0  # the long line is there, wider than the view
    assert log.horizontalScrollBar().value() == 0
    assert log.verticalScrollBar().value() >= log.verticalScrollBar().maximum() - 1  # down at the tail's end
