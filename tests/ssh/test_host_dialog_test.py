"""The host dialog's Test connection against the real loopback sshd: the profile as typed (not saved) is tried on
a worker (the dialog keeps answering), and the result is said in words inside the dialog."""
import re
import socket

import pytest

from ddpgui.core.hosts import HostStore
from ddpgui.ui.dialogs.host_edit import HostEditDialog

pytestmark = pytest.mark.slow


def _closed_port() -> int:
    """A loopback port nothing listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dialog(qtbot, ssh_env, tmp_path, **fields) -> tuple[HostEditDialog, HostStore]:
    hosts = HostStore(tmp_path / "hosts.json")
    dialog = HostEditDialog(None, hosts=hosts, known_hosts=ssh_env.known_hosts(tmp_path))
    qtbot.addWidget(dialog)
    profile = ssh_env.profile("dialog-box", **fields)
    dialog.name.setText(profile.name)
    dialog.hostname.setText(profile.hostname)
    dialog.port.setValue(profile.port)
    dialog.user.setText(profile.user)
    dialog.auth.setCurrentIndex(dialog.auth.findData("key"))
    dialog.key_file.setText(profile.key_file)
    dialog.python.setText(profile.python)
    dialog.run_root.setText(profile.run_root)
    dialog.show()
    return dialog, hosts


def _test(dialog: HostEditDialog, qtbot) -> str:
    dialog.test_button.click()
    # the click returned at once: the connection is tried on a worker while the dialog says so
    assert dialog.test_state == "busy" and dialog.test_result.text().startswith("Testing 127.0.0.1")
    assert not dialog.test_button.isEnabled()
    qtbot.waitUntil(lambda: dialog.test_state != "busy", timeout=180_000)
    assert dialog.test_button.isEnabled() and dialog.test_result.isVisible()
    return dialog.test_result.text()


def test_testing_the_typed_profile_says_it_connected_with_a_probe_summary(qtbot, ssh_env, tmp_path):
    dialog, hosts = _dialog(qtbot, ssh_env, tmp_path)
    text = _test(dialog, qtbot)
    assert dialog.test_state == "ok", text
    assert text.startswith("Connected to 127.0.0.1: ") and re.search(r"CPU only, \d+ cores|GPU", text), text
    assert "torch" in text, text  # its version, or "no torch" with what the host cannot run on the next line
    assert "no torch" not in text or "\nBut: PyTorch is not installed" in text, text
    assert "dialog-box" not in hosts and dialog.result_profile is None  # tested, not saved
    dialog._save()  # the form is still there to save
    assert dialog.result_profile is not None and dialog.result_profile.port == ssh_env.server.port


def test_testing_a_wrong_port_says_the_error_and_its_hint(qtbot, ssh_env, tmp_path):
    dialog, hosts = _dialog(qtbot, ssh_env, tmp_path, port=_closed_port())
    text = _test(dialog, qtbot)
    assert dialog.test_state == "error", text
    assert text.startswith("Could not connect: ") and "\nHint: " in text, text
    assert str(dialog.port.value()) in text, text  # which address it tried
    assert not re.search(r"\b[A-Z][A-Za-z]+(Error|Exception|Unreachable):", text), text  # words, no class names
    assert "dialog-box" not in hosts


def test_an_invalid_form_is_not_tested(qtbot, ssh_env, tmp_path):
    dialog, _ = _dialog(qtbot, ssh_env, tmp_path)
    dialog.hostname.setText("")
    assert dialog.test_connection() is None
    assert dialog.test_state == "" and not dialog.test_result.isVisible()
    assert dialog.invalid_field == "hostname" and dialog.error.text()
