"""One elapsed time everywhere (the run's own start to its end, run_elapsed_s): the dashboard header live and
re-selected, the runs table's Duration and the CLI's summary; a stopped run's throughput and peak memory in the
runs table as its header shows them."""
import re

import pytest
from helpers.stored_runs import put_spool

from ddpgui.core.runs.live import format_duration, format_rate, run_elapsed_s, run_summary, summary_lines
from ddpgui.core.runs.manager import RunUpdate
from ddpgui.core.store import RunStore
from ddpgui.ui.widgets.dashboard import Dashboard
from ddpgui.ui.widgets.runs_table import COLUMNS, RunsModel

T0 = 1_764_500_000.0


def _elapsed(header: str) -> str:
    found = re.search(r"elapsed (\S+)", header)
    assert found, header
    return found.group(1)


def _cell(model: RunsModel, run_id: str, column: str) -> str:
    return model.data(model.index(model.row_of(run_id), COLUMNS.index(column)))


def _reselect(board: Dashboard, qtbot, run_id: str) -> None:
    """Select nothing, then the run again: the dashboard reads it from the store anew."""
    board.set_runs([])
    board.set_run(run_id)
    qtbot.waitUntil(lambda: board.traces[run_id].loaded, timeout=30_000)
    board.redraw()


def test_run_elapsed_is_wall_time_from_start_to_end_or_now():
    assert run_elapsed_s(None, None) is None
    assert run_elapsed_s(100.0, 149.4) == pytest.approx(49.4)
    assert run_elapsed_s(100.0, None, now=112.0) == pytest.approx(12.0)
    assert run_elapsed_s(100.0, 99.0) == 0.0  # clocks that disagree never give a negative time


def test_a_recorded_run_has_one_elapsed_time_live_reselected_in_the_table_and_the_cli(qtbot, tmp_path):
    """Start-up (3 s before the first metric) and shutdown (2 s after the last) are in it everywhere: the
    header used to count first to last metric (00:13 for a run of 00:18), the table start to end."""
    with RunStore(tmp_path / "runs.db") as store:
        store.create_run("r", name="recorded", hosts=["local"], config={"steps": 20}, state="starting")
        record = store.update_run("r", started_at=T0)
        board = Dashboard(store)
        qtbot.addWidget(board)
        board.resize(1000, 700)
        board.show()
        board.set_run("r")
        qtbot.waitUntil(lambda: board.traces["r"].loaded, timeout=30_000)
        # live: the records arrive as the follower stores them
        events = [{"seq": 0, "t": T0 + 0.2, "event": "started"}, {"seq": 1, "t": T0 + 3.0, "event": "train_start"}]
        metrics = [{"seq": i, "t": T0 + 3.0 + 0.5 * (i + 1), "step": i + 1, "loss": 1.0 / (i + 1),
                    "samples_per_s": 100.0 + i, "mem_peak_gib": 0.5, "warmup": i < 2} for i in range(26)]
        put_spool(store, "r", "events.jsonl", events)
        put_spool(store, "r", "metrics.jsonl", metrics)
        record = store.update_run("r", state="running")
        board.on_update(RunUpdate("r", 0, records={"events.jsonl": events, "metrics.jsonl": metrics}, run=record))
        board.redraw()
        assert board.live.elapsed_s > 100  # running: since its start until now (T0 is long past)
        end = [{"seq": 2, "t": T0 + 18.0, "event": "stopped"}]
        put_spool(store, "r", "events.jsonl", end)
        record = store.update_run("r", state="stopped", ended_at=T0 + 18.0)
        board.on_update(RunUpdate("r", 0, records={"events.jsonl": end}, run=record))
        board.redraw()
        live = _elapsed(board.stats.text())
        _reselect(board, qtbot, "r")
        reselected = _elapsed(board.stats.text())
        model = RunsModel(store)
        model.reload()
        table = _cell(model, "r", "Duration")
        cli = summary_lines(run_summary(store, "r"))[0]
        assert (live, reselected, table) == ("00:18", "00:18", "00:18"), board.stats.text()
        assert cli.startswith("run stopped after 00:18:"), cli



@pytest.mark.slow
def test_a_stopped_run_shows_the_same_elapsed_throughput_and_peak_memory_everywhere(window, qtbot):
    """A real 1-process CPU run on This computer, stopped: it has no summary event, the table used to show no
    throughput or peak memory; its elapsed time disagreed between the header, re-selected, and the table."""
    panel = window.launch_panel
    panel.workload.setCurrentText("mlp")
    panel.nproc.setValue(1)
    panel.compile.setCurrentText("off")
    panel.precision.setCurrentText("fp32")
    panel.batch.setValue(8)
    panel.length_unit.setCurrentText("steps")
    panel.length.setValue(1_000_000)
    assert panel.launch_button.isEnabled(), panel.error.text()
    panel.launch_button.click()
    board = window.dashboard
    qtbot.waitUntil(lambda: board.run_id is not None, timeout=120_000)
    run_id = board.run_id
    qtbot.waitUntil(lambda: len(board.traces[run_id].live.steady) >= 3, timeout=180_000)  # past warm-up
    board.stop_button.click()
    model = window.runs_table.model
    qtbot.waitUntil(lambda: model.runs[model.row_of(run_id)].state == "stopped", timeout=120_000)
    qtbot.waitUntil(lambda: board.live.state == "stopped", timeout=30_000)
    board.redraw()
    record = window.store.get_run(run_id)
    assert record.summary.get("source") == "records", record.summary  # the runner's summary event never came
    header = board.stats.text()
    live_elapsed = board.live.elapsed_s
    # the live header's end is the final event's time until the dashboard is given the record's end: the same
    # moment (the supervisor takes both at once), and the same text
    assert live_elapsed == pytest.approx(record.ended_at - record.started_at, abs=0.05)
    assert _elapsed(header) == format_duration(live_elapsed)
    _reselect(board, qtbot, run_id)
    reselected = board.stats.text()
    table = {c: _cell(model, run_id, c) for c in ("Duration", "Throughput", "Peak mem")}
    assert _elapsed(reselected) == table["Duration"] == format_duration(record.ended_at - record.started_at)
    assert summary_lines(run_summary(window.store, run_id))[0].startswith(f"run stopped after {table['Duration']}:")
    rate = format_rate(record.summary["steady_samples_per_s"], "samples/s")
    peak = f"{record.summary['mem_peak_gib']:.2f} GiB"
    assert table["Throughput"] == rate and table["Peak mem"] == peak, table
    view, metrics = window.runs_table.view, window.runs_table.view.fontMetrics()
    for column, text in table.items():  # filled in at the run's end, its column widened to show it whole
        assert view.columnWidth(COLUMNS.index(column)) >= metrics.horizontalAdvance(text), column
    for text in (header, reselected):  # the header's numbers are the table's
        assert rate in text and f"peak mem {peak}" in text, text
