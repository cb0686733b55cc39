"""The app says which files of a script folder it did not upload to an SSH host, and why: a link to a file outside
the folder, files its .gitignore or .ddpguiignore leave out."""
import getpass
import sys

import pytest
from PySide6.QtCore import QSettings

from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import RunStore
from ddpgui.ui.widgets.launch_panel import SCRIPT

pytestmark = pytest.mark.slow


@pytest.fixture
def window(qtbot, tmp_path, ssh_env):
    from ddpgui.ui.main_window import MainWindow

    hosts = ssh_env.store(tmp_path, ssh_env.profile("box", user=getpass.getuser(), python=sys.executable,
                                                    run_root=str(tmp_path / "box")))
    store = RunStore(tmp_path / "runs.db")
    manager = RunManager(store, hosts, lambda name: ssh_env.target(tmp_path, hosts.get(name), store=hosts))
    win = MainWindow(store=store, hosts=hosts, manager=manager,
                     settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()
    store.close()


def test_the_launch_panel_names_what_it_did_not_upload_and_why(window, qtbot, tmp_path):
    secret = tmp_path / "outside" / "shadow"
    secret.parent.mkdir()
    secret.write_text("root:$6$hash\n")
    secret.chmod(0o600)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print('step 1: loss 0.5')\n")
    (project / "model.ckpt").write_text("weights")
    (project / ".gitignore").write_text("# checkpoints\n*.ckpt\n")
    (project / "shadow").symlink_to(secret)
    window.hosts_panel.list.setCurrentItem(window.hosts_panel.item("box"))
    panel = window.launch_panel
    panel.workload.setCurrentText(SCRIPT)
    panel.script_dir.setText(str(project))
    panel.nproc.setValue(1)
    assert panel.launch_button.isEnabled(), panel.error.text()
    panel.launch_button.click()
    qtbot.waitUntil(lambda: window.dashboard.run_id is not None or panel.error.isVisible(), timeout=120_000)
    assert not panel.error.isVisible(), panel.error.text()
    assert window.store.get_run(window.dashboard.run_id).hosts == ["box"]
    qtbot.waitUntil(lambda: not panel.warning.isHidden(), timeout=30_000)
    assert panel.warning.text() == "\n".join([
        f"Warning: not uploaded from {project}: model.ckpt (ignored by .gitignore:2 `*.ckpt`)",
        f"Warning: not uploaded from {project}: shadow (a symbolic link to {secret}, outside the folder)"])
    run_id = window.dashboard.run_id
    qtbot.waitUntil(lambda: window.store.get_run(run_id).state in ("finished", "failed"), timeout=120_000)
    assert window.store.get_run(run_id).state == "finished", window.store.get_run(run_id).message
