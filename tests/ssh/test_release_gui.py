"""Release when idle in the app (ddpgui/ui/release_watch.py, widgets/release_rows.py), against a real loopback sshd
of the test's own and the runner's real release watcher: a connected host with a release action shows its countdown
under the hosts list, with the host's words as tooltip; Cancel from the app holds the release on the host (its
release-status, asked apart, says cancelled, and the action never fires); a release that failed while the app was
away is said in words, in the error colour, at the next connection; the host dialog's action reaches a connected
host at once; an action that runs on this computer runs after its notice, can be cancelled in it, and its failure
is said with its output.  The host's watcher polls every 5 s (as for users); the app's poll and notice are shortened
where a test waits for them."""
import dataclasses
import getpass
import json
import os
import signal
import sys
import time

import pytest
from helpers.host_queue import release_watchers
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QDialogButtonBox

from ddpgui.core.hosts.release import ReleasePolicy
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import RunStore
from ddpgui.core.targets.zipapp import build_runner
from ddpgui.ui.main_window import MainWindow

ERROR_COLOUR = "#d93025"


@pytest.fixture
def app(ssh_env, own_server, qtbot, tmp_path):
    """``app(policy, poll_s=30, notice_s=60)``: a main window on private stores whose host ``inst`` (the test's own
    sshd, a run root of its own) has ``policy``; each call is a new window (the app opened again), the one before
    closed.  Yields the factory; the run root is ``app.root``."""
    root = tmp_path / "inst root"
    known = ssh_env.known_hosts(tmp_path, trust=(own_server,))
    made = []

    def make(policy, poll_s: float = 30.0, notice_s: float = 60.0) -> MainWindow:
        for old in made:
            old.close()
        profile = ssh_env.profile("inst", port=own_server.port, user=getpass.getuser(), python=sys.executable,
                                  run_root=str(root), release=policy)
        hosts = ssh_env.store(tmp_path, profile)
        store = RunStore(tmp_path / f"runs{len(made)}.sqlite3")
        manager = RunManager(store, hosts, lambda host: ssh_env.target(tmp_path, hosts.get(host), store=hosts,
                                                                       known_hosts=known))
        settings = QSettings(str(tmp_path / f"settings{len(made)}.ini"), QSettings.Format.IniFormat)
        window = MainWindow(store=store, hosts=hosts, settings=settings, manager=manager, known_hosts=known)
        qtbot.addWidget(window)
        window.hosts_panel.release.poll_s, window.hosts_panel.release.notice_s = poll_s, notice_s
        window.show()
        made.append(window)
        return window

    make.root = root
    make.known = known
    yield make
    for window in made:
        window.close()
    for pid in release_watchers(root):
        os.kill(pid, signal.SIGKILL)


def line(window, name: str = "inst") -> str:
    label = window.hosts_panel.release_rows.label(name)
    return label.text() if label is not None else ""


def detail(window, name: str = "inst") -> str:
    """The line under the host's release line (why it failed, the command), "" when hidden."""
    label = window.hosts_panel.release_rows.detail(name)
    return label.text() if label is not None and not label.isHidden() else ""


def host_says(ssh_env, tmp_path, window, known) -> dict:
    """The host's release-status, asked over a connection of its own (not the app's)."""
    target = ssh_env.target(tmp_path, window.hosts.get("inst"), store=window.hosts, known_hosts=known)
    try:
        target.deploy(build_runner())
        return target.release_status()
    finally:
        target.close()


