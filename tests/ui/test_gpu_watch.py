"""The window's GPU sampling with real parts: This computer's real sampler (``remote_runner monitor`` reading
/proc, or a "GPU host" whose nvidia-smi is tests/fixtures/gpu/fake_nvidia_smi.py replaying a real 8× GTX TITAN X
capture: GPU 0 idle, 1-7 busy), the hosts panel's badge, minimising (every sampler ends after the grace, none
left), restoring (sampling again), closing (none left), a window never started (none spawned), a Slurm cluster
(never sampled) and a host not connected (never connected just for a badge)."""
import dataclasses
import os
import signal
import socket

import pytest
from helpers.gpu_snapshots import fake_smi_on_path
from helpers.sampler_processes import samplers
from PySide6.QtWidgets import QApplication

from ddpgui.core.hosts import HostProfile, SlurmOptions
from ddpgui.ui.gpu_watch import NOT_CONNECTED_TEXT, SLURM_TEXT

WAIT_MS = 120_000  # the machine is shared and slow: generous
INTERVAL_S, GRACE_S = 0.5, 1.0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


@pytest.fixture
def root(window, tmp_path):
    """This computer's run root (the runner, so the samplers' argv) under this test's tmp_path."""
    folder = tmp_path / "local root"
    window.hosts.update(dataclasses.replace(window.hosts.get("local"), run_root=str(folder)))
    return str(folder)


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """nvidia-smi on PATH is the fake replaying the TITAN X capture; returns the log of its starts."""
    return fake_smi_on_path(tmp_path, monkeypatch)


def _smi_pids(log) -> list[int]:
    return [int(line.split()[0]) for line in log.read_text().splitlines() if line.strip()]


def _snapshots(window) -> list:
    seen = []
    window.gpu_watch.snapshot.connect(lambda host, snapshot: seen.append((host, snapshot)))
    return seen


def test_this_cpu_computer_is_sampled_and_its_line_says_no_more_than_its_probe(window, qtbot, root):
    seen = _snapshots(window)
    panel = window.hosts_panel
    before = panel.item("local").text()
    window.start_gpu_watch(interval_s=INTERVAL_S, grace_s=GRACE_S)
    qtbot.waitUntil(lambda: len(seen) >= 2, timeout=WAIT_MS)
    host, snapshot = seen[-1]
    assert host == "local" and snapshot.gpus == () and snapshot.cpu.cpu_count == os.cpu_count()
    assert window.gpu_watch.latest("local") is snapshot
    assert panel.gpu_summaries["local"] == ("", "GPUs: none on this host")
    item = panel.item("local")
    assert item.text() == before  # a CPU host: nothing extra (its probe summary says "CPU only")
    assert "GPUs: none on this host" in item.toolTip()
    assert len(samplers(root)) == 1  # one long-lived sampler, not one per snapshot


def test_a_gpu_host_shows_how_many_gpus_are_free_and_who_holds_the_others(window, qtbot, root, fake_smi):
    seen = _snapshots(window)
    window.start_gpu_watch(interval_s=INTERVAL_S, grace_s=GRACE_S)
    qtbot.waitUntil(lambda: bool(seen), timeout=WAIT_MS)
    item = window.hosts_panel.item("local")
    qtbot.waitUntil(lambda: "1 of 8 GPUs free" in item.text(), timeout=WAIT_MS)
    detail = item.text().split("\n")[1]
    assert detail.startswith("1 of 8 GPUs free · ")  # first on its line: elision cuts the right end
    tip = item.toolTip()
    assert "1 of 8 GPUs free; busy:" in tip and "GPU 0:" not in tip  # GPU 0 is the free one
    for index in range(1, 8):
        assert f"GPU {index}: " in tip
    assert " MiB of 12" in tip and "MiB used" in tip  # its memory says why (no process list was captured)
    picker = window.launch_panel.gpu_picker  # the launch form's node: its GPU choice knows them too
    assert window.gpu_watch.looking("launch") == ["local"]
    assert picker.snapshots["local"].summary() == "1 of 8 GPUs free"


def test_the_line_is_rendered_again_only_when_its_text_changes(window, qtbot, root, fake_smi):
    seen = _snapshots(window)
    window.start_gpu_watch(interval_s=INTERVAL_S, grace_s=GRACE_S)
    panel = window.hosts_panel
    qtbot.waitUntil(lambda: "1 of 8 GPUs free" in panel.item("local").text(), timeout=WAIT_MS)
    renders = []
    real = panel._render
    panel._render = lambda item: (renders.append(item.data(256)), real(item))
    count = len(seen)
    qtbot.waitUntil(lambda: len(seen) >= count + 3, timeout=WAIT_MS)  # the same capture again and again
    assert renders == []
    assert panel.set_gpu_summary("local", "0 of 8 GPUs free", "changed") is True
    assert renders == ["local"] and "0 of 8 GPUs free" in panel.item("local").text()


