"""Password / key passphrase prompt, with "remember in the system keyring"."""
from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QDialog, QDialogButtonBox, QLabel, QLineEdit, QVBoxLayout


class SecretDialog(QDialog):
    def __init__(self, prompt: str, parent=None, keyring_problem: str | None = None):
        super().__init__(parent)
        self.setWindowTitle("Authentication")
        self.setObjectName("secret_dialog")
        layout = QVBoxLayout(self)
        label = QLabel(prompt)
        label.setWordWrap(True)
        layout.addWidget(label)
        self.secret = QLineEdit()
        self.secret.setEchoMode(QLineEdit.EchoMode.Password)
        layout.addWidget(self.secret)
        self.remember = QCheckBox("Remember in the system keyring")
        layout.addWidget(self.remember)
        if keyring_problem:  # never offer to remember what cannot be stored
            self.remember.setEnabled(False)
            self.remember.setText("Cannot remember it: no keyring is available (it will be asked each time)")
            self.remember.setToolTip(keyring_problem)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
