"""Open logs: the full stdout and stderr of each node in a viewer with search, following a live run."""
import pytest
from helpers.stored_runs import put_spool
from PySide6.QtCore import Qt

from ddpgui.core.runs.manager import RunUpdate
from ddpgui.core.store import RunStore
from ddpgui.ui.dialogs.log_viewer import HIGHLIGHT_MAX, MAX_CHARS, LogViewer, kept
from ddpgui.ui.workers import WorkerPool

T0 = 1_764_500_000.0
STDERR_0 = (b"==> ddpgui: starting torchrun (rendezvous port 29500)\n"
            b"W1201 torch/distributed/run.py] Setting OMP_NUM_THREADS\n"
            b"rank 1: ValueError: injected failure\n"
            b"an Error of another case\n"
            b"the last ERROR line\n")


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.db") as s:
        yield s


def _two_nodes(store, run_id="mn"):
    store.create_run(run_id, name="two nodes", hosts=["node-a", "node-b"], config={"nnodes": 2, "nproc_per_node": 1},
                     state="running", run_dirs={0: "/r/a", 1: "/r/b"})
    for node in (0, 1):
        put_spool(store, run_id, "events.jsonl", [{"seq": 0, "t": T0, "event": "started"}], node=node)
        put_spool(store, run_id, "stdout.log", f"print from node {node}\n".encode(), node=node)
    put_spool(store, run_id, "stderr.log", STDERR_0, node=0)
    put_spool(store, run_id, "stderr.log", b"node 1 warning\n", node=1)


@pytest.fixture
def viewer(qtbot, store):
    _two_nodes(store)
    pool = WorkerPool(2)
    dialog = LogViewer(store, "mn", read=pool.start)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.node_box.count() == 2 and "injected failure" in dialog.text.toPlainText(),
                    timeout=10_000)
    yield dialog
    pool.shutdown()


def test_each_nodes_stdout_and_stderr_by_node_and_stream(viewer, qtbot):
    assert viewer.windowTitle() == "Logs of two nodes"
    assert [viewer.node_box.itemText(i) for i in range(2)] == ["node 0 (node-a)", "node 1 (node-b)"]
    assert viewer.node_box.isEnabled() and viewer.stream_box.currentText() == "stderr"
    assert viewer.text.toPlainText() == STDERR_0.decode().removesuffix("\n")
    viewer.stream_box.setCurrentText("stdout")
    assert viewer.text.toPlainText() == "print from node 0"
    viewer.node_box.setCurrentIndex(1)  # read off the GUI thread
    qtbot.waitUntil(lambda: viewer.text.toPlainText() == "print from node 1", timeout=10_000)
    viewer.stream_box.setCurrentText("stderr")
    assert viewer.text.toPlainText() == "node 1 warning"


