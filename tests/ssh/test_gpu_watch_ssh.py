"""The window's GPU sampling of an SSH host over the real loopback sshd (tests/ssh/conftest.py), on this CPU host:
the host's badge comes only once the user connected it (Test connection), never by itself; its sampler runs on
the host's own connection and ends with the window; a host gone silent never stops the window's event loop; an SSH
host's GPUs are sampled only while something looks at them (issue 24: a sampler ran 9½ minutes on a host nobody
looked at): the GPUs tab shown, a live run of the host on the dashboard, the host selected."""
import getpass
import os
import signal
import sys
import time

import pytest
from helpers.sampler_processes import samplers
from helpers.stored_runs import store_run
from PySide6.QtCore import QSettings, QTimer

from ddpgui.core.hosts import LOCAL
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import RunStore
from ddpgui.core.targets.factory import open_target

pytestmark = pytest.mark.slow
WAIT_MS = 180_000  # the machine is shared and slow: generous
INTERVAL_S, GRACE_S = 0.5, 1.0


@pytest.fixture
def window(qtbot, tmp_path, ssh_env):
    from ddpgui.ui.main_window import MainWindow

    hosts = ssh_env.store(tmp_path, ssh_env.profile("box", user=getpass.getuser(), python=sys.executable,
                                                    run_root=str(tmp_path / "box root")))
    store = RunStore(tmp_path / "runs.db")
    manager = RunManager(store, hosts, lambda name: open_target(name, hosts) if name == "local"
                         else ssh_env.target(tmp_path, hosts.get(name), store=hosts))
    win = MainWindow(store=store, hosts=hosts, manager=manager,
                     settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()
    store.close()


def _snapshots(window, host):
    seen = []
    window.gpu_watch.snapshot.connect(lambda name, snapshot: name == host and seen.append(snapshot))
    return seen


def test_the_badge_comes_only_once_the_host_is_connected(window, qtbot, tmp_path):
    box_root = str(tmp_path / "box root")
    seen, local = _snapshots(window, "box"), _snapshots(window, "local")
    pool = window.manager.targets
    window.start_gpu_watch(interval_s=INTERVAL_S, grace_s=GRACE_S)
    qtbot.waitUntil(lambda: len(local) >= 3, timeout=WAIT_MS)  # sampling runs, seconds pass
    assert seen == [] and "box" not in window.gpu_watch.sampled()
    assert "box" not in pool._targets and not pool.connected("box")  # looking opened no connection
    assert "box" not in window.hosts_panel.gpu_summaries and not samplers(box_root)

    window.hosts_panel.select("box")
    window.hosts_panel.buttons["test"].click()  # the user connects
    qtbot.waitUntil(lambda: window.hosts_panel.status.get("box") in ("reachable", "error"), timeout=WAIT_MS)
    assert window.hosts_panel.status["box"] == "reachable", window.hosts_panel.details.get("box")
    qtbot.waitUntil(lambda: len(seen) >= 2, timeout=WAIT_MS)
    assert seen[-1].gpus == () and seen[-1].cpu.cpu_count == os.cpu_count()
    assert window.hosts_panel.gpu_summaries["box"] == ("", "GPUs: none on this host")
    assert "GPUs: none on this host" in window.hosts_panel.item("box").toolTip()
    pids = samplers(box_root)
    assert len(pids) == 1  # one sampler on the host, over the host's one connection
    window.close()
    qtbot.waitUntil(lambda: not samplers(box_root), timeout=WAIT_MS)  # nothing left on the host


def test_a_host_gone_silent_never_stops_the_event_loop(window, qtbot, tmp_path, ssh_env):
    box_root = str(tmp_path / "box root")
    seen = _snapshots(window, "box")
    window.start_gpu_watch(interval_s=INTERVAL_S, grace_s=GRACE_S)
    window.hosts_panel.select("box")  # looked at (an SSH host nobody looks at is not sampled)
    window.test_connection("box")
    qtbot.waitUntil(lambda: len(seen) >= 2, timeout=WAIT_MS)
    frozen = ssh_env.server.freeze_connections()  # the link stays open and says nothing, like a dead route
    assert frozen
    try:
        ticks = []
        timer = QTimer(interval=10)
        timer.timeout.connect(lambda: ticks.append(time.monotonic()))
        timer.start()
        watch = window.gpu_watch
        watch.watch("gpus_tab", ["box"])
        window.showMinimized()  # released: its idle stop runs on a timer thread into the silent link
        qtbot.waitUntil(lambda: watch.paused, timeout=WAIT_MS)
        qtbot.wait(int((GRACE_S + 2 * INTERVAL_S) * 1000) + 1000)
        window.showNormal()  # looked at again while the host is still silent
        qtbot.waitUntil(lambda: not watch.paused, timeout=WAIT_MS)
        watch.watch("gpus_tab", [])
        window.gpu.refresh()
        qtbot.wait(2000)
        timer.stop()
        gaps = [b - a for a, b in zip(ticks, ticks[1:])]
        assert len(ticks) > 100
        # a call into the frozen link on the GUI thread would hold it for the link's timeouts (5 s and more); a
        # busy 2-core machine alone pauses it for a fraction of a second at most
        assert max(gaps) < 2.0, f"the event loop stalled for {max(gaps):.3f} s"
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    window.close()
    qtbot.waitUntil(lambda: not samplers(box_root), timeout=WAIT_MS)


def test_an_ssh_host_is_sampled_only_while_something_looks_at_it(window, qtbot, tmp_path):
    box_root = str(tmp_path / "box root")
    watch, panel, tab = window.gpu_watch, window.hosts_panel, window.gpus_tab
    window.start_gpu_watch(interval_s=INTERVAL_S, grace_s=GRACE_S)
    assert panel.current() == LOCAL
    window.test_connection("box")  # connected (as a launch or a reattach connects), but not looked at
    qtbot.waitUntil(lambda: panel.status.get("box") in ("reachable", "error"), timeout=WAIT_MS)
    assert panel.status["box"] == "reachable", panel.details.get("box")
    assert window.manager.targets.connected("box")
    window.gpu.refresh()  # what the window's timer does every few seconds
    assert "box" not in watch.watched() and "box" not in watch.sampled()
    assert not samplers(box_root) and "box" not in panel.gpu_summaries

    window.tabs.setCurrentWidget(tab)  # the GPUs tab, every host at once: looked at
    tab.set_mode("fleet")
    qtbot.waitUntil(lambda: len(samplers(box_root)) == 1, timeout=WAIT_MS)
    first = samplers(box_root)
    qtbot.waitUntil(lambda: tab.fleet.card("box").summary.text() != "", timeout=WAIT_MS)

    window.tabs.setCurrentWidget(window.dashboard)  # hidden: released, its sampler ends on the host
    assert "box" not in watch.sampled() and watch.sampled() == {LOCAL}
    qtbot.waitUntil(lambda: not samplers(box_root), timeout=WAIT_MS)
    assert "box" not in panel.gpu_summaries  # no badge that is no longer current

    window.tabs.setCurrentWidget(tab)  # shown again: a new sampler
    qtbot.waitUntil(lambda: len(samplers(box_root)) == 1, timeout=WAIT_MS)
    assert samplers(box_root) != first
    window.tabs.setCurrentWidget(window.dashboard)
    qtbot.waitUntil(lambda: not samplers(box_root), timeout=WAIT_MS)

    # a live run of the host on the dashboard looks at it; once it ended, nothing does
    store = window.store
    store_run(store, "live", {"workload": "mlp", "steps": 10}, hosts=("box",), state="running")
    window.runs_table.model.reload()
    window.runs_table.select_run("live")
    assert window.dashboard.run_ids == ["live"]
    window.gpu.refresh()
    assert watch.looking("dashboard") == ["box"]
    qtbot.waitUntil(lambda: len(samplers(box_root)) == 1, timeout=WAIT_MS)
    window.runs_table.model.update_run(store.update_run("live", state="finished"))
    window.gpu.refresh()
    assert watch.looking("dashboard") == [] and "box" not in watch.sampled()
    qtbot.waitUntil(lambda: not samplers(box_root), timeout=WAIT_MS)

    panel.select("box")  # selected (the launch form's host): looked at
    qtbot.waitUntil(lambda: len(samplers(box_root)) == 1, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: "box" in panel.gpu_summaries, timeout=WAIT_MS)
    panel.select(LOCAL)
    qtbot.waitUntil(lambda: not samplers(box_root), timeout=WAIT_MS)
    window.close()
