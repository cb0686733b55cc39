"""The hosts list: This computer first, a status dot per host and its probe summary.

Each line of an entry is elided to the list's width (the whole text is its tooltip): a long host name, address
or error never widens the list or the window.

A host whose GPUs the app samples (ddpgui/ui/gpu_watch.py) shows a compact "3 of 8 GPUs free" in front of its
probe summary, its busy GPUs' holders in the tooltip; it is rendered again only when that text changes.

A host whose probe found something it cannot run (no torch for its Python, say) has its dot in the error colour
and the problems with their hints in its tooltip.  A host saved from the host dialog after a successful Test
connection keeps that test's probe (:attr:`HostsPanel.probed` tells the window to remember it).

A host with a release action (the host dialog's "Release when idle") that is connected has a line under the list
("gpu-1: releases in 12 min" with Cancel, a release that failed in the error colour): ddpgui/ui/release_watch.py
asks the host, given the run manager's connections (``targets``) and a worker pool's ``start``.

Several hosts may be selected (Ctrl/Shift-click) for one multi-node run: the first
one selected is node 0.  The current host (the last clicked) still drives the launch
form's per-host choices.
"""
from __future__ import annotations

from PySide6.QtCore import QItemSelectionModel, QSize, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QIcon, QPainter, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGridLayout,
    QLabel,
    QListView,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QSizePolicy,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from ddpgui.core.hosts import LOCAL, HostError, HostProfile, HostStore
from ddpgui.core.ssh.known_hosts import KnownHosts

from ..dialogs.host_edit import HostEditDialog
from ..dialogs.host_test import probe_summary, problem_lines
from ..dialogs.ssh_import import SshImportDialog
from ..release_watch import ReleaseWatch
from .release_rows import ReleaseRows

STATUS_COLORS = {"unknown": "#9aa0a6", "checking": "#4c8df6", "reachable": "#34a853", "busy": "#f29900",
                 "error": "#d93025"}


def status_icon(status: str) -> QIcon:
    pixmap = QPixmap(14, 14)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(QBrush(QColor(STATUS_COLORS.get(status, STATUS_COLORS["unknown"]))))
    painter.drawEllipse(1, 1, 12, 12)
    painter.end()
    return QIcon(pixmap)


class ElidedLines(QStyledItemDelegate):
    """Items as wide as the list's viewport at most, each line of their text elided at the right (no wrapping):
    the list never scrolls sideways, never asks for more width."""

    def initStyleOption(self, option: QStyleOptionViewItem, index) -> None:  # noqa: N802 (Qt's name)
        super().initStyleOption(option, index)
        option.features &= ~QStyleOptionViewItem.ViewItemFeature.WrapText
        option.textElideMode = Qt.TextElideMode.ElideRight

    def sizeHint(self, option: QStyleOptionViewItem, index) -> QSize:  # noqa: N802
        hint = super().sizeHint(option, index)
        return QSize(min(hint.width(), max(1, self.parent().viewport().width())), hint.height())


