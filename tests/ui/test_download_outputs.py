"""Download outputs… from the runs table, on This computer: the menu item, the dialog's list with sizes and
checkboxes, the folder kept between launches, a download of the ticked files (the same core function as
``ddpgui pull``, on a worker)."""
from helpers.run_folders import make_run_folder
from PySide6.QtCore import Qt

from ddpgui.ui.dialogs.download_outputs import FOLDER_KEY, DownloadOutputsDialog


def _stored(window, run_id, run_dir):
    window.store.create_run(run_id, name="outputs test", hosts=["local"], config={"run_id": run_id},
                            environment={}, run_dirs={0: str(run_dir)}, state="finished")
    window.runs_table.model.reload()


def test_the_menu_offers_it_for_one_run(window, tmp_path):
    _stored(window, "20991231-000000-dl0001", make_run_folder(tmp_path / "root", "a"))
    _stored(window, "20991231-000000-dl0002", make_run_folder(tmp_path / "root2", "b"))
    actions = {a.objectName(): a for a in window.runs_table.context_menu(["20991231-000000-dl0001"]).actions()}
    assert actions["run_pull"].text() == "Download outputs…" and actions["run_pull"].isEnabled()
    both = window.runs_table.context_menu(["20991231-000000-dl0001", "20991231-000000-dl0002"])
    assert not {a.objectName(): a for a in both.actions()}["run_pull"].isEnabled()


def test_download_the_ticked_files_and_the_folder_is_kept(window, qtbot, tmp_path):
    run_dir = make_run_folder(tmp_path / "root", "r")
    _stored(window, "20991231-000000-dl0003", run_dir)
    window.run_action("pull", ["20991231-000000-dl0003"])
    dialog = window.findChild(DownloadOutputsDialog)
    assert dialog is not None and dialog.isVisible()
    qtbot.waitUntil(lambda: dialog.listing is not None, timeout=60000)
    names = [dialog.tree.topLevelItem(i).text(0) for i in range(dialog.tree.topLevelItemCount())]
    assert "outputs/model.pt" in names and r"caf\xe9.bin" in names and "to passwd" not in names
    assert dialog.tree.topLevelItem(names.index("outputs/model.pt")).text(1) == "293.0 KiB"
    assert "to passwd: a symbolic link to /etc/passwd" in dialog.skipped.text()
    assert dialog.chosen.text().startswith(f"{len(names)} of {len(names)} chosen")
    dialog.none_button.click()
    assert not dialog.download_button.isEnabled() and dialog.chosen.text().startswith("0 of")
    dialog.tree.topLevelItem(names.index("outputs/model.pt")).setCheckState(0, Qt.CheckState.Checked)
    dialog.folder.setText(str(tmp_path / "saved"))
    assert dialog.where.text() == f"Files go to {tmp_path / 'saved' / '20991231-000000-dl0003'}"
    dialog.download_button.click()
    qtbot.waitUntil(lambda: dialog.result is not None, timeout=60000)
    got = tmp_path / "saved" / "20991231-000000-dl0003"
    assert sorted(p.relative_to(got).as_posix() for p in got.rglob("*") if p.is_file()) == ["outputs/model.pt"]
    assert (got / "outputs" / "model.pt").read_bytes() == (tmp_path / "root" / "outs ✓" / "model.pt").read_bytes()
    assert dialog.status.text().startswith("Downloaded 1 file(s), 293.0 KiB in ")
    assert dialog.bar.value() == 1000 and not dialog.error.isVisible()
    assert window.settings.value(FOLDER_KEY) == str(tmp_path / "saved")
    dialog.close_button.click()
    again = DownloadOutputsDialog(window.manager, window.workers, window.settings, "20991231-000000-dl0003", window)
    assert again.folder.text() == str(tmp_path / "saved")
    qtbot.waitUntil(lambda: again.listing is not None, timeout=60000)
    again.reject()


def test_a_run_without_a_folder_is_said_in_words(window, qtbot):
    window.store.create_run("20991231-000000-dl0004", name="never launched", hosts=["local"], config={},
                            environment={}, run_dirs={}, state="failed")
    dialog = DownloadOutputsDialog(window.manager, window.workers, window.settings, "20991231-000000-dl0004", window)
    qtbot.addWidget(dialog)
    assert dialog.error.text().startswith("run 20991231-000000-dl0004 has no folder on a host")
    assert not dialog.error.isHidden() and dialog.download_button.text() == "Retry"


def test_the_launch_form_names_an_outputs_folder(window):
    panel = window.launch_panel
    panel.advanced.setChecked(True)
    panel.outputs_dir.setText(" checkpoints ")
    assert panel.settings()["outputs_dir"] == "checkpoints"
    panel.outputs_dir.setText("")
    assert panel.settings()["outputs_dir"] is None
    panel.apply_settings({"workload": "mlp", "outputs_dir": "/data/out", "lr": 0.01})
    assert panel.outputs_dir.text() == "/data/out"
    panel.apply_settings({"workload": "mlp", "outputs_dir": None})
    assert panel.outputs_dir.text() == ""
