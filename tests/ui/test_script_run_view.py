"""A real script-mode run (the nanoGPT-style fixture script, 2 gloo processes) on the dashboard and in the runs
table: steps and rate, no total or ETA from the built-in default length, no workload settings it never had."""
import os

import pytest

from ddpgui.core.hosts import HostStore
from ddpgui.core.manager import RunManager
from ddpgui.core.store import RunStore
from ddpgui.core.targets.factory import open_target
from ddpgui.ui.widgets.dashboard import Dashboard
from ddpgui.ui.widgets.runs_table import COLUMNS, RunsModel

pytestmark = pytest.mark.slow

GPTLIKE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "scripts", "gptlike")


@pytest.fixture
def script_run(tmp_path):
    hosts = HostStore(tmp_path / "hosts.json")
    store = RunStore(tmp_path / "runs.db")
    manager = RunManager(store, hosts, lambda name: open_target(name, hosts))
    record = manager.launch("local", {"mode": "script", "nproc_per_node": 2,
                                      "script": {"dir": GPTLIKE, "entry": "train.py", "args": ["--max_iters=8"]}})
    final = manager.wait(record.id, timeout=300)
    manager.close()
    assert final.state == "finished", (final.message, final.hint)
    yield store, final
    store.close()


def test_the_header_and_the_table_of_a_script_run(qtbot, script_run):
    store, run = script_run
    board = Dashboard(store)
    qtbot.addWidget(board)
    board.show()
    board.set_run(run.id)
    qtbot.waitUntil(lambda: board.stats.text().startswith("step 8"), timeout=10_000)
    board.redraw()
    stats = board.stats.text()
    assert stats.startswith("step 8   ·   loss "), stats
    assert "ETA" not in stats and "/200" not in stats and "samples/s" not in stats, stats
    assert "steps/s" in stats and "elapsed" in stats, stats
    model = RunsModel(store)
    model.reload()
    cell = lambda column: model.data(model.index(model.row_of(run.id), COLUMNS.index(column)))  # noqa: E731
    assert (cell("Workload"), cell("Step"), cell("GPUs")) == ("train.py", "8", "2")
    assert cell("Compile") == "" and cell("Precision") == ""
    assert run.name == "train.py 2x"
