"""Import from ~/.ssh/config, the aliases chosen: a list to tick (every importable one ticked), and what cannot be
imported with the reason.  paramiko reports a ``*`` pattern for every config (its defaults): that one is not shown."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QListWidget, QListWidgetItem, QVBoxLayout

from ddpgui.core.hosts import HostError, HostProfile, HostStore
from ddpgui.core.hosts.ssh_config import profiles_from_ssh_config, read_ssh_config


def _where(profile: HostProfile) -> str:
    user = f"{profile.user}@" if profile.user else ""
    port = f":{profile.port}" if profile.port != 22 else ""
    jump = f" via {', '.join(profile.proxy_jump)}" if profile.proxy_jump else ""
    return f"{profile.name}   ({user}{profile.hostname}{port}{jump})"


class SshImportDialog(QDialog):
    """Raises OSError / HostError when the config cannot be read; :meth:`import_chosen` adds the ticked ones."""

    def __init__(self, hosts: HostStore, path: str | Path | None = None, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Import hosts from ~/.ssh/config")
        self.setObjectName("ssh_import_dialog")
        self.setMinimumWidth(520)
        self.hosts = hosts
        self.profiles, report = profiles_from_ssh_config(read_ssh_config(path), hosts.names())
        self.skipped = [(alias, why) for alias, why in report.skipped if alias != "*"]
        self.list = QListWidget(objectName="ssh_import_list")
        for profile in self.profiles:
            item = QListWidgetItem(_where(profile))
            item.setData(Qt.ItemDataRole.UserRole, profile.name)
            item.setCheckState(Qt.CheckState.Checked)
            self.list.addItem(item)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Tick the hosts to add:" if self.profiles else "No host of the config can be added."))
        layout.addWidget(self.list)
        self.list.setVisible(bool(self.profiles))
        if self.skipped:
            skipped = QLabel("Not imported:\n" + "\n".join(f"  {alias}: {why}" for alias, why in self.skipped),
                             objectName="ssh_import_skipped", wordWrap=True)
            layout.addWidget(skipped)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.import_button = buttons.addButton("Import", QDialogButtonBox.ButtonRole.AcceptRole)
        self.import_button.setEnabled(bool(self.profiles))
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def chosen(self) -> list[str]:
        return [self.list.item(row).data(Qt.ItemDataRole.UserRole) for row in range(self.list.count())
                if self.list.item(row).checkState() == Qt.CheckState.Checked]

    def import_chosen(self) -> tuple[list[str], list[tuple[str, str]]]:
        """Add the ticked profiles (a host reached through another one after it); (added, refused with why)."""
        waiting = [p for p in self.profiles if p.name in self.chosen()]
        added: list[str] = []
        errors: dict[str, str] = {}
        while waiting:
            progress = False
            for profile in list(waiting):
                try:
                    self.hosts.add(profile)
                except HostError as exc:
                    errors[profile.name] = f"{exc}" + (f" ({exc.hint})" if exc.hint else "")
                    continue
                waiting.remove(profile)
                errors.pop(profile.name, None)
                added.append(profile.name)
                progress = True
            if not progress:
                break
        return added, [(p.name, errors[p.name]) for p in waiting]
