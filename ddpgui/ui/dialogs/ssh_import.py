"""Import from ~/.ssh/config, the aliases chosen: a list to tick (every importable one ticked, a SkyPilot cluster said
so), the files read (the config and those its Includes name), and what was not imported with the reason."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QVBoxLayout,
)

from ddpgui.core.hosts import HostError, HostProfile, HostStore
from ddpgui.core.hosts.ssh_config import profiles_from_ssh_config, read_ssh_config


def _where(profile: HostProfile) -> str:
    user = f"{profile.user}@" if profile.user else ""
    port = f":{profile.port}" if profile.port != 22 else ""
    jump = f" via {', '.join(profile.proxy_jump)}" if profile.proxy_jump else ""
    cluster = f"  — SkyPilot cluster {profile.cluster}" if profile.provider == "skypilot" else ""
    return f"{profile.name}   ({user}{profile.hostname}{port}{jump}){cluster}"


def _summary(files: list[str], found: int) -> str:
    included = len(files) - 1
    read = f"Read {files[0]}" + (f" and {included} file{'s' if included != 1 else ''} it includes" if included else "")
    return f"{read}: {found} host{'s' if found != 1 else ''} to add." if found else \
        f"{read}: no host of it can be added."


class SshImportDialog(QDialog):
    """Raises OSError / HostError when the config cannot be read; :meth:`import_chosen` adds the ticked ones."""

    def __init__(self, hosts: HostStore, path: str | Path | None = None, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Import hosts from ~/.ssh/config")
        self.setObjectName("ssh_import_dialog")
        self.setMinimumWidth(560)
        self.hosts = hosts
        self.profiles, report = profiles_from_ssh_config(read_ssh_config(path), hosts.names())
        self.files, self.notes, self.skipped = report.files, report.notes, report.skipped
        self.list = QListWidget(objectName="ssh_import_list")
        for profile in self.profiles:
            item = QListWidgetItem(_where(profile))
            item.setData(Qt.ItemDataRole.UserRole, profile.name)
            item.setToolTip(profile.notes)
            item.setCheckState(Qt.CheckState.Checked)
            self.list.addItem(item)
        layout = QVBoxLayout(self)
        self.summary = QLabel(_summary(self.files, len(self.profiles)), objectName="ssh_import_summary",
                              wordWrap=True)
        layout.addWidget(self.summary)
        if self.profiles:
            layout.addWidget(QLabel("Tick the hosts to add:"))
        layout.addWidget(self.list, 2)
        self.list.setVisible(bool(self.profiles))
        self.details = QPlainTextEdit(self._details_text(), objectName="ssh_import_details", readOnly=True)
        self.details.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        layout.addWidget(QLabel("What was not imported and why, and the files read:"))
        layout.addWidget(self.details, 3)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.import_button = buttons.addButton("Import", QDialogButtonBox.ButtonRole.AcceptRole)
        self.import_button.setEnabled(bool(self.profiles))
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        screen = (parent.screen() if parent is not None else None) or QGuiApplication.primaryScreen()
        room = screen.availableGeometry()
        self.resize(min(820, room.width() - 40), min(620, room.height() - 60))

    def _details_text(self) -> str:
        lines = ["Not imported:"] + [f"  {what}: {why}" for what, why in self.skipped] + [""] if self.skipped else []
        if self.notes:
            lines += ["Notes:"] + [f"  {note}" for note in self.notes] + [""]
        return "\n".join(lines + ["Files read, in the order ssh reads them:"] + [f"  {path}" for path in self.files])

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
