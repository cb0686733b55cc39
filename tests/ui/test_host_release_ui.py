"""The host dialog's "Release when idle" box (ddpgui/ui/dialogs/release_box.py) and what the hosts panel says of a
saved action that cannot reach its host yet; the launch form's "Keep outputs".  The host side is tested over a real
sshd in tests/ssh/test_release_gui.py."""
import json

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractButton, QAbstractSpinBox, QComboBox, QDialogButtonBox, QLineEdit

from ddpgui.core.hosts import LOCAL, HostProfile, HostStore
from ddpgui.core.hosts.release import PRESETS, ReleasePolicy, preset_policy
from ddpgui.core.hosts.slurm_options import SlurmOptions
from ddpgui.core.targets.pool import TargetPool
from ddpgui.ui.dialogs.host_edit import HostEditDialog
from ddpgui.ui.widgets.hosts_panel import HostsPanel
from ddpgui.ui.workers import WorkerPool


def _save(dialog) -> None:
    dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Save).click()


def _choose(combo: QComboBox, data) -> None:
    """Pick an entry as a user does (``activated`` follows)."""
    combo.setCurrentIndex(combo.findData(data))
    combo.activated.emit(combo.currentIndex())


def _no_connection(host):
    raise AssertionError(f"nothing connects in these tests ({host})")


def _panel(qtbot, tmp_path, *profiles):
    hosts = HostStore(tmp_path / "hosts.json")
    for profile in profiles:
        hosts.add(profile)
    workers = WorkerPool()
    panel = HostsPanel(hosts, TargetPool(_no_connection), workers.start)
    qtbot.addWidget(panel)
    panel.resize(380, 500)
    panel.show()
    return panel, hosts


def test_a_release_action_saves_into_hosts_json_and_comes_back_in_the_dialog(qtbot, tmp_path):
    panel, hosts = _panel(qtbot, tmp_path)
    dialog = panel.add_host()
    qtbot.addWidget(dialog)
    for field, text in (("name", "rented"), ("hostname", "10.0.0.7"), ("user", "ana")):
        getattr(dialog, field).setText(text)
    box = dialog.release_box
    assert dialog.pages.isTabVisible(1) and dialog.pages.tabText(1) == "Release when idle"
    assert not box.command.isEnabled()  # None: nothing to fill
    _choose(box.preset, "runpod-remove")
    assert box.command.text() == PRESETS["runpod-remove"].command == "runpodctl remove pod $RUNPOD_POD_ID"
    assert box.on.currentData() == "host" and box.kind.currentData() == "terminate"
    assert not box.warning.isHidden() and "destroys the instance and everything on its disk" in box.warning.text()
    assert box.force.isEnabled() and not box.force_hours.isEnabled()
    box.force.setChecked(True)
    box.force_hours.setValue(6)
    assert "6 h after the host became idle it destroys the disk anyway" in box.warning.text()
    assert "lost for good" in box.warning.text()
    box.after.setValue(45)
    _save(dialog)
    assert dialog.result() == dialog.DialogCode.Accepted
    saved = json.loads((tmp_path / "hosts.json").read_text())
    entry = next(h for h in saved["hosts"] if h["name"] == "rented") if isinstance(saved, dict) else \
        next(h for h in saved if h["name"] == "rented")
    assert entry["release"] == {"command": "runpodctl remove pod $RUNPOD_POD_ID", "on": "host", "kind": "terminate",
                                "after_min": 45.0, "destroy_uncollected_after_h": 6.0}
    again = HostStore(tmp_path / "hosts.json").get("rented")  # read back from the file
    assert again.release == ReleasePolicy("runpodctl remove pod $RUNPOD_POD_ID", "host", "terminate", 45.0, 6.0)
    dialog = HostEditDialog(again)
    qtbot.addWidget(dialog)
    box = dialog.release_box
    assert box.preset.currentData() == "runpod-remove" and box.after.value() == 45
    assert box.force.isChecked() and box.force_hours.value() == 6
    dialog._save()
    assert dialog.result_profile == again  # opened and saved unchanged: the same profile


def test_editing_a_preset_makes_it_custom_and_a_stop_never_destroys_uncollected(qtbot):
    dialog = HostEditDialog(HostProfile(name="box", hostname="box.lab", release=preset_policy("shutdown")))
    qtbot.addWidget(dialog)
    dialog.show()
    box = dialog.release_box
    assert box.preset.currentData() == "shutdown" and box.command.text() == "sudo shutdown -h now"
    assert box.warning.isHidden() and not box.force.isEnabled()
    box.command.clear()
    qtbot.keyClicks(box.command, "sudo poweroff")
    assert box.preset.currentData() == "custom"
    box.force.setChecked(True)  # not reachable for a stop, but even if ticked it is not saved
    dialog._save()
    assert dialog.result_profile.release == ReleasePolicy("sudo poweroff", after_min=30.0)
    _choose(box.on, "local")  # (the dialog was accepted: hidden, its box still answers)
    assert not box.note.isHidden() and "the app runs the command here" in box.note.text()
    _choose(box.preset, "")  # None: the action is removed
    dialog._save()
    assert dialog.result_profile.release is None


