"""Multi-node runs in the app: select several hosts, bounds per node, preflight errors inline, per-node display."""
import socket

import numpy as np
import pytest
from helpers.stored_runs import put_spool
from PySide6.QtCore import Qt

from ddpgui.core.hosts import LOCAL, HostProfile
from ddpgui.core.runs.manager import RunUpdate
from ddpgui.core.store import RunStore
from ddpgui.ui.widgets.dashboard import Dashboard
from ddpgui.ui.widgets.runs_table import COLUMNS, RunsModel

T0 = 1_764_500_000.0


def _cpu_probe(cores: int, torch: str = "2.5.1") -> dict:
    return {"schema": 1, "hostname": f"box{cores}", "cpu_count": cores, "best_device": "cpu", "gpus": [],
            "torch": {"version": torch, "gloo": True}, "precisions": {"fp32": None}}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _click(qtbot, panel, name: str, modifier=Qt.KeyboardModifier.NoModifier) -> None:
    """A real mouse click on a host's row (Ctrl adds to or removes from the selection)."""
    rect = panel.list.visualItemRect(panel.item(name))
    qtbot.mouseClick(panel.list.viewport(), Qt.MouseButton.LeftButton, modifier, rect.center())


def test_two_selected_hosts_make_a_two_node_launch_bounded_by_the_smaller(window, qtbot):
    window.hosts.add(HostProfile("box-b", hostname="127.0.0.1", port=_closed_port()))
    window.hosts_panel.reload(LOCAL)
    window.set_probe(LOCAL, _cpu_probe(6))
    window.set_probe("box-b", _cpu_probe(3))
    panel, launch = window.hosts_panel, window.launch_panel
    _click(qtbot, panel, LOCAL)
    assert launch.nodes == [LOCAL] and launch.nproc.maximum() == 6 and not launch.nodes_label.isVisible()

    _click(qtbot, panel, "box-b", Qt.KeyboardModifier.ControlModifier)
    assert panel.selected_nodes() == [LOCAL, "box-b"]
    assert launch.nodes == [LOCAL, "box-b"]
    assert launch.nodes_label.isVisible() and launch.nodes_label.text() == "2 nodes: This computer (node 0), box-b"
    assert launch.nproc.maximum() == 3 and "per node" in launch.nproc_label.text()
    launch.nproc.setValue(3)
    launch.batch.setValue(8)
    assert launch.global_batch.text() == "global batch 48"  # 8 x 3 processes x 2 nodes

    _click(qtbot, panel, LOCAL, Qt.KeyboardModifier.ControlModifier)  # deselect node 0: box-b alone is left
    assert panel.selected_nodes() == ["box-b"] and launch.nodes == ["box-b"]
    assert not launch.nodes_label.isVisible() and launch.nproc.maximum() == 3
    _click(qtbot, panel, LOCAL)  # a plain click: one host again
    assert launch.nodes == [LOCAL] and launch.nproc.maximum() == 6 and launch.title.text() == "Launch on This computer"
    panel.select_nodes(["box-b", LOCAL])  # as a rerun does: node 0 need not be first in the list
    assert launch.nodes == ["box-b", LOCAL] and panel.current() == "box-b"
    assert launch.nodes_label.text() == "2 nodes: box-b (node 0), This computer"


@pytest.mark.slow
def test_an_unreachable_node_is_named_inline_and_nothing_is_launched(window, qtbot):
    port = _closed_port()
    window.hosts.add(HostProfile("dead-box", hostname="127.0.0.1", port=port, auth="agent"))
    window.hosts_panel.reload(LOCAL)
    window.hosts_panel.select_nodes([LOCAL, "dead-box"])
    launch = window.launch_panel
    assert launch.nodes == [LOCAL, "dead-box"]
    launch.workload.setCurrentText("linear")
    launch.nproc.setValue(1)
    launch.length_unit.setCurrentText("steps")
    launch.length.setValue(5)
    seen = []
    launch.progress.valueChanged.connect(lambda _: seen.append(launch.progress.format()))
    launch._progress.connect(lambda done, total, text: seen.append(text))
    assert launch.launch_button.isEnabled(), launch.error.text()
    launch.launch_button.click()
    qtbot.waitUntil(lambda: launch.error.isVisible() and not launch.progress.isVisible(), timeout=120_000)
    error = launch.error.text()
    assert error.startswith("Launch failed: node 1 (dead-box) is not reachable"), error
    assert launch.hint.isVisible() and launch.hint.text().startswith("Hint: "), launch.hint.text()
    assert "connecting to node 1 (dead-box)…" in seen, seen
    assert window.store.list_runs() == [] and window.runs_table.model.rowCount() == 0
    assert launch.launch_button.isEnabled()


def _cpu(n, node, start=0):
    return [{"seq": i, "t": T0 + i, "kind": "cpu", "cpu_pct": 10.0 * (node + 1) + i, "proc_cpu_pct": 5.0 * (node + 1)}
            for i in range(start, n)]


def _two_node_run(store, run_id="mn"):
    store.create_run(run_id, name="two nodes", hosts=["node-a", "node-b"], config={"steps": 20, "nproc_per_node": 2,
                     "nnodes": 2}, state="running", run_dirs={0: "/r/a", 1: "/r/b"})
    for node in (0, 1):
        put_spool(store, run_id, "events.jsonl", [{"seq": 0, "t": T0, "event": "started"}], node=node)
        put_spool(store, run_id, "telemetry.jsonl", _cpu(10, node), node=node)
        put_spool(store, run_id, "stdout.log", f"hello from node {node}\n".encode(), node=node)
    put_spool(store, run_id, "metrics.jsonl", [{"seq": i, "t": T0 + i, "step": i + 1, "loss": 1.0 / (i + 1)}
                                             for i in range(10)])


