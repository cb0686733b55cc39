"""Add or edit a host profile; validation errors are shown inline, next to the form."""
from __future__ import annotations

import dataclasses

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
)

from ddpgui.core.hosts import AUTH_METHODS, HostError, HostProfile


class HostEditDialog(QDialog):
    def __init__(self, profile: HostProfile | None = None, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Edit host" if profile else "Add host")
        self.setObjectName("host_edit_dialog")
        self._original = profile
        local = profile is not None and profile.is_local
        form = QFormLayout()
        self.name = QLineEdit(profile.name if profile else "")
        self.hostname = QLineEdit(profile.hostname if profile else "")
        self.port = QSpinBox(maximum=65535, minimum=1, value=profile.port if profile else 22)
        self.user = QLineEdit(profile.user if profile else "")
        self.auth = QComboBox()
        self.auth.addItems(AUTH_METHODS)
        self.auth.setCurrentText(profile.auth if profile else "agent")
        self.key_file = QLineEdit(profile.key_file or "" if profile else "")
        self.proxy_jump = QLineEdit(", ".join(profile.proxy_jump) if profile else "")
        self.python = QLineEdit(profile.python if profile else "python3")
        self.run_root = QLineEdit(profile.run_root if profile else "~/.ddpgui")
        self.price = QDoubleSpinBox(maximum=10000, decimals=2, suffix=" /h", specialValueText="no price")
        self.price.setValue(profile.price_per_hour or 0 if profile else 0)
        self.notes = QLineEdit(profile.notes if profile else "")
        self.rdzv_address = QLineEdit(profile.rdzv_address or "" if profile else "", placeholderText="the hostname",
                                      toolTip="Multi-node runs: this host's address as the other nodes reach it "
                                              "(e.g. its private address), when it is not the hostname above")
        self.nccl_env = QLineEdit(" ".join(f"{k}={v}" for k, v in (profile.nccl_env if profile else {}).items()),
                                  placeholderText="NCCL_SOCKET_IFNAME=eth0",
                                  toolTip="Environment variables for runs on this host (space separated KEY=VALUE)")
        rows = [("Name", self.name), ("Hostname", self.hostname), ("Port", self.port), ("User", self.user),
                ("Login", self.auth), ("Key file", self.key_file), ("ProxyJump", self.proxy_jump),
                ("Python", self.python), ("Run folder", self.run_root), ("Price", self.price),
                ("Address for other nodes", self.rdzv_address), ("Node environment", self.nccl_env),
                ("Notes", self.notes)]
        for label, widget in rows:
            form.addRow(label, widget)
            if local and widget not in (self.python, self.run_root, self.price, self.notes, self.nccl_env,
                                        self.rdzv_address):
                widget.setEnabled(False)
        self.error = QLabel(objectName="error_label", wordWrap=True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._save)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.error)
        layout.addWidget(buttons)
        self.result_profile: HostProfile | None = None

    def profile(self) -> HostProfile:
        """The profile the form describes (validated as a whole: a HostError names the bad field)."""
        values = dict(
            name=self.name.text().strip(), hostname=self.hostname.text().strip(), port=self.port.value(),
            user=self.user.text().strip(), auth=self.auth.currentText(), key_file=self.key_file.text().strip() or None,
            proxy_jump=[p.strip() for p in self.proxy_jump.text().split(",") if p.strip()],
            python=self.python.text().strip() or "python3", run_root=self.run_root.text().strip() or "~/.ddpgui",
            price_per_hour=self.price.value() or None, notes=self.notes.text(),
            rdzv_address=self.rdzv_address.text().strip() or None, nccl_env=self._env())
        return dataclasses.replace(self._original, **values) if self._original else HostProfile(**values)

    def _env(self) -> dict[str, str]:
        env = {}
        for part in self.nccl_env.text().split():
            key, sep, value = part.partition("=")
            if not sep or not key:
                raise ValueError(f"node environment: write KEY=VALUE pairs separated by spaces, got {part!r}")
            env[key] = value
        return env

    def _save(self) -> None:
        try:
            profile = self.profile()
            profile.validate()
        except (HostError, ValueError) as exc:
            self.error.setText(f"{exc} {getattr(exc, 'hint', '')}".strip())
            return
        self.result_profile = profile
        self.accept()
