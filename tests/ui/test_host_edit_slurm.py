"""The host form for Slurm clusters: the Slurm fields save and round-trip, a bad one is marked, the kind switches."""
from ddpgui.core.hosts import HostProfile, HostStore, SlurmOptions, local_profile
from ddpgui.ui.dialogs.host_edit import HostEditDialog
from ddpgui.ui.widgets.hosts_panel import HostsPanel

CLUSTER = HostProfile(name="hpc", hostname="login.hpc.example.org", port=2200, user="ana", auth="key",
                      key_file="~/.ssh/id_hpc", python="~/venv/bin/python", run_root="/scratch/ana/ddpgui",
                      kind="slurm", slurm=SlurmOptions(partition="gpu,gpu-long", account="lab-42", qos="normal",
                                                       time_limit="1-12:00:00", gpus_per_node=4,
                                                       gpu_flag="gpus-per-node", cpus_per_task=16, mem="64G",
                                                       sbatch_lines=["--constraint=a100", "--exclusive"],
                                                       setup_lines=["module load cuda/12.1",
                                                                    "source ~/venv/bin/activate"],
                                                       max_queued_jobs=3))


def _dialog(qtbot, profile=None):
    dialog = HostEditDialog(profile)
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def _label(form, widget):
    return form.labelForField(widget).text()


def test_fill_the_slurm_fields_save_and_the_profile_round_trips(qtbot, tmp_path):
    dialog = _dialog(qtbot)
    assert not dialog.slurm_box.isVisibleTo(dialog)
    dialog.kind.setCurrentIndex(dialog.kind.findData("slurm"))
    assert dialog.slurm_box.isVisibleTo(dialog) and _label(dialog.form, dialog.hostname) == "Login node"
    assert not dialog.form.isRowVisible(dialog.rdzv_address)  # a job's first node hosts the rendezvous
    for widget, text in ((dialog.name, "hpc"), (dialog.hostname, "login.hpc.example.org"), (dialog.user, "ana"),
                         (dialog.key_file, "~/.ssh/id_hpc"), (dialog.python, "~/venv/bin/python"),
                         (dialog.run_root, "/scratch/ana/ddpgui"), (dialog.partition, " gpu,gpu-long "),
                         (dialog.account, "lab-42"), (dialog.qos, "normal"), (dialog.time_limit, "1-12:00:00"),
                         (dialog.mem, "64G")):
        widget.setText(text)
    dialog.port.setValue(2200)
    dialog.auth.setCurrentIndex(dialog.auth.findData("key"))
    dialog.gpus_per_node.setValue(4)
    dialog.gpu_flag.setCurrentIndex(dialog.gpu_flag.findData("gpus-per-node"))
    dialog.cpus_per_task.setValue(16)
    dialog.max_queued_jobs.setValue(3)
    dialog.sbatch_lines.setPlainText("#SBATCH --constraint=a100\n\n  --exclusive  \n")
    dialog.setup_lines.setPlainText("module load cuda/12.1\nsource ~/venv/bin/activate\n")
    dialog._save()
    assert dialog.error.text() == "" and dialog.result_profile == CLUSTER
    store = HostStore(tmp_path / "hosts.json")
    store.add(dialog.result_profile)
    again = _dialog(qtbot, HostStore(tmp_path / "hosts.json").get("hpc"))
    assert again.kind.currentData() == "slurm" and again.slurm_box.isVisibleTo(again)
    assert again.sbatch_lines.toPlainText() == "--constraint=a100\n--exclusive"
    again._save()
    assert again.result_profile == CLUSTER


def test_an_invalid_partition_is_shown_on_its_field_and_nothing_is_saved(qtbot):
    dialog = _dialog(qtbot, CLUSTER)
    dialog.partition.setText("gpu;rm -rf ~")
    dialog._save()
    assert dialog.result_profile is None
    assert dialog.error.text().startswith("slurm.partition: must be a partition name") and "gpu;rm -rf ~" in \
        dialog.error.text()
    assert dialog.invalid_field == "slurm.partition" and dialog.partition.property("invalid") is True
    assert "d93025" in dialog.slurm_form.labelForField(dialog.partition).styleSheet()
    assert dialog.slurm_form.labelForField(dialog.account).styleSheet() == ""
    dialog.partition.setText("gpu")
    dialog.time_limit.setText("90 minutes")
    dialog._save()
    assert dialog.invalid_field == "slurm.time_limit" and "D-HH:MM:SS" in dialog.error.text()
    assert dialog.slurm_form.labelForField(dialog.partition).styleSheet() == ""
    assert dialog.partition.property("invalid") is False
    dialog.time_limit.setText("90")
    dialog.gpus_per_node.setValue(2)
    dialog.sbatch_lines.setPlainText("--gres=gpu:a100:2")
    dialog._save()
    assert dialog.invalid_field == "slurm.sbatch_lines" and "asks for GPUs" in dialog.error.text()
    assert "d93025" in dialog.slurm_form.labelForField(dialog.sbatch_lines).styleSheet()
    dialog.sbatch_lines.setPlainText("")
    dialog._save()
    assert dialog.result_profile.slurm.partition == "gpu" and dialog.result_profile.slurm.time_limit == "90"


def test_a_bad_ssh_field_is_marked_too(qtbot):
    dialog = _dialog(qtbot, CLUSTER)
    dialog.hostname.setText("login node")
    dialog._save()
    assert dialog.result_profile is None and dialog.invalid_field == "hostname"
    assert "d93025" in dialog.form.labelForField(dialog.hostname).styleSheet()


def test_a_cluster_turned_into_an_ssh_host_drops_its_slurm_options(qtbot):
    dialog = _dialog(qtbot, CLUSTER)
    dialog.kind.setCurrentIndex(dialog.kind.findData("ssh"))
    assert not dialog.slurm_box.isVisibleTo(dialog) and _label(dialog.form, dialog.hostname) == "Hostname"
    dialog._save()
    assert (dialog.result_profile.kind, dialog.result_profile.slurm) == ("ssh", None)
    assert dialog.result_profile.hostname == "login.hpc.example.org"


def test_the_dialog_stays_within_the_screen_when_the_slurm_fields_show(qtbot):
    dialog = _dialog(qtbot)
    room = dialog.screen().availableGeometry()
    ssh_size = dialog.size()
    dialog.kind.setCurrentIndex(dialog.kind.findData("slurm"))
    assert dialog.width() > ssh_size.width()
    assert dialog.width() <= room.width() and dialog.height() <= room.height()
    dialog.kind.setCurrentIndex(dialog.kind.findData("ssh"))
    assert dialog.size() == ssh_size


def test_this_computer_cannot_become_a_cluster(qtbot):
    dialog = _dialog(qtbot, local_profile())
    assert not dialog.kind.isEnabled() and dialog.kind.currentData() == "ssh"


def test_the_hosts_panel_says_slurm_and_the_partition(qtbot, tmp_path):
    store = HostStore(tmp_path / "hosts.json")
    store.add(CLUSTER)
    store.add(HostProfile(name="box", hostname="10.0.0.1"))
    panel = HostsPanel(store)
    qtbot.addWidget(panel)
    assert panel.item("hpc").text().splitlines()[0] == \
        "hpc  (ana@login.hpc.example.org)  · Slurm · partition gpu,gpu-long"
    assert "Slurm" not in panel.item("box").text()