def _two_node_board(qtbot, store):
    """A dashboard showing a stored two-node run, still running."""
    _two_node_run(store)
    board = Dashboard(store)
    qtbot.addWidget(board)
    board.show()
    board.set_run("mn")
    return board


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.db") as s:
        yield s


def test_per_node_telemetry_state_and_logs_on_the_dashboard(qtbot, store):
    board = _two_node_board(qtbot, store)
    board.smoothing.setValue(0)  # the raw samples (the slider smooths every series)
    board.redraw()
    for node in (0, 1):
        x, y = board.device_plot.curve_data(f"mn:node{node}:cpu_pct")
        np.testing.assert_allclose(y, 10.0 * (node + 1) + np.arange(10))
    legend = [item[1].text for item in board.device_plot.legend.items]
    assert "node 0 host CPU %" in legend and "node 1 host CPU %" in legend, legend
    # a live sample from node 1 goes to node 1's curve only
    board.on_update(RunUpdate("mn", node=1, records={"telemetry.jsonl": _cpu(11, 1, start=10)}))
    board.redraw()
    assert len(board.device_plot.curve_data("mn:node1:cpu_pct")[0]) == 11
    assert len(board.device_plot.curve_data("mn:node0:cpu_pct")[0]) == 10

    assert board.nodes.isVisible()
    assert board.nodes.text() == "node 0 (node-a): running   ·   node 1 (node-b): running"
    put_spool(store, "mn", "events.jsonl", [{"seq": 1, "t": T0 + 20, "event": "failed", "message": "Rank 2 was killed"}],
              node=1)
    run = store.update_run("mn", state="failed", message="node 1 (node-b) failed: Rank 2 was killed")
    board.on_update(RunUpdate("mn", node=1, run=run))
    board.redraw()
    assert board.nodes.text() == ("node 0 (node-a): running   ·   node 1 (node-b): failed — Rank 2 was killed")

    # the log tail shows node 0, and node 1 when chosen
    assert board.log_node.isVisible() and board.log_node.currentData() == 0
    assert "hello from node 0" in board.log.toPlainText() and "node 1" not in board.log.toPlainText()
    def live_line(text):  # as the follower does: stored first, then announced
        put_spool(store, "mn", "stdout.log", text, node=1)
        board.on_update(RunUpdate("mn", node=1, logs={"stdout.log": text}))

    live_line(b"first live line from node 1\n")
    assert "live line" not in board.log.toPlainText()
    board.log_node.setCurrentIndex(1)
    qtbot.waitUntil(lambda: "hello from node 1" in board.log.toPlainText(), timeout=5_000)
    live_line(b"second live line from node 1\n")
    assert board.log.toPlainText().splitlines() == ["hello from node 1", "first live line from node 1",
                                                    "second live line from node 1"]


def test_the_runs_table_shows_every_node_and_the_run_state(store):
    _two_node_run(store)
    store.update_run("mn", state="failed")
    model = RunsModel(store, prices={"node-a": 2.0, "node-b": 3.0})
    model.reload()
    row = model.row_of("mn")
    cell = lambda column: model.data(model.index(row, COLUMNS.index(column)))  # noqa: E731
    assert cell("Host") == "node-a + node-b"
    assert cell("State") == "failed"
    assert cell("Processes") == "4"


def test_gpu_curves_are_named_by_node(qtbot, store):
    store.create_run("g", name="gpus", hosts=["node-a", "node-b"], state="running", run_dirs={0: "/a", 1: "/b"})
    for node in (0, 1):
        put_spool(store, "g", "telemetry.jsonl", [
            {"seq": i, "t": T0 + i // 2, "kind": "gpu", "gpu": i % 2, "name": f"GPU model {node}",
             "util_pct": 50.0 + node, "mem_used_gib": 1.0, "power_w": 100.0, "temp_c": 50.0} for i in range(8)], node=node)
    board = Dashboard(store)
    qtbot.addWidget(board)
    board.set_run("g")
    board.redraw()
    assert board.device_metric.currentText() == "GPU utilization %"
    assert {"g:node0:gpu0", "g:node0:gpu1", "g:node1:gpu0", "g:node1:gpu1"} == set(board.device_plot.curves)
    np.testing.assert_allclose(board.device_plot.curve_data("g:node1:gpu1")[1], [51.0] * 4)
    legend = [item[1].text for item in board.device_plot.legend.items]
    assert legend == ["node 0 GPU 0 GPU model 0", "node 0 GPU 1 GPU model 0", "node 1 GPU 0 GPU model 1",
                      "node 1 GPU 1 GPU model 1"]


def test_a_node_that_ends_after_the_run_is_shown_without_another_update(qtbot, store):
    board = _two_node_board(qtbot, store)
    put_spool(store, "mn", "events.jsonl", [{"seq": 1, "t": T0 + 20, "event": "stopped"}], node=1)
    run = store.update_run("mn", state="stopped")  # the run ended while node 0's own end is not stored yet
    board.on_update(RunUpdate("mn", node=1, run=run))
    board.redraw()
    assert board.nodes.text() == "node 0 (node-a): running   ·   node 1 (node-b): stopped"
    store.add_client_event("mn", 0, {"event": "stopped", "t": T0 + 21})  # what the manager keeps when it ends
    qtbot.waitUntil(lambda: (board.redraw(), board.nodes.text())[1] ==
                    "node 0 (node-a): stopped   ·   node 1 (node-b): stopped", timeout=5_000)
