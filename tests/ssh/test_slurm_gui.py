"""The app on a real Slurm cluster (issue 13): add the cluster, test it, launch 2 nodes, watch points arrive, stop.

The cluster is the local two-node Slurm of tests/helpers/slurm_cluster.py; its login node a loopback sshd
(``slurm_login``).  The main window uses the app's own target factory (SlurmTarget over SSH); only the
watcher's poll intervals are shortened, as in tests/ssh/test_slurm_runs.py.
"""
import pytest
from helpers.spools import wait_for
from PySide6.QtCore import QSettings

from ddpgui.core.hosts import HostProfile, HostStore
from ddpgui.core.hosts.slurm_options import SlurmOptions
from ddpgui.core.runs.nodes import node_states
from ddpgui.core.store import RunStore
from ddpgui.ui.widgets.runs_table import COLUMNS

pytestmark = pytest.mark.slow


@pytest.fixture
def window(qtbot, tmp_path, slurm_login, slurm):
    from ddpgui.ui.main_window import MainWindow

    store = RunStore(tmp_path / "runs.db")
    win = MainWindow(store=store, hosts=HostStore(tmp_path / "hosts.json"),
                     settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat),
                     known_hosts=slurm_login.known_hosts(tmp_path))
    win.manager.slurm.poll_s = win.manager.slurm.running_poll_s = 2.0  # the suite waits less; the app keeps 10/30 s
    win.manager.slurm.end_grace_s = 5.0
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()
    store.close()


def test_add_the_cluster_launch_two_nodes_watch_points_arrive_and_stop(window, qtbot, slurm_login, slurm, tmp_path):
    panel, launch, board, model = window.hosts_panel, window.launch_panel, window.dashboard, window.runs_table.model
    window.hosts.add(HostProfile(name="cluster", kind="slurm", slurm=SlurmOptions(partition="debug", time_limit="30"),
                                 **slurm_login.profile_fields(tmp_path)))
    panel.reload("cluster")
    assert panel.current() == "cluster" and launch.title.text() == "Launch on cluster cluster (Slurm)"

    panel.buttons["test"].click()  # the probe reads the partitions with sinfo on the login node
    qtbot.waitUntil(lambda: panel.status.get("cluster") in ("reachable", "error"), timeout=120_000)
    assert panel.status["cluster"] == "reachable", panel.item("cluster").toolTip()
    assert launch.limits.text() == ("partition debug: 2 nodes (2 free), 2 CPUs/node, no GPUs, time limit unlimited; "
                                    "this profile asks for 0:30:00")
    assert launch.nnodes.maximum() == 2 and launch.nproc.maximum() == 2

    launch.apply_settings({"workload": "linear", "nproc_per_node": 1, "nnodes": 2, "compile": "off",
                           "precision": "fp32", "batch_size": 8, "steps": 1_000_000})
    assert launch.world.text() == "2 nodes × 1 process per node = world 2"
    assert launch.settings()["nnodes"] == 2
    assert launch.launch_button.isEnabled(), launch.error.text()
    launch.launch_button.click()
    qtbot.waitUntil(lambda: board.run_id is not None or launch.error.isVisible(), timeout=180_000)
    assert not launch.error.isVisible(), launch.error.text()
    run_id = board.run_id
    record = window.store.get_run(run_id)
    assert record.hosts == ["cluster", "cluster"] and sorted(record.run_dirs) == [0, 1]
    job = record.environment["slurm"]["job_id"]
    assert any(j["id"] == job for j in slurm.jobs())  # one sbatch job for the run
    row = model.row_of(run_id)
    assert row >= 0 and model.data(model.index(row, COLUMNS.index("Host"))) == "cluster (2 nodes)"

    def points() -> int:
        x, _ = board.loss_plot.curve_data(f"{run_id}:ema")
        return 0 if x is None else len(x)

    qtbot.waitUntil(lambda: points() >= 5, timeout=240_000)
    qtbot.waitUntil(lambda: model.runs[model.row_of(run_id)].state == "running", timeout=60_000)
    assert board.stats.text().startswith("step ")
    qtbot.waitUntil(lambda: "node 0 (n1 of cluster): running" in board.nodes.text()
                    and "node 1 (n2 of cluster): running" in board.nodes.text(), timeout=60_000)
    assert board.nodes.text().startswith(f"Slurm job {job}")
    assert window.store.get_run(run_id).environment["slurm"]["nodes"] == "n[1-2]"

    board.stop_button.click()  # Stop asks no question: the run's data stays
    qtbot.waitUntil(lambda: model.runs[model.row_of(run_id)].state not in ("queued", "starting", "running"),
                    timeout=240_000)
    final = window.store.get_run(run_id)
    assert final.state == "stopped" and final.failure is None, (final.message, final.hint)
    assert model.data(model.index(model.row_of(run_id), COLUMNS.index("State"))) == "stopped"
    assert [s.state for s in node_states(window.store, final)] == ["stopped", "stopped"]
    assert wait_for(lambda: not slurm.jobs(), 60), slurm.jobs()
    assert wait_for(lambda: not slurm.job_processes(), 30), slurm.job_processes()
