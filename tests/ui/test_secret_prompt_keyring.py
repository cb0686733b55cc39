"""The password prompt never offers (or claims) to remember a secret the keyring cannot keep."""
import threading

import keyring
import keyring.backends.null
from keyring.backend import KeyringBackend
from PySide6.QtWidgets import QMessageBox, QWidget

from ddpgui.core.hosts import secrets
from ddpgui.core.ssh.auth import SecretRequest
from ddpgui.ui.prompts import Prompts


class ForgetfulKeyring(KeyringBackend):
    """Accepts every secret and keeps none (as a misconfigured third-party backend can)."""

    priority = 1

    def get_password(self, service: str, username: str) -> None:
        return None

    def set_password(self, service: str, username: str, password: str) -> None:
        pass

    def delete_password(self, service: str, username: str) -> None:
        pass


def _ask(qtbot, prompts):
    answers = []
    thread = threading.Thread(target=lambda: answers.append(
        prompts.ask_secret(SecretRequest("box", secrets.PASSWORD, "Password for box:"))))
    with qtbot.waitSignal(prompts.dialog_opened, timeout=10_000) as opened:
        thread.start()
    return opened.args[0], thread, answers


def test_no_keyring_the_remember_box_is_off_and_says_why(qtbot):
    keyring.set_keyring(keyring.backends.null.Keyring())
    parent = QWidget()
    qtbot.addWidget(parent)
    prompts = Prompts(parent)
    dialog, thread, answers = _ask(qtbot, prompts)
    assert not dialog.remember.isEnabled() and not dialog.remember.isChecked()
    assert "no keyring is available" in dialog.remember.text()
    assert "keyring.backends.null" in dialog.remember.toolTip()
    dialog.secret.setText("hunter2")
    dialog.accept()
    thread.join(10)
    assert answers == ["hunter2"]  # used for this login


def test_a_keyring_that_does_not_keep_it_is_reported_not_claimed(qtbot):
    forgetful = ForgetfulKeyring()
    keyring.set_keyring(forgetful)
    parent = QWidget()
    qtbot.addWidget(parent)
    prompts = Prompts(parent)
    dialog, thread, answers = _ask(qtbot, prompts)
    assert dialog.remember.isEnabled()
    dialog.secret.setText("hunter2")
    dialog.remember.setChecked(True)
    with qtbot.waitSignal(prompts.dialog_opened, timeout=10_000) as opened:
        dialog.accept()
    box = opened.args[0]
    assert isinstance(box, QMessageBox) and box.objectName() == "secret_not_remembered"
    assert "Not stored in the keyring" in box.text() and "did not keep the password of box" in box.text()
    box.close()
    thread.join(10)
    assert answers == ["hunter2"]
