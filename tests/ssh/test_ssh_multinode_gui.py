"""A real 2-node run launched from the app: two loopback sshd, Ctrl-click both hosts, Launch, watch per node, Stop."""
import getpass
import sys

import pytest
from PySide6.QtCore import QSettings, Qt

from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import RunStore

pytestmark = pytest.mark.slow


@pytest.fixture
def window(qtbot, tmp_path, ssh_env):
    from ddpgui.ui.main_window import MainWindow

    hosts = ssh_env.store(tmp_path, *(
        ssh_env.profile("n0", user=getpass.getuser(), python=sys.executable, run_root=str(tmp_path / "n0")),
        ssh_env.profile("n1", port=ssh_env.jump.port, user=getpass.getuser(), python=sys.executable,
                        run_root=str(tmp_path / "n1"), nccl_env={"GLOO_SOCKET_IFNAME": "lo"})))
    store = RunStore(tmp_path / "runs.db")
    manager = RunManager(store, hosts, lambda name: ssh_env.target(tmp_path, hosts.get(name), store=hosts))
    win = MainWindow(store=store, hosts=hosts, manager=manager,
                     settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()
    store.close()


def test_launch_two_nodes_from_the_app_watch_each_node_and_stop(window, qtbot):
    from ddpgui.ui.widgets.runs_table import COLUMNS

    panel, launch, board = window.hosts_panel, window.launch_panel, window.dashboard
    for name, modifier in (("n0", Qt.KeyboardModifier.NoModifier), ("n1", Qt.KeyboardModifier.ControlModifier)):
        qtbot.mouseClick(panel.list.viewport(), Qt.MouseButton.LeftButton, modifier,
                         panel.list.visualItemRect(panel.item(name)).center())
    assert launch.nodes_label.text() == "2 nodes: n0 (node 0), n1"
    launch.apply_settings({"workload": "linear", "nproc_per_node": 2, "compile": "off", "precision": "fp32",
                           "batch_size": 8, "steps": 1_000_000})
    assert launch.launch_button.isEnabled(), launch.error.text()
    launch.launch_button.click()
    qtbot.waitUntil(lambda: board.run_id is not None or launch.error.isVisible(), timeout=180_000)
    assert not launch.error.isVisible(), launch.error.text()
    run_id = board.run_id
    record = window.store.get_run(run_id)
    assert record.hosts == ["n0", "n1"] and sorted(record.run_dirs) == [0, 1]
    model = window.runs_table.model
    assert model.data(model.index(model.row_of(run_id), COLUMNS.index("Host"))) == "n0 + n1"

    def points(key: str) -> int:
        x = board.device_plot.curve_data(key)[0] if key in board.device_plot.curves else None
        return 0 if x is None else len(x)

    # every node's telemetry streams in under its node, and both nodes are running
    qtbot.waitUntil(lambda: points(f"{run_id}:node0:cpu_pct") >= 2 and points(f"{run_id}:node1:cpu_pct") >= 2,
                    timeout=180_000)
    qtbot.waitUntil(lambda: board.nodes.text() == "node 0 (n0): running   ·   node 1 (n1): running", timeout=120_000)
    qtbot.waitUntil(lambda: board.live.step >= 3, timeout=120_000)
    board.stop_button.click()
    qtbot.waitUntil(lambda: model.runs[model.row_of(run_id)].state == "stopped", timeout=120_000)
    assert model.data(model.index(model.row_of(run_id), COLUMNS.index("State"))) == "stopped"
    qtbot.waitUntil(lambda: board.nodes.text() == "node 0 (n0): stopped   ·   node 1 (n1): stopped", timeout=30_000)