def state_file(root) -> dict:
    try:
        return json.loads((root / "release" / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def test_the_countdown_is_shown_and_cancel_holds_the_release_on_the_host(app, ssh_env, qtbot, tmp_path):
    marker = tmp_path / "released"
    window = app(ReleasePolicy(command=f"touch '{marker}'", after_min=0.15))
    rows = window.hosts_panel.release_rows
    assert not rows.isVisible()  # not connected: nothing to say yet
    window.test_connection("inst")
    qtbot.waitUntil(lambda: line(window).startswith("inst: releases in "), timeout=60000)
    label, cancel = rows.label("inst"), rows.button("inst")
    assert rows.isVisible() and cancel.isVisible() and cancel.text() == "Cancel"
    tip = label.toolTip()
    assert f"release: \"touch '{marker}'\" on the host after 9 s idle (keeps the disk)" in tip, tip
    assert "idle since" in tip and "releases in" in tip
    assert "releases in" in window.hosts_panel.item("inst").toolTip()  # the host's own tooltip says it too
    cancel.click()
    qtbot.waitUntil(lambda: line(window) == "inst: release cancelled until next use", timeout=30000)
    assert not cancel.isVisible()
    said = host_says(ssh_env, tmp_path, window, app.known)
    assert said["phase"] == "cancelled" and said["cancelled_at"]
    deadline = float(said["policy"]["set_at"]) + 9 + 7  # the idle time and more than a poll of the watcher
    qtbot.waitUntil(lambda: time.time() > deadline, timeout=60000)
    assert not marker.exists()
    assert host_says(ssh_env, tmp_path, window, app.known)["phase"] == "cancelled"
    assert state_file(app.root).get("last") is None  # the action never ran


def test_a_release_that_failed_while_the_app_was_away_is_said_at_the_next_connection(app, qtbot):
    window = app(ReleasePolicy(command="echo 'no such pod' >&2; exit 3", after_min=0.1))
    window.test_connection("inst")
    qtbot.waitUntil(lambda: "inst: " in line(window), timeout=60000)
    assert "FAILED" not in line(window)  # not failed yet when the app first heard the host
    assert wait_until(lambda: state_file(app.root).get("attempts") == 1, qtbot, 30)
    window = app(ReleasePolicy(command="echo 'no such pod' >&2; exit 3", after_min=0.1))  # the app opened again
    window.test_connection("inst")
    qtbot.waitUntil(lambda: "FAILED" in line(window), timeout=60000)
    text = line(window)
    assert text.startswith("inst: release FAILED at ") and "; retry in " in text, text
    assert detail(window) == "exit 3: no such pod: \"echo 'no such pod' >&2; exit 3\""
    label = window.hosts_panel.release_rows.label("inst")
    assert ERROR_COLOUR in label.styleSheet() and label.isVisible()
    assert "last release FAILED" in label.toolTip() and "sudo needs a rule" in label.toolTip()
    assert "\"echo 'no such pod' >&2; exit 3\" exited with 3" in label.toolTip()  # the command, on hover
    assert window.hosts_panel.release_rows.button("inst").isVisible()  # the retry can be held


def test_a_release_done_says_when_with_what_and_the_idle_time_it_saved(app, ssh_env, qtbot, tmp_path):
    marker = tmp_path / "stopped"
    window = app(ReleasePolicy(command=f"touch '{marker}'", after_min=0), poll_s=1)
    window.hosts.update(dataclasses.replace(window.hosts.get("inst"), price_per_hour=2.5))
    window.test_connection("inst")
    qtbot.waitUntil(lambda: line(window).startswith("inst: released at "), timeout=60000)
    assert marker.exists()
    assert " idle saved, " in line(window) and line(window).endswith(" at 2.5/h"), line(window)
    assert detail(window) == f"by \"touch '{marker}'\""
    label = window.hosts_panel.release_rows.label("inst")
    assert "#188038" in label.styleSheet() and not window.hosts_panel.release_rows.button("inst").isVisible()
    assert "succeeded" in label.toolTip() and "of idle time saved since" in label.toolTip()


def test_the_host_dialog_sends_a_changed_action_to_the_connected_host(app, ssh_env, qtbot, tmp_path):
    marker = tmp_path / "never"
    window = app(None)
    window.test_connection("inst")
    qtbot.waitUntil(lambda: window.manager.targets.connected("inst") and window.hosts_panel.status.get("inst")
                    == "reachable", timeout=60000)
    assert not window.hosts_panel.release_rows.isVisible()
    window.hosts_panel.select("inst")
    dialog = window.hosts_panel.edit_host()
    box = dialog.release_box
    box.preset.setCurrentIndex(box.preset.findData("custom"))
    box.preset.activated.emit(box.preset.currentIndex())
    box.command.setText(f"touch '{marker}'")
    box.after.setValue(120)
    dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Save).click()
    qtbot.waitUntil(lambda: "release action set on the host: releases in " in line(window), timeout=30000)
    assert line(window) == "inst: release action set on the host: releases in 2 h"
    said = host_says(ssh_env, tmp_path, window, app.known)
    assert said["policy"]["command"] == f"touch '{marker}'" and said["policy"]["after_s"] == 7200
    assert said["phase"] == "idle"
    dialog = window.hosts_panel.edit_host()  # removed: the host hears it too
    dialog.release_box.preset.setCurrentIndex(0)
    dialog.release_box.preset.activated.emit(0)
    dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Save).click()
    qtbot.waitUntil(lambda: "removed from the host" in line(window), timeout=30000)
    assert host_says(ssh_env, tmp_path, window, app.known)["phase"] == "off"


