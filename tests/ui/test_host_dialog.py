"""The host form: a complete new profile saves; bad fields are explained inline and nothing is saved."""
from ddpgui.core.hosts import HostProfile
from ddpgui.ui.dialogs.host_edit import HostEditDialog


def _fill(dialog, **values):
    for name, value in values.items():
        widget = getattr(dialog, name)
        widget.setValue(value) if hasattr(widget, "setValue") else widget.setText(value)


def test_a_new_host_saves_with_every_field(qtbot):
    dialog = HostEditDialog()
    qtbot.addWidget(dialog)
    _fill(dialog, name="gpu-1", hostname="10.0.0.5", port=2222, user="ana", key_file="~/.ssh/id_ed25519",
          rdzv_address="192.168.1.5", nccl_env="NCCL_SOCKET_IFNAME=eth0 NCCL_IB_DISABLE=1", price=2.5)
    dialog.auth.setCurrentIndex(dialog.auth.findData("key"))
    dialog._save()
    profile = dialog.result_profile
    assert profile == HostProfile(name="gpu-1", hostname="10.0.0.5", port=2222, user="ana", auth="key",
                                  key_file="~/.ssh/id_ed25519", price_per_hour=2.5, rdzv_address="192.168.1.5",
                                  nccl_env={"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"})


def test_bad_fields_are_named_and_the_form_stays_open(qtbot):
    dialog = HostEditDialog(HostProfile(name="box", hostname="box.lab"))
    qtbot.addWidget(dialog)
    _fill(dialog, name="bad name!")
    dialog._save()
    assert dialog.result_profile is None and "name" in dialog.error.text()
    _fill(dialog, name="box", nccl_env="NCCL_SOCKET_IFNAME")
    dialog._save()
    assert dialog.result_profile is None and "KEY=VALUE" in dialog.error.text()
    _fill(dialog, nccl_env="")
    dialog._save()
    assert dialog.result_profile.hostname == "box.lab"  # the rest of the profile was kept
