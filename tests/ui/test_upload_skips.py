"""The app says which files of a script folder it did not upload, e.g. a link to a file outside it."""
import pytest

from ddpgui.ui.widgets.launch_panel import SCRIPT


@pytest.mark.slow
def test_the_launch_panel_names_a_link_it_did_not_upload(window, qtbot, tmp_path):
    secret = tmp_path / "outside" / "shadow"
    secret.parent.mkdir()
    secret.write_text("root:$6$hash\n")
    secret.chmod(0o600)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print('step 1: loss 0.5')\n")
    (project / "shadow").symlink_to(secret)
    panel = window.launch_panel
    panel.workload.setCurrentText(SCRIPT)
    panel.script_dir.setText(str(project))
    panel.nproc.setValue(1)
    assert panel.launch_button.isEnabled(), panel.error.text()
    panel.launch_button.click()
    qtbot.waitUntil(lambda: window.dashboard.run_id is not None, timeout=90_000)
    assert not panel.warning.isHidden()
    assert panel.warning.text() == (f"Warning: not uploaded from {project}: shadow (a symbolic link to {secret}, "
                                    "outside the folder)")
    run_id = window.dashboard.run_id
    qtbot.waitUntil(lambda: window.store.get_run(run_id).state in ("finished", "failed"), timeout=120_000)