def test_an_action_on_this_computer_runs_after_its_notice(app, qtbot, tmp_path):
    marker = tmp_path / "sky down ran"
    window = app(ReleasePolicy(command=f"echo down; touch '{marker}'", on="local", after_min=0.02), poll_s=1,
                 notice_s=3)
    window.test_connection("inst")
    qtbot.waitUntil(lambda: "runs on this computer in" in line(window), timeout=60000)
    assert line(window).startswith("inst: release due: runs on this computer in ")
    assert detail(window) == f"\"echo down; touch '{marker}'\""
    assert window.hosts_panel.release_rows.button("inst").isVisible() and not marker.exists()
    qtbot.waitUntil(lambda: "from this computer" in line(window), timeout=60000)
    assert marker.exists() and line(window).startswith("inst: released at ")
    assert detail(window) == f"\"echo down; touch '{marker}'\" ran here"
    assert window.hosts_panel.release_rows.label("inst").toolTip().splitlines()[-1] == "down"  # its output


def test_an_action_on_this_computer_can_be_cancelled_in_its_notice(app, ssh_env, qtbot, tmp_path):
    marker = tmp_path / "sky down ran"
    window = app(ReleasePolicy(command=f"touch '{marker}'", on="local", after_min=0.02), poll_s=1, notice_s=4)
    window.test_connection("inst")
    qtbot.waitUntil(lambda: "runs on this computer in" in line(window), timeout=60000)
    window.hosts_panel.release_rows.button("inst").click()
    qtbot.waitUntil(lambda: line(window) == "inst: release cancelled until next use", timeout=30000)
    qtbot.wait(6000)  # past the notice, and polls of the host
    assert not marker.exists() and line(window) == "inst: release cancelled until next use"
    assert host_says(ssh_env, tmp_path, window, app.known)["phase"] == "cancelled"


def test_an_action_on_this_computer_that_fails_is_said_with_its_output(app, qtbot):
    window = app(ReleasePolicy(command="echo 'cluster c1 not found' >&2; exit 2", on="local", after_min=0.02),
                 poll_s=1, notice_s=1)
    window.test_connection("inst")
    qtbot.waitUntil(lambda: "FAILED" in line(window), timeout=60000)
    assert line(window) == "inst: release FAILED on this computer: run it by hand, or Cancel to hold it"
    assert detail(window) == "exit 2: cluster c1 not found: \"echo 'cluster c1 not found' >&2; exit 2\""
    assert window.hosts_panel.release_rows.button("inst").isVisible()
    assert ERROR_COLOUR in window.hosts_panel.release_rows.label("inst").styleSheet()
    qtbot.wait(3000)  # more polls: it is not run again by itself
    assert "FAILED on this computer" in line(window)


def wait_until(predicate, qtbot, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        qtbot.wait(100)
    return False