class HostsPanel(QWidget):
    host_selected = Signal(str)
    nodes_selected = Signal(list)  # the selected host names in selection order (node 0 first)
    test_requested = Signal(str)
    hosts_changed = Signal()
    probed = Signal(str, dict)  # a host saved with its dialog's successful test: its name and that test's probe

    def __init__(self, hosts: HostStore, targets=None, start=None, parent=None):
        super().__init__(parent)
        self.hosts = hosts
        #: The host keys the dialog's Test connection trusts (None: OpenSSH's files and the app's).
        self.known_hosts: KnownHosts | None = None
        self.status: dict[str, str] = {}
        self.details: dict[str, str] = {}
        self.probes: dict[str, dict] = {}
        #: host → (compact GPU summary, its tooltip lines), from the host monitor (:meth:`set_gpu_summary`)
        self.gpu_summaries: dict[str, tuple[str, str]] = {}
        self.list = QListWidget(objectName="hosts_list")
        self.list.setIconSize(QSize(14, 14))
        self.list.setWordWrap(False)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setItemDelegate(ElidedLines(self.list))
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setResizeMode(QListView.ResizeMode.Adjust)  # items laid out again (re-elided) on resize
        self.list.setSizePolicy(QSizePolicy.Policy.Ignored, self.list.sizePolicy().verticalPolicy())
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.list.setToolTip("Ctrl- or Shift-click several hosts for one multi-node run (the first selected is node 0)")
        self.list.currentItemChanged.connect(self._on_current)
        self.list.itemSelectionChanged.connect(self._on_selection)
        self._order: list[str] = []
        title = QLabel("Hosts", objectName="panel_title")
        buttons = QGridLayout()  # two rows of three: the panel (and the window) stays narrow
        self.buttons: dict[str, QPushButton] = {}
        for key, text, tip, slot in (("add", "Add", "Add an SSH host or a Slurm cluster", self.add_host),
                                     ("edit", "Edit", "Edit the selected host", self.edit_host),
                                     ("duplicate", "Copy", "Duplicate the selected host", self.duplicate_host),
                                     ("delete", "Delete", "Delete the selected host", self.delete_host),
                                     ("import", "Import", "Import aliases from ~/.ssh/config", self.import_ssh),
                                     ("test", "Test connection", "Connect, check the host key and probe the host: its GPUs, "
                                      "torch and what it can run (F5)",
                                      lambda: self.test_requested.emit(self.current()))):
            button = QPushButton(text, toolTip=tip, objectName=f"host_{key}")
            button.clicked.connect(slot)
            buttons.addWidget(button, len(self.buttons) // 3, len(self.buttons) % 3)
            self.buttons[key] = button
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(title)
        layout.addWidget(self.list, 1)
        self.release_rows = ReleaseRows()
        layout.addWidget(self.release_rows)
        layout.addLayout(buttons)
        #: The hosts' release lines (None without the run manager's connections to ask the hosts through).
        self.release: ReleaseWatch | None = None
        if targets is not None and start is not None:
            self.release = ReleaseWatch(hosts, targets, start, self)
            self.release.changed.connect(self._release_changed)
            self.release_rows.cancel_requested.connect(self.release.cancel)
        self.reload()

    def reload(self, select: str | None = None) -> None:
        select = select or self.current()
        self.list.blockSignals(True)
        self.list.clear()
        profiles = sorted(self.hosts.profiles(), key=lambda p: (not p.is_local, p.name.lower()))
        for profile in profiles:
            item = QListWidgetItem()
            item.setData(Qt.ItemDataRole.UserRole, profile.name)
            self.list.addItem(item)
            self._render(item)
        self.list.blockSignals(False)
        names = [p.name for p in profiles]
        self._order = []
        self.select(select if select in names else LOCAL)

    def _render(self, item: QListWidgetItem) -> None:
        name = item.data(Qt.ItemDataRole.UserRole)
        profile = self.hosts.get(name)
        status = self.status.get(name, "unknown")
        where = "" if profile.is_local else f"  ({profile.user + '@' if profile.user else ''}{profile.hostname})"
        price = f"  · {profile.price_per_hour:g}/h" if profile.price_per_hour else ""
        cluster = f"  · Slurm · partition {profile.slurm.partition}" if profile.slurm is not None else ""
        probe = self.probes.get(name)
        detail = self.details.get(name) or probe_summary(probe)
        problems = problem_lines(probe) if probe and status == "reachable" else []
        if problems:  # reachable, but it cannot run: not green
            status = "error"
        gpus, gpu_tip = self.gpu_summaries.get(name, ("", ""))
        shown = f"{gpus} · {detail}" if gpus else detail  # first: the right end of a line is what elision cuts
        item.setText(f"{profile.display_name}{where}{cluster}{price}\n{shown}")
        item.setIcon(status_icon(status))
        said = self.status.get(name, "unknown")
        release = self.release_rows.views.get(name)
        item.setToolTip(f"{profile.display_name}{where}{cluster}{price}: {said}\n{shown}"
                        + "".join(f"\n{line}" for line in problems)
                        + (f"\n{gpu_tip}" if gpu_tip else "") + (f"\n{profile.notes}" if profile.notes else "")
                        + (f"\n{release.tip}" if release is not None else ""))

    def _release_changed(self, name: str) -> None:
        self.release_rows.set_view(name, self.release.view(name))
        item = self.item(name)
        if item is not None:
            self._render(item)

    def item(self, name: str) -> QListWidgetItem | None:
        for row in range(self.list.count()):
            if self.list.item(row).data(Qt.ItemDataRole.UserRole) == name:
                return self.list.item(row)
        return None

    def set_status(self, name: str, status: str, detail: str | None = None, probe: dict | None = None) -> None:
        self.status[name] = status
        if probe is not None:
            self.probes[name] = probe
        self.details[name] = detail or ""
        item = self.item(name)
        if item is not None:
            self._render(item)

    def set_gpu_summary(self, name: str, text: str, tooltip: str = "") -> bool:
        """The host's compact GPU summary ("3 of 8 GPUs free"; "" for none) and tooltip lines (who holds the busy
        GPUs); its line is rendered again only when they changed (returned)."""
        if self.gpu_summaries.get(name, ("", "")) == (text, tooltip):
            return False
        if text or tooltip:
            self.gpu_summaries[name] = (text, tooltip)
        else:
            self.gpu_summaries.pop(name, None)
        item = self.item(name)
        if item is not None:
            self._render(item)
        return True

    def current(self) -> str:
        item = self.list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item else LOCAL

    def select(self, name: str) -> None:
        """Make ``name`` the current and only selected host."""
        item = self.item(name)
        if item is not None:
            self.list.setCurrentItem(item)
            self.list.clearSelection()
            item.setSelected(True)

    def select_nodes(self, names: list[str]) -> None:
        """Select these hosts as the nodes of one run, in this order (node 0 first, and current)."""
        items = [self.item(n) for n in names]
        if not items or None in items:
            return
        self.list.blockSignals(True)
        self.list.clearSelection()
        self._order = []
        self.list.blockSignals(False)
        self.list.setCurrentItem(items[0], QItemSelectionModel.SelectionFlag.NoUpdate)
        for item in items:
            item.setSelected(True)

    def selected_nodes(self) -> list[str]:
        """The selected hosts, the first selected first (node 0); the current host alone when none is."""
        return list(self._order) or [self.current()]

    def _on_selection(self) -> None:
        selected = {item.data(Qt.ItemDataRole.UserRole) for item in self.list.selectedItems()}
        # keep the order of selection: dropped ones leave, new ones (list order within one Shift range) join last
        new = [self.list.item(r).data(Qt.ItemDataRole.UserRole) for r in range(self.list.count())]
        self._order = [n for n in self._order if n in selected] + [n for n in new if n in selected
                                                                   and n not in self._order]
        self.nodes_selected.emit(self.selected_nodes())

    def _on_current(self, item, _previous) -> None:
        if item is not None:
            self.host_selected.emit(item.data(Qt.ItemDataRole.UserRole))
            self.buttons["delete"].setEnabled(item.data(Qt.ItemDataRole.UserRole) != LOCAL)

    def _save(self, dialog: HostEditDialog, add: bool, old_name: str | None = None) -> HostEditDialog:
        """Open the dialog (window-modal, not blocking); Save stores its profile.  Returns the dialog."""
        dialog.accepted.connect(lambda: self._store(dialog, add, old_name))
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()
        return dialog

    def _store(self, dialog: HostEditDialog, add: bool, old_name: str | None) -> None:
        """Store the dialog's profile (with its successful test's probe, if that tested this connection)."""
        profile = dialog.result_profile
        before = dialog._original.release if dialog._original is not None else None
        try:
            if add:
                self.hosts.add(profile)
            else:
                if old_name and old_name != profile.name:
                    self.hosts.rename(old_name, profile.name)
                self.hosts.update(profile)
        except HostError as exc:
            QMessageBox.warning(self, "Host not saved", f"{exc}\n{exc.hint}".strip())
            return
        self.reload(profile.name)
        self.hosts_changed.emit()
        if self.release is not None and profile.release != before and not profile.is_slurm:
            self.release.sent(profile.name, profile.release)  # to the host now, or said to go at its next connection
        if dialog.result_probe is not None:
            self.set_status(profile.name, "reachable", probe=dialog.result_probe)
            self.probed.emit(profile.name, dialog.result_probe)

    def dialog(self, profile: HostProfile | None = None) -> HostEditDialog:
        """The host dialog of ``profile`` (None: a new host); its Test connection knows the saved hosts."""
        return HostEditDialog(profile, self, hosts=self.hosts, known_hosts=self.known_hosts)

    def add_host(self) -> HostEditDialog:
        """The dialog of a new host, opened (returned)."""
        return self._save(self.dialog(None), add=True)

    def edit_host(self) -> HostEditDialog:
        """The dialog of the current host, opened (returned)."""
        name = self.current()
        return self._save(self.dialog(self.hosts.get(name)), add=False, old_name=name)

    def duplicate_host(self) -> HostEditDialog | None:
        profile = self.hosts.get(self.current())
        if profile.is_local:
            return None
        dialog = self.dialog(profile)
        dialog._original = None
        dialog.name.setText(f"{profile.name}-copy")
        return self._save(dialog, add=True)

    def delete_host(self) -> None:
        name = self.current()
        if name == LOCAL:
            return
        answer = QMessageBox.question(self, "Delete host", f"Delete the host profile {name!r}?\n"
                                     "Its stored password or passphrase is removed from the keyring too.")
        if answer != QMessageBox.StandardButton.Yes:
            return
        try:
            self.hosts.remove(name)
        except HostError as exc:
            QMessageBox.warning(self, "Host not deleted", f"{exc}\n{exc.hint}".strip())
            return
        self.reload(LOCAL)
        self.hosts_changed.emit()

    def import_ssh(self, path: str | None = None) -> SshImportDialog | None:
        """The import dialog over ~/.ssh/config (or ``path``; opened, returned); Import adds the ticked aliases."""
        try:
            dialog = SshImportDialog(self.hosts, path, parent=self)
        except (OSError, HostError) as exc:
            QMessageBox.warning(self, "Import failed", f"Cannot read ~/.ssh/config: {exc}")
            return None
        dialog.accepted.connect(lambda: self._imported(*dialog.import_chosen()))
        dialog.open()
        return dialog

    def _imported(self, added: list[str], refused: list[tuple[str, str]]) -> None:
        self.reload(added[0] if added else None)
        self.hosts_changed.emit()
        if refused:
            QMessageBox.warning(self, "Some hosts not imported", f"Added: {', '.join(added) or 'none'}\nNot added:\n"
                                + "\n".join(f"  {name}: {why}" for name, why in refused))