def test_search_finds_next_and_previous_round_the_end_with_or_without_case(viewer, qtbot):
    viewer.search.setText("error")
    qtbot.waitUntil(lambda: viewer.matches.text() == "3 matches", timeout=5_000)  # highlighted once typing pauses
    assert len(viewer.text.extraSelections()) == 3
    lines = []
    for _ in range(4):
        assert viewer.find_next()
        lines.append((viewer.matches.text(), viewer.text.textCursor().block().text()))
    assert lines == [("1 of 3", "rank 1: ValueError: injected failure"), ("2 of 3", "an Error of another case"),
                     ("3 of 3", "the last ERROR line"), ("1 of 3", "rank 1: ValueError: injected failure")]
    assert viewer.find_previous() and viewer.matches.text() == "3 of 3"  # round from the top to the end
    assert viewer.find_previous() and viewer.matches.text() == "2 of 3"
    qtbot.keyClick(viewer.search, Qt.Key.Key_Return)  # Enter: the next one (and nothing else)
    assert viewer.matches.text() == "3 of 3"
    qtbot.keyClick(viewer.search, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert viewer.matches.text() == "2 of 3"
    qtbot.keyClick(viewer.text, Qt.Key.Key_F3)
    assert viewer.matches.text() == "3 of 3"
    assert not viewer.follow.isChecked()  # reading a place: new lines must not scroll it away
    viewer.case.setChecked(True)
    assert viewer.match_count() == 0 and viewer.matches.text() == "no match"
    viewer.search.setText("Error")
    viewer.highlight()
    assert viewer.match_count() == 2 and len(viewer.text.extraSelections()) == 2
    assert viewer.find_next() and viewer.text.textCursor().selectedText() == "Error"
    viewer.search.setText("no such words")
    viewer.highlight()
    assert viewer.matches.text() == "no match" and not viewer.find_next() and viewer.text.extraSelections() == []


def test_it_follows_the_live_run_per_node_and_stream(viewer):
    viewer.follow.setChecked(True)
    for i in range(200):
        viewer.on_update(RunUpdate("mn", 0, logs={"stderr.log": f"live line {i}\n".encode()}))
    assert viewer.text.toPlainText().splitlines()[-1] == "live line 199"
    bar = viewer.text.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()  # the newest lines in view
    viewer.on_update(RunUpdate("mn", 0, logs={"stdout.log": b"a live print\n"}))  # another stream: kept, not shown
    viewer.on_update(RunUpdate("other", 0, logs={"stderr.log": b"another run\n"}))
    assert "a live print" not in viewer.text.toPlainText() and "another run" not in viewer.text.toPlainText()
    viewer.stream_box.setCurrentText("stdout")
    assert viewer.text.toPlainText().splitlines() == ["print from node 0", "a live print"]


def test_a_large_log_keeps_the_newest_mib_from_a_lines_start(viewer):
    line = "x" * 99 + "\n"
    chunk = (line * 1000).encode()  # 100 kB a chunk, 4 MB in all
    for i in range(40):
        viewer.on_update(RunUpdate("mn", 0, logs={"stderr.log": chunk + f"chunk {i} done\n".encode()}))
    text = viewer.texts[0, "stderr.log"]
    assert len(text) <= MAX_CHARS * 5 // 4 and text.startswith("x" * 99) and text.endswith("chunk 39 done\n")
    shown = viewer.text.toPlainText()
    assert len(shown) <= MAX_CHARS * 5 // 4 and shown.endswith("chunk 39 done")
    viewer.search.setText("x")
    viewer.highlight()  # far more matches than are highlighted: all are counted
    assert len(viewer.text.extraSelections()) == HIGHLIGHT_MAX and viewer.match_count() > HIGHLIGHT_MAX * 100
    assert kept("a\nb\nc\n", 3) == "c\n" and kept("abc", 5) == "abc"


def test_a_run_without_stderr_opens_on_stdout(qtbot, store):
    store.create_run("s", name="script", hosts=["local"], config={}, state="finished", run_dirs={0: "/r/s"})
    put_spool(store, "s", "stdout.log", b"step 1 loss 0.5\n")
    dialog = LogViewer(store, "s")
    qtbot.addWidget(dialog)
    assert dialog.stream_box.currentText() == "stdout" and dialog.text.toPlainText() == "step 1 loss 0.5"
    assert dialog.node_box.itemText(0) == "node 0 (This computer)" and not dialog.node_box.isEnabled()


def test_open_logs_in_the_runs_table_opens_the_viewer_that_follows_the_run(window, qtbot):
    _two_nodes(window.store)
    window.run_action("logs", ["mn"])
    viewers = window.dashboard.viewers
    assert len(viewers) == 1 and viewers[0].isVisible() and not viewers[0].isModal()
    viewer = viewers[0]
    qtbot.waitUntil(lambda: "injected failure" in viewer.text.toPlainText(), timeout=10_000)
    window.dashboard.on_update(RunUpdate("mn", 0, logs={"stderr.log": b"a line from the follower\n"}))
    assert viewer.text.toPlainText().endswith("a line from the follower")
    viewer.close()
    assert window.dashboard.viewers == []