def test_bad_release_input_is_refused_with_a_clear_message(qtbot, tmp_path):
    panel, hosts = _panel(qtbot, tmp_path, HostProfile(name="box", hostname="box.lab"))
    before = (tmp_path / "hosts.json").read_text()
    panel.select("box")
    dialog = panel.edit_host()
    qtbot.addWidget(dialog)
    box = dialog.release_box
    _choose(box.preset, "custom")
    _save(dialog)
    assert dialog.isVisible() and dialog.result_profile is None
    assert dialog.error.text() == ("Release command is required\npick a preset, or write the line that releases the "
                                   "instance, e.g. sudo shutdown -h now")
    assert dialog.invalid_field == "release.command" and box.command.property("invalid")
    assert dialog.pages.currentWidget() is box  # the page with the field at fault is shown
    assert "#d93025" in box.form.labelForField(box.command).styleSheet()
    _choose(box.preset, "sky-down")  # not a SkyPilot profile: CLUSTER is left for the user to name
    assert box.command.text() == "sky down -y CLUSTER"
    _save(dialog)
    assert dialog.result_profile is None and dialog.error.text().startswith(
        "Release command: replace CLUSTER with the name of your SkyPilot cluster")
    assert (tmp_path / "hosts.json").read_text() == before  # nothing saved
    box.command.setText("sky down -y my-cluster")
    _save(dialog)
    assert dialog.result() == dialog.DialogCode.Accepted
    assert hosts.get("box").release == ReleasePolicy("sky down -y my-cluster", "local", "terminate", 30.0)


def test_a_skypilot_cluster_is_offered_its_own_actions_first(qtbot):
    profile = HostProfile(name="sky-c1", hostname="1.2.3.4", provider="skypilot", cluster="c1")
    dialog = HostEditDialog(profile)
    qtbot.addWidget(dialog)
    box = dialog.release_box
    assert [box.preset.itemData(i) for i in range(1, 3)] == ["sky-down", "sky-stop"]
    assert "sky down c1" in box.preset.itemText(1) and "suggested for this SkyPilot cluster" in box.preset.itemText(1)
    assert "SkyPilot's sky stop / sky down are first" in box.note.text()
    _choose(box.preset, "sky-stop")
    assert (box.command.text(), box.on.currentData(), box.kind.currentData()) == ("sky stop -y c1", "local", "stop")
    dialog._save()
    assert dialog.result_profile.release == preset_policy("sky-stop", "c1")
    again = HostEditDialog(dialog.result_profile)  # the preset is recognised with the cluster's name in it
    qtbot.addWidget(again)
    assert again.release_box.preset.currentData() == "sky-stop"


def test_no_release_for_this_computer_or_a_slurm_cluster(qtbot):
    local = HostEditDialog(HostProfile(name=LOCAL))
    qtbot.addWidget(local)
    local.show()
    assert not local.pages.isTabVisible(1) and not local.pages.tabBar().isVisible()
    local._save()
    assert local.result_profile.release is None
    dialog = HostEditDialog(HostProfile(name="box", hostname="box.lab", release=preset_policy("shutdown")))
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.pages.isTabVisible(1) and dialog.pages.tabBar().isVisible()
    dialog.kind.setCurrentIndex(dialog.kind.findData("slurm"))
    assert not dialog.pages.isTabVisible(1) and dialog.slurm_box.isVisible()
    dialog.partition.setText("gpu")
    dialog._save()
    assert dialog.result_profile.release is None and dialog.result_profile.slurm == SlurmOptions(partition="gpu")


def test_every_release_setting_has_a_tooltip(qtbot):
    dialog = HostEditDialog(HostProfile(name="box", hostname="box.lab"))
    qtbot.addWidget(dialog)
    box = dialog.release_box
    inputs = [w for kind in (QComboBox, QAbstractSpinBox, QLineEdit, QAbstractButton) for w in box.findChildren(kind)
              if not isinstance(w.parent(), (QAbstractSpinBox, QComboBox))]
    assert len(inputs) >= 7
    assert [w.objectName() for w in inputs if not w.toolTip().strip()] == []
    preset_tips = [box.preset.itemData(i, Qt.ItemDataRole.ToolTipRole) for i in range(box.preset.count())]
    assert "sudo shutdown -h now" in preset_tips  # each preset's command on its entry


def test_a_saved_action_for_a_host_not_connected_is_said_to_go_at_the_next_connection(qtbot, tmp_path):
    panel, hosts = _panel(qtbot, tmp_path, HostProfile(name="box", hostname="box.lab"))
    rows = panel.release_rows
    assert not rows.isVisible()
    panel.select("box")
    dialog = panel.edit_host()
    qtbot.addWidget(dialog)
    _choose(dialog.release_box.preset, "shutdown")
    _save(dialog)
    qtbot.waitUntil(lambda: rows.label("box") is not None and rows.isVisible())
    assert rows.label("box").text() == ("box: release action saved: it is sent to the host at its next connection "
                                        "(Test connection, a launch)")
    assert not rows.button("box").isVisible()  # nothing on the host to cancel
    assert hosts.get("box").release == preset_policy("shutdown")
    dialog = panel.edit_host()
    qtbot.addWidget(dialog)
    _choose(dialog.release_box.preset, "")
    _save(dialog)
    assert rows.label("box").text().startswith("box: release action removed; the host keeps its old one until the "
                                               "app reaches it")
    assert "release action removed" in panel.item("box").toolTip()


def test_keep_outputs_is_a_launch_setting_remembered_with_the_others(window, qtbot):
    panel = window.launch_panel
    panel.advanced.setChecked(True)
    assert not panel.keep_outputs.isChecked() and panel.settings()["keep_outputs"] is False
    panel.keep_outputs.setChecked(True)
    assert panel.settings()["keep_outputs"] is True and panel.validate()
    assert "release that destroys the host's disk waits for them" in panel.keep_outputs.toolTip()
    window._save_settings()
    saved = json.loads(window.settings.value("launch/settings"))
    assert saved["keep_outputs"] is True
    panel.keep_outputs.setChecked(False)
    panel.apply_settings(saved)  # as the next start restores it
    assert panel.keep_outputs.isChecked() and panel.advanced.isChecked()
    panel.apply_settings({"workload": "mlp"})
    assert not panel.keep_outputs.isChecked()