def test_minimised_nothing_samples_restored_it_samples_again_closed_nothing_is_left(window, qtbot, root, fake_smi):
    seen = _snapshots(window)
    window.start_gpu_watch(interval_s=INTERVAL_S, grace_s=GRACE_S)
    qtbot.waitUntil(lambda: bool(seen) and len(samplers(root)) == 1, timeout=WAIT_MS)
    first = samplers(root)
    qtbot.waitUntil(lambda: len(_smi_pids(fake_smi)) >= 2, timeout=WAIT_MS)
    smi = _smi_pids(fake_smi)

    window.showMinimized()
    qtbot.waitUntil(lambda: window.gpu_watch.paused, timeout=WAIT_MS)
    assert window.gpu_watch.sampled() == set()
    qtbot.waitUntil(lambda: not samplers(root), timeout=WAIT_MS)  # ended after the grace
    qtbot.waitUntil(lambda: not any(_alive(pid) for pid in first + smi), timeout=WAIT_MS)  # nvidia-smi too
    QApplication.processEvents()
    count = len(seen)
    qtbot.wait(int(4 * INTERVAL_S * 1000))
    assert len(seen) == count and not samplers(root)  # minimised: no snapshot, no sampler

    window.showNormal()
    qtbot.waitUntil(lambda: not window.gpu_watch.paused, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: len(seen) > count, timeout=WAIT_MS)
    again = samplers(root)
    assert len(again) == 1 and again != first  # a new sampler
    assert "1 of 8 GPUs free" in window.hosts_panel.item("local").text()
    smi = _smi_pids(fake_smi)

    window.close()
    assert not any(_alive(pid) for pid in again)  # close waits for the samplers to end
    qtbot.waitUntil(lambda: not any(_alive(pid) for pid in smi), timeout=WAIT_MS)
    assert not samplers(root)


def test_a_window_never_started_samples_nothing(window, qtbot, root, fake_smi):
    window.gpu_watch.watch("gpus_tab", ["local"])  # even looked at
    qtbot.wait(3000)
    assert not window.gpu_watch.started and window.gpu_watch.sampled() == set()
    assert not samplers(root) and _smi_pids(fake_smi) == []
    assert window.hosts_panel.gpu_summaries == {}
    window.close()
    assert not samplers(root)


def test_a_cluster_is_never_sampled_and_a_host_not_connected_never_connected(window, qtbot, root):
    window.hosts.add(HostProfile(name="hpc", kind="slurm", hostname="127.0.0.1", port=_closed_port(),
                                 slurm=SlurmOptions(partition="debug")))
    window.hosts.add(HostProfile(name="far", hostname="127.0.0.1", port=_closed_port(), user="nobody"))
    window.hosts_panel.reload("local")
    waiting, problems = [], []
    window.gpu_watch.waiting.connect(lambda host, text: waiting.append((host, text)))
    window.gpu_watch.problem.connect(lambda *args: problems.append(args))
    seen = _snapshots(window)
    window.start_gpu_watch(interval_s=INTERVAL_S, grace_s=GRACE_S)
    window.gpu_watch.watch("gpus_tab", ["hpc", "far"])  # looked at explicitly: still not connected by looking
    qtbot.waitUntil(lambda: bool(seen), timeout=WAIT_MS)
    assert window.gpu_watch.sampled() == {"local"}
    assert ("hpc", SLURM_TEXT) in waiting and ("far", NOT_CONNECTED_TEXT) in waiting
    assert waiting.count(("far", NOT_CONNECTED_TEXT)) == 1  # said once, not at each refresh
    panel = window.hosts_panel
    assert panel.gpu_summaries["hpc"][0] == SLURM_TEXT and SLURM_TEXT in panel.item("hpc").text()
    assert "far" not in panel.gpu_summaries and "GPUs" not in panel.item("far").text()
    assert {host for host, _ in seen} == {"local"} and not problems
    pool = window.manager.targets
    assert not pool.connected("far") and not pool.connected("hpc") and pool.connected("local")
    assert "far" not in pool._targets and "hpc" not in pool._targets  # nothing opened a connection to them


