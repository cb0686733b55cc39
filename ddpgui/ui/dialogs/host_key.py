"""Host key dialogs: confirm an unknown key; refuse a changed one (like OpenSSH)."""
from __future__ import annotations

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QVBoxLayout

from ddpgui.core.ssh.known_hosts import HostKeyInfo


class UnknownHostKeyDialog(QDialog):
    """Shows the key type and SHA256 fingerprint; Accept stores the key, Reject refuses the connection."""

    def __init__(self, info: HostKeyInfo, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Unknown host key")
        self.setObjectName("unknown_host_key_dialog")
        layout = QVBoxLayout(self)
        text = (f"<b>{info.name}</b> is not a known host.<br><br>"
                f"Key type: <tt>{info.key_type}</tt><br>"
                f"Fingerprint: <tt>{info.sha256_fingerprint}</tt><br><br>"
                "Compare the fingerprint with the one your provider shows (or <tt>ssh-keygen -lf</tt> on the "
                "host) before you accept.")
        if info.other_known_types:
            text += ("<br><br><b>Note:</b> a key of another type is already known for this host "
                     f"({', '.join(info.other_known_types)}); a new key type is unusual.")
        label = QLabel(text)
        label.setWordWrap(True)
        label.setTextInteractionFlags(label.textInteractionFlags() | label.textInteractionFlags().TextSelectableByMouse)
        layout.addWidget(label)
        buttons = QDialogButtonBox()
        self.accept_button = buttons.addButton("Accept and remember", QDialogButtonBox.ButtonRole.AcceptRole)
        self.reject_button = buttons.addButton("Reject", QDialogButtonBox.ButtonRole.RejectRole)
        self.reject_button.setDefault(True)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)


class ChangedHostKeyDialog(QDialog):
    """The host's key changed: explain the risk and how to fix it; there is no way to accept here."""

    def __init__(self, host: str, message: str, hint: str = "", parent=None):
        super().__init__(parent)
        self.setWindowTitle("Host key changed")
        self.setObjectName("changed_host_key_dialog")
        layout = QVBoxLayout(self)
        label = QLabel(f"<b>The host key of {host} has changed.</b><br><br>"
                       "Someone could be intercepting the connection (a man-in-the-middle attack), or the "
                       "machine was reinstalled. The connection was refused.<br><br>"
                       f"<tt>{message}</tt><br><br>{hint}")
        label.setWordWrap(True)
        layout.addWidget(label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
