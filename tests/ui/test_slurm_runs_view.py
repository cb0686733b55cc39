"""A Slurm run in the runs table and on the dashboard: queued with its reason, then live with its Slurm nodes.

The records are stored as SlurmRuns stores them (state ``queued``, ``environment["slurm"]``, the message from
pending_text of the real squeue output tests/fixtures/slurm/squeue_pending_and_running.txt), and the nodes'
``placed`` events as remote_runner.slurm writes them.
"""
import pytest
from helpers.stored_runs import put_spool

from ddpgui.core.runs.manager import RunUpdate
from ddpgui.core.store import RunStore
from ddpgui.ui.widgets.dashboard import Dashboard
from ddpgui.ui.widgets.runs_table import COLUMNS, RunsModel, RunsTable

T0 = 1_764_500_000.0
QUEUED = "queued in Slurm (job 12): Priority, other jobs are ahead of it in the queue"


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.db") as s:
        yield s


def _queued_run(store, run_id="sl", nnodes=2):
    store.create_run(run_id, name="on the cluster", hosts=["hpc"] * nnodes,
                     config={"steps": 50, "nproc_per_node": 1, "nnodes": nnodes, "scheduler": "slurm"},
                     state="queued", run_dirs={n: f"/shared/{run_id}/node{n}" for n in range(nnodes)},
                     environment={"slurm": {"job_id": "12", "state": "PENDING", "reason": "Priority", "nodes": "",
                                            "partition": "debug"}})
    return store.update_run(run_id, message=QUEUED, hint="")


def _start(store, run_id="sl", nnodes=2):
    """What the job's nodes write once Slurm starts it, and the run as the watcher then stores it."""
    for node in range(nnodes):
        put_spool(store, run_id, "events.jsonl", [
            {"seq": 0, "t": T0, "event": "placed", "node": f"n{node + 1}", "job": "12",
             "message": f"node {node} runs on Slurm node n{node + 1} (job 12)"},
            {"seq": 1, "t": T0 + 1, "event": "started"}, {"seq": 2, "t": T0 + 2, "event": "train_start",
                                                           "world_size": 2}], node=node)
    put_spool(store, run_id, "metrics.jsonl", [{"seq": i, "t": T0 + 3 + i, "step": i + 1, "loss": 1.0 / (i + 1),
                                                "samples_per_s": 100.0} for i in range(5)])
    record = store.get_run(run_id)
    return store.update_run(run_id, state="running", message="", started_at=T0,
                            environment=dict(record.environment, slurm=dict(record.environment["slurm"],
                                                                            state="RUNNING", reason="",
                                                                            nodes="n[1-2]")))


def test_a_queued_run_shows_its_reason_in_the_runs_table_and_can_be_filtered(qtbot, store):
    _queued_run(store)
    store.create_run("other", name="ssh run", hosts=["box"], config={"nproc_per_node": 2}, state="running")
    table = RunsTable(store)
    qtbot.addWidget(table)
    model = table.model
    row = model.row_of("sl")
    cell = lambda column: model.data(model.index(row, COLUMNS.index(column)))  # noqa: E731
    assert cell("State") == "queued: Priority"
    assert cell("Host") == "hpc (2 nodes)" and cell("Processes") == "2"
    assert QUEUED in model.data(model.index(row, COLUMNS.index("State")), 3)  # ToolTipRole: the whole reason
    assert [table.state.itemText(i) for i in range(table.state.count())][:2] == ["all states", "queued"]
    table.state.setCurrentText("queued")
    assert table.proxy.rowCount() == 1
    assert table.proxy.data(table.proxy.index(0, COLUMNS.index("Name"))) == "on the cluster"
    _start(store)
    model.update_run(store.get_run("sl"))
    assert cell("State") == "running" and table.proxy.rowCount() == 0  # no longer queued
    table.state.setCurrentText("running")
    assert table.proxy.rowCount() == 2


def test_runs_table_names_a_one_node_cluster_run_by_its_cluster(store):
    _queued_run(store, "one", nnodes=1)
    model = RunsModel(store)
    model.reload()
    assert model.data(model.index(model.row_of("one"), COLUMNS.index("Host"))) == "hpc"


def test_the_dashboard_header_shows_the_queue_then_the_live_run_with_slurm_node_names(qtbot, store):
    _queued_run(store)
    board = Dashboard(store)
    qtbot.addWidget(board)
    board.show()
    board.set_run("sl")
    board.redraw()
    assert board.state.text() == "queued"
    assert board.stats.text() == "queued in Slurm (job 12) · Priority, other jobs are ahead of it in the queue"
    assert "step" not in board.stats.text() and "ETA" not in board.stats.text()
    assert board.nodes.isVisible()
    assert board.nodes.text() == "Slurm job 12:   node 0 (hpc): queued   ·   node 1 (hpc): queued"
    assert board.log_node.itemText(1) == "log of node 1 (hpc)"
    assert board.stop_button.isEnabled()  # a queued job can be cancelled

    held = store.update_run("sl", message="queued in Slurm (job 12): JobHeldUser, held by you",
                            hint="release it with scontrol release JOB")
    board.on_update(RunUpdate("sl", run=held))
    board.redraw()
    assert board.stats.text() == "queued in Slurm (job 12) · JobHeldUser, held by you"
    assert board.advice.isVisible() and board.advice.text() == "Hint: release it with scontrol release JOB"

    running = _start(store)
    board.on_update(RunUpdate("sl", node=0, records={"events.jsonl": store.events("sl", 0)}, run=running))
    expected = "Slurm job 12 on n[1-2]:   node 0 (n1 of hpc): running   ·   node 1 (n2 of hpc): running"
    qtbot.waitUntil(lambda: (board.redraw(), board.nodes.text())[1] == expected, timeout=5_000)
    assert [board.log_node.itemText(i) for i in range(board.log_node.count())] == [
        "log of node 0 (n1 of hpc)", "log of node 1 (n2 of hpc)"]  # renamed once the job placed its nodes
    assert board.state.text() == "running"
    assert board.stats.text().startswith("step ") and "queued" not in board.stats.text()
    assert not board.advice.isVisible()