def test_the_gpus_tab_samples_what_it_shows_and_connects_through_test_connection(window, qtbot, root, fake_smi):
    window.hosts.add(HostProfile(name="far", hostname="127.0.0.1", port=_closed_port(), user="nobody"))
    window.hosts.add(HostProfile(name="hpc", kind="slurm", hostname="127.0.0.1", port=_closed_port(),
                                 slurm=SlurmOptions(partition="debug")))
    panel, tab, watch = window.hosts_panel, window.gpus_tab, window.gpu_watch
    panel.reload("local")
    panel.hosts_changed.emit()
    window.start_gpu_watch(interval_s=INTERVAL_S, grace_s=GRACE_S)
    assert watch.looking("gpus_tab") == []  # not shown: it looks at nothing
    window.tabs.setCurrentWidget(tab)
    qtbot.waitUntil(lambda: watch.looking("gpus_tab") == ["local"], timeout=WAIT_MS)
    qtbot.waitUntil(lambda: "1 of 8 GPUs free" in tab.gpu_view.header_text(), timeout=WAIT_MS)
    assert tab.gpu_view.header_text().startswith("This computer · 1 of 8 GPUs free · from nvidia-smi")

    panel.select("far")  # the hosts panel's current host is the tab's
    assert tab.host == "far" and watch.looking("gpus_tab") == ["far"]
    assert "far" not in watch.sampled() and tab._connected["far"] is False
    assert tab.gpu_view.connect_button.isVisibleTo(tab)
    assert "not connected" in tab.gpu_view.header_text()
    tab.gpu_view.connect_button.click()  # Connect is Test connection: it connects (here: refused) and probes
    assert panel.status["far"] == "checking"
    qtbot.waitUntil(lambda: panel.status.get("far") == "error", timeout=WAIT_MS)
    assert "far" not in watch.sampled() and not window.manager.targets.connected("far")

    tab.set_mode("fleet")
    assert watch.looking("gpus_tab") == ["local", "far", "hpc"]
    qtbot.waitUntil(lambda: tab.fleet.card("local").summary.text() == "1 of 8 GPUs free", timeout=WAIT_MS)
    assert tab.fleet.card("far").status_text().startswith("not connected")
    assert tab.fleet.card("far").connect_button.isVisibleTo(tab)
    assert tab.fleet.card("hpc").status_text() == SLURM_TEXT  # a cluster: why it is not sampled, no Connect
    assert not tab.fleet.card("hpc").connect_button.isVisibleTo(tab)
    tab.fleet.card("local").details.click()  # a host chosen there is selected in the hosts panel
    assert panel.current() == "local" and tab.mode() == "host" and watch.looking("gpus_tab") == ["local"]

    tab.set_mode("fleet")
    window.tabs.setCurrentWidget(window.dashboard)  # hidden: it looks at nothing, the badges still look
    assert watch.looking("gpus_tab") == [] and watch.sampled() == {"local"}
    window.close()
    assert window.settings.value("gpus/mode") == "fleet"  # remembered for the next launch


def test_a_sampler_that_ends_by_itself_is_said_in_the_badge_and_started_again(window, qtbot, root, fake_smi):
    seen = _snapshots(window)
    problems = []
    window.gpu_watch.problem.connect(lambda *args: problems.append(args))
    window.gpu_watch.retry_ms = 1000
    window.start_gpu_watch(interval_s=INTERVAL_S, grace_s=GRACE_S)
    qtbot.waitUntil(lambda: bool(seen) and len(samplers(root)) == 1, timeout=WAIT_MS)
    first = samplers(root)
    qtbot.waitUntil(lambda: len(_smi_pids(fake_smi)) >= 2, timeout=WAIT_MS)
    smi = _smi_pids(fake_smi)
    os.kill(first[0], signal.SIGKILL)  # the sampler dies on the host
    qtbot.waitUntil(lambda: bool(problems), timeout=WAIT_MS)
    host, message, hint = problems[0]
    assert host == "local" and "ended by itself" in message and "starts again" in hint
    item = window.hosts_panel.item("local")
    assert item.text().split("\n")[1].startswith("GPUs unknown · ") and message in item.toolTip()
    count = len(seen)
    qtbot.waitUntil(lambda: len(seen) > count, timeout=WAIT_MS)  # tried again while it is still looked at
    assert "1 of 8 GPUs free" in item.text() and message not in item.toolTip()
    again = samplers(root)
    assert len(again) == 1 and again != first
    qtbot.waitUntil(lambda: not any(_alive(pid) for pid in smi), timeout=WAIT_MS)  # no orphan nvidia-smi


def test_a_hidden_window_samples_nothing_until_shown_again(window, qtbot, root):
    seen = _snapshots(window)
    window.start_gpu_watch(interval_s=INTERVAL_S, grace_s=GRACE_S)
    qtbot.waitUntil(lambda: bool(seen), timeout=WAIT_MS)
    window.hide()  # to the tray, another desktop: nobody can see it
    assert window.gpu_watch.paused and window.gpu_watch.sampled() == set()
    qtbot.waitUntil(lambda: not samplers(root), timeout=WAIT_MS)
    window.show()
    assert not window.gpu_watch.paused and window.gpu_watch.sampled() == {"local"}
    qtbot.waitUntil(lambda: len(samplers(root)) == 1, timeout=WAIT_MS)


@pytest.mark.parametrize("stored, shown", [("fleet", "fleet"), ("host", "host"), ("small multiples", "host"),
                                           ("", "host")])
def test_the_tabs_mode_comes_back_after_a_restart_and_a_bad_stored_one_is_the_default(qtbot, tmp_path, stored,
                                                                                       shown):
    from PySide6.QtCore import QSettings

    from ddpgui.core.hosts import HostStore
    from ddpgui.core.store import RunStore
    from ddpgui.ui.main_window import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    settings.setValue("gpus/mode", stored)  # as the last session (or a hand edit) left it
    window = MainWindow(store=RunStore(tmp_path / "runs.db"), hosts=HostStore(tmp_path / "hosts.json"),
                        settings=settings)
    qtbot.addWidget(window)
    assert window.gpus_tab.mode() == shown
    window.close()
