"""Questions a worker thread asks the user (host key, password): it blocks on a GUI-thread dialog.

The dialog is opened non-modally-blocking (``open()``, window-modal) so the event
loop keeps running; the worker waits on a :class:`threading.Event` until the
user answers, the dialog is closed, or the app quits.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtWidgets import QDialog, QMessageBox, QWidget

from ddpgui.core.hosts import secrets
from ddpgui.core.ssh.auth import SecretRequest
from ddpgui.core.ssh.known_hosts import HostKeyInfo

from .dialogs.host_key import UnknownHostKeyDialog
from .dialogs.secret import SecretDialog


@dataclass
class _Question:
    kind: str
    payload: object
    answer: object = None
    answered: threading.Event = field(default_factory=threading.Event)
    keyring_problem: str | None = None  # why the secret cannot be remembered (asked on the worker)
    remember: bool = False  # the user ticked "Remember": the worker stores it in the keyring


class Prompts(QObject):
    """``confirm_host_key`` and ``ask_secret`` callbacks for core, safe to call from any worker thread."""

    dialog_opened = Signal(object)  # the dialog, for tests and for raising the window
    _asked = Signal(object)
    _not_remembered = Signal(object)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._window = parent
        self._closing = threading.Event()
        self.current: QDialog | None = None
        self._asked.connect(self._show, Qt.ConnectionType.QueuedConnection)
        self._not_remembered.connect(self._say_not_remembered, Qt.ConnectionType.QueuedConnection)

    def confirm_host_key(self, info: HostKeyInfo) -> bool:
        return bool(self._ask("host_key", info))

    def ask_secret(self, request: SecretRequest) -> str | None:
        return self._ask("secret", request)

    def close(self) -> None:
        self._closing.set()

    def _say_not_remembered(self, exc: secrets.SecretsUnavailable) -> None:
        box = QMessageBox(QMessageBox.Icon.Warning, "Not remembered",
                          f"Not stored in the keyring: {exc.args[0]}.\nIt is used for this connection only and asked "
                          "for again next time.",
                          QMessageBox.StandardButton.Ok, self._window)
        box.setObjectName("secret_not_remembered")
        box.setInformativeText(exc.hint[:1].upper() + exc.hint[1:])
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.dialog_opened.emit(box)
        box.open()

    def _ask(self, kind: str, payload: object) -> object:
        """On the worker: the keyring is asked and written here, never on the GUI thread (D-Bus may hang)."""
        question = _Question(kind, payload)
        if kind == "secret":
            problem = secrets.storage_problem()
            question.keyring_problem = str(problem) if problem else None
        self._asked.emit(question)
        while not question.answered.wait(0.1):
            if self._closing.is_set():
                return None
        if question.remember:
            try:
                secrets.set_secret(payload.profile, payload.kind, question.answer)
            except secrets.SecretsUnavailable as exc:  # used for this login, not remembered
                self._not_remembered.emit(exc)
        return question.answer

    @Slot(object)
    def _show(self, question: _Question) -> None:
        if question.kind == "host_key":
            dialog = UnknownHostKeyDialog(question.payload, self._window)
        else:
            request: SecretRequest = question.payload
            dialog = SecretDialog(request.prompt, self._window, keyring_problem=question.keyring_problem)

        def done(result: int) -> None:
            if question.kind == "host_key":
                question.answer = result == QDialog.DialogCode.Accepted
            elif result == QDialog.DialogCode.Accepted and dialog.secret.text():
                question.answer = dialog.secret.text()
                question.remember = dialog.remember.isChecked()
            question.answered.set()
            self.current = None
            dialog.deleteLater()

        dialog.finished.connect(done)
        self.current = dialog
        dialog.open()
        self.dialog_opened.emit(dialog)
