"""The whole GUI path to a real SSH host: add it in the dialog, test it, accept its key, launch, watch, stop."""
import getpass
import subprocess
import sys

import pytest
from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication, QLabel

from ddpgui.core.hosts import HostStore
from ddpgui.core.ssh.known_hosts import KnownHosts
from ddpgui.core.store import RunStore

pytestmark = pytest.mark.slow


@pytest.fixture
def window(qtbot, tmp_path, ssh_env):
    from ddpgui.ui.main_window import MainWindow

    (tmp_path / "no_known_hosts").write_text("")  # the server's key is unknown to this app
    known = KnownHosts(shared_files=[tmp_path / "no_known_hosts"], app_file=tmp_path / "app_known_hosts")
    win = MainWindow(store=RunStore(tmp_path / "runs.db"), hosts=HostStore(tmp_path / "hosts.json"),
                     settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat),
                     known_hosts=known)
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()


def _fill_host_dialog(ssh_env, tmp_path, errors):
    """Runs once the dialog is open; offscreen there is no active window, so look it up."""
    shown = [w for w in QApplication.topLevelWidgets() if w.objectName() == "host_edit_dialog" and w.isVisible()]
    if not shown:
        QTimer.singleShot(20, lambda: _fill_host_dialog(ssh_env, tmp_path, errors))
        return
    dialog = shown[0]
    dialog.name.setText("lab-box")
    dialog.hostname.setText("127.0.0.1")
    dialog.port.setValue(ssh_env.server.port)
    dialog.user.setText(getpass.getuser())
    dialog.auth.setCurrentIndex(dialog.auth.findData("key"))
    dialog.key_file.setText(str(ssh_env.key_plain))
    dialog.python.setText(sys.executable)
    dialog.run_root.setText(str(tmp_path / "gui run root"))
    dialog._save()
    if dialog.isVisible():  # refused: say why instead of leaving the modal dialog open
        errors.append(dialog.error.text())
        dialog.reject()


def test_add_an_ssh_host_accept_its_key_launch_watch_and_stop(window, qtbot, ssh_env, tmp_path):
    from ddpgui.ui.widgets.runs_table import COLUMNS

    panel = window.hosts_panel
    errors = []
    QTimer.singleShot(0, lambda: _fill_host_dialog(ssh_env, tmp_path, errors))
    panel.buttons["add"].click()  # window-modal, not blocking: the timer fills it in and saves
    qtbot.waitUntil(lambda: "lab-box" in window.hosts or bool(errors), timeout=30_000)
    assert not errors, errors
    assert panel.current() == "lab-box" and "lab-box" in window.hosts

    panel.buttons["test"].click()
    qtbot.waitUntil(lambda: window.prompts.current is not None, timeout=30_000)
    dialog = window.prompts.current
    assert dialog.objectName() == "unknown_host_key_dialog"
    shown = " ".join(label.text() for label in dialog.findChildren(QLabel))
    real = [subprocess.run(["ssh-keygen", "-lf", str(key.with_suffix(".pub")), "-E", "sha256"], check=True,
                           capture_output=True, text=True).stdout.split()[1] for key in ssh_env.server.host_keys]
    assert any(fp in shown for fp in real), (real, shown)  # the fingerprint of a key the server really has
    assert f"[127.0.0.1]:{ssh_env.server.port}" in shown
    dialog.accept_button.click()
    qtbot.waitUntil(lambda: panel.status.get("lab-box") == "reachable", timeout=60_000)
    assert f"[127.0.0.1]:{ssh_env.server.port}" in (tmp_path / "app_known_hosts").read_text()
    assert "torch" in panel.item("lab-box").text()  # the probe summary is shown under the host
    assert window.launch_panel.nproc.isEnabled()

    launch = window.launch_panel
    launch.workload.setCurrentText("mlp")
    launch.nproc.setValue(2)
    launch.compile.setCurrentText("off")
    launch.precision.setCurrentText("fp32")
    launch.batch.setValue(8)
    launch.length_unit.setCurrentText("steps")
    launch.length.setValue(1_000_000)
    assert launch.launch_button.isEnabled(), launch.error.text()
    launch.launch_button.click()
    qtbot.waitUntil(lambda: window.dashboard.run_id is not None, timeout=120_000)
    run_id = window.dashboard.run_id
    assert window.store.get_run(run_id).host == "lab-box"

    def points() -> int:
        x, _ = window.dashboard.loss_plot.curve_data(f"{run_id}:ema")
        return 0 if x is None else len(x)

    qtbot.waitUntil(lambda: points() >= 5, timeout=120_000)
    window.dashboard.stop_button.click()
    model = window.runs_table.model
    qtbot.waitUntil(lambda: model.runs[model.row_of(run_id)].state == "stopped", timeout=60_000)
    assert model.data(model.index(model.row_of(run_id), COLUMNS.index("State"))) == "stopped"
    assert model.data(model.index(model.row_of(run_id), COLUMNS.index("Host"))) == "lab-box"
