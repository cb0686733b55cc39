"""What the app says about a script folder's files: on This computer nothing is uploaded (the run works in the
folder, so nothing is "not uploaded"); tests/ssh/test_ssh_upload_skips_gui.py names the skips of an SSH upload."""
import pytest

from ddpgui.ui.widgets.launch_panel import SCRIPT


@pytest.mark.slow
def test_a_script_run_on_this_computer_uploads_nothing_and_works_in_its_folder(window, qtbot, tmp_path):
    secret = tmp_path / "outside" / "shadow"
    secret.parent.mkdir()
    secret.write_text("root:$6$hash\n")
    secret.chmod(0o600)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("import os\nos.makedirs('out', exist_ok=True)\n"
                                      "open('out/seen.txt', 'w').write(os.getcwd() + ' ' + open('shadow').read())\n"
                                      "print('step 1: loss 0.5')\n")
    (project / ".gitignore").write_text("shadow\n")  # ignored by an upload; here it is simply there
    (project / "shadow").symlink_to(secret)
    panel = window.launch_panel
    panel.workload.setCurrentText(SCRIPT)
    panel.script_dir.setText(str(project))
    panel.nproc.setValue(1)
    assert panel.launch_button.isEnabled(), panel.error.text()
    panel.launch_button.click()
    qtbot.waitUntil(lambda: window.dashboard.run_id is not None, timeout=90_000)
    run_id = window.dashboard.run_id
    qtbot.waitUntil(lambda: window.store.get_run(run_id).state in ("finished", "failed"), timeout=120_000)
    assert window.store.get_run(run_id).state == "finished", window.store.get_run(run_id).message
    assert panel.warning.isHidden(), panel.warning.text()
    assert (project / "out" / "seen.txt").read_text() == f"{project} root:$6$hash\n"
    assert window.store.get_run(run_id).config["script"]["dir"] == str(project)
