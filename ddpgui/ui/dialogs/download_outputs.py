"""Download outputs…: the files a run wrote on its host, with sizes and checkboxes, downloaded to a folder.

The listing and the transfer run on the window's worker pool (ddpgui.core.runs.pull, the same function as
``ddpgui pull``); progress reaches the GUI thread through a :class:`~ddpgui.ui.bridge.GuiRelay` at most ten times
a second.  The folder is kept in the window's QSettings (``outputs/folder``); each run's files go to a folder of
its own there, named by its id.  Cancel keeps what arrived (``NAME.part``); a dropped link is said in words, and
Retry continues from the .part files.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
)

from ddpgui.core.errors import describe
from ddpgui.core.hosts import host_display_name
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.runs.pull import (
    RETRIES,
    Listing,
    PullCancelled,
    PullResult,
    RateMeter,
    list_outputs,
    pull,
    run_location,
    shown_name,
    size_text,
)

from ..bridge import GuiRelay
from ..workers import WorkerPool

FOLDER_KEY = "outputs/folder"
#: Seconds between progress redraws.
REDRAW_S = 0.1


def default_folder() -> Path:
    downloads = Path.home() / "Downloads"
    return (downloads if downloads.is_dir() else Path.home()) / "ddpgui outputs"


class DownloadOutputsDialog(QDialog):
    """One run's files: tick them, choose the folder, Download; Cancel, Retry, Close."""

    retries = RETRIES  # reconnects per file before the error is shown (tests set 0)

    def __init__(self, manager: RunManager, workers: WorkerPool, settings: QSettings, run_id: str, parent=None):
        super().__init__(parent)
        self.setObjectName("download_outputs")
        self.manager, self.workers, self.settings = manager, workers, settings
        self.run = manager.store.get_run(run_id)
        self.host, self.run_dir = "", ""
        self.target = None
        self.listing: Listing | None = None
        self.result: PullResult | None = None
        self._cancel = threading.Event()
        self._busy = False
        self._meter = RateMeter()
        self._arrived: tuple[int, int] | None = None  # the last progress shown: (bytes done, bytes total)
        self._shown = 0.0
        cancel = self._cancel
        self.destroyed.connect(lambda *_: cancel.set())  # closed with the window: the transfer stops too
        self.relay = GuiRelay(self)
        self.relay.received.connect(self._progress)
        self.setWindowTitle(f"Download outputs — {self.run.name or self.run.id}")

        self.summary = QLabel("", objectName="outputs_summary", wordWrap=True)
        self.tree = QTreeWidget(objectName="outputs_files")
        self.tree.setHeaderLabels(["File", "Size", "Modified"])
        self.tree.setRootIsDecorated(False)
        self.tree.setUniformRowHeights(True)
        header = self.tree.header()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in (1, 2):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.itemChanged.connect(self._chosen_changed)
        self.skipped = QLabel("", objectName="outputs_skipped", wordWrap=True)
        self.skipped.hide()
        self.all_button = QPushButton("All", objectName="outputs_all", clicked=lambda: self._tick_all(True))
        self.none_button = QPushButton("None", objectName="outputs_none", clicked=lambda: self._tick_all(False))
        self.chosen = QLabel("", objectName="outputs_chosen")
        ticks = QHBoxLayout()
        ticks.addWidget(self.all_button)
        ticks.addWidget(self.none_button)
        ticks.addWidget(self.chosen, 1)

        self.folder = QLineEdit(str(settings.value(FOLDER_KEY) or default_folder()), objectName="outputs_folder")
        self.folder.textChanged.connect(self._show_where)
        self.browse = QPushButton("Choose…", objectName="outputs_browse", clicked=self._choose_folder)
        folder_row = QHBoxLayout()
        folder_row.addWidget(QLabel("Save to"))
        folder_row.addWidget(self.folder, 1)
        folder_row.addWidget(self.browse)
        self.where = QLabel("", objectName="outputs_where", wordWrap=True)
        self.where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.bar = QProgressBar(objectName="outputs_progress")
        self.bar.setRange(0, 1000)
        self.bar.setValue(0)
        self.status = QLabel("", objectName="outputs_status", wordWrap=True)
        self.error = QLabel("", objectName="error_label", wordWrap=True)
        self.error.hide()

        self.download_button = QPushButton("Download", objectName="outputs_download", clicked=self.start)
        self.download_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel", objectName="outputs_cancel", clicked=self.cancel)
        self.close_button = QPushButton("Close", objectName="outputs_close", clicked=self.reject)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for button in (self.download_button, self.cancel_button, self.close_button):
            buttons.addWidget(button)

        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.skipped)
        layout.addLayout(ticks)
        layout.addLayout(folder_row)
        layout.addWidget(self.where)
        layout.addWidget(self.bar)
        layout.addWidget(self.status)
        layout.addWidget(self.error)
        layout.addLayout(buttons)
        self.resize(720, 520)
        self._show_where()
        self._set_busy(False)
        self.list_files()

    # ---- listing --------------------------------------------------------------------------------
    def list_files(self) -> None:
        """Ask the host for the run's files (on a worker)."""
        try:
            self.host, self.run_dir = run_location(self.run)
        except Exception as exc:
            self._failed(exc)
            return
        self.summary.setText(f"Listing the files of {self.run.name or self.run.id} on "
                             f"{host_display_name(self.host)}…")
        self._busy = True
        self._set_busy(True, listing=True)
        self.workers.start(self._fetch_listing, on_return=self._listed, on_error=self._failed)

    def _fetch_listing(self) -> Listing:
        self.target = self.manager.targets.target(self.host)
        return list_outputs(self.target, self.run_dir)

    def _listed(self, listing: Listing) -> None:
        self.listing = listing
        self._busy = False
        self.error.hide()
        self.tree.blockSignals(True)
        self.tree.clear()
        for f in listing.files:
            item = QTreeWidgetItem([shown_name(f.name), size_text(f.size),
                                    datetime.fromtimestamp(f.mtime).strftime("%Y-%m-%d %H:%M") if f.mtime else ""])
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(0, Qt.CheckState.Checked)
            item.setTextAlignment(1, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            item.setData(0, Qt.ItemDataRole.UserRole, f)
            self.tree.addTopLevelItem(item)
        self.tree.blockSignals(False)
        folders = f"the run's folder{' and its outputs folder' if 'outputs' in listing.roots else ''}"
        self.summary.setText(f"{len(listing.files)} files, {size_text(listing.total)}, in {folders} on "
                             f"{host_display_name(self.host)}. Each is checked against its sha256 on the host.")
        notes = [f"{shown_name(name)}: {why}" for name, why in listing.skipped]
        notes += [f"the outputs folder {shown_name(folder)} is not on the host" for folder in listing.missing]
        self.skipped.setText("Not offered: " + "; ".join(notes) if notes else "")
        self.skipped.setVisible(bool(notes))
        self.status.setText("")
        self._chosen_changed()
        self._set_busy(False)

    # ---- choosing -------------------------------------------------------------------------------
    def files(self) -> list:
        """The ticked files."""
        return [self.tree.topLevelItem(i).data(0, Qt.ItemDataRole.UserRole) for i in range(self.tree.topLevelItemCount())
                if self.tree.topLevelItem(i).checkState(0) == Qt.CheckState.Checked]

    def _tick_all(self, on: bool) -> None:
        state = Qt.CheckState.Checked if on else Qt.CheckState.Unchecked
        for i in range(self.tree.topLevelItemCount()):
            self.tree.topLevelItem(i).setCheckState(0, state)

    def _chosen_changed(self, *_: object) -> None:
        files = self.files()
        self.chosen.setText(f"{len(files)} of {self.tree.topLevelItemCount()} chosen, "
                            f"{size_text(sum(f.size for f in files))}")
        self._set_busy(self._busy)

    def destination(self) -> Path:
        """The chosen folder / the run's id: each run's files in a folder of their own."""
        return Path(self.folder.text().strip()).expanduser() / self.run.id

    def _show_where(self) -> None:
        self.where.setText(f"Files go to {self.destination()}" if self.folder.text().strip() else
                           "Choose a folder to save to")
        self._set_busy(self._busy)

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Save outputs to", self.folder.text())
        if folder:
            self.folder.setText(folder)

    # ---- downloading ----------------------------------------------------------------------------
    def start(self) -> None:
        """Download (or Retry): the ticked files into :meth:`destination`, continuing any .part there."""
        if self.listing is None:  # the listing failed: Retry lists again
            self.list_files()
            return
        files = self.files()
        self.settings.setValue(FOLDER_KEY, self.folder.text().strip())
        self._cancel.clear()
        self._meter, self._arrived = RateMeter(), None
        self.error.hide()
        self.status.setText("Starting…")
        self._busy = True
        self._set_busy(True)
        self.workers.start(pull, self.target, self.run_dir, files, self.destination(), listing=self.listing,
                           progress=self._post_progress, cancelled=self._cancel.is_set, retries=self.retries,
                           on_return=self._done, on_error=self._failed)

    def _post_progress(self, done: int, total: int, name: str, index: int, count: int) -> None:
        """On the worker: hand the GUI thread a value at most every REDRAW_S."""
        now = time.monotonic()
        if now - self._shown >= REDRAW_S or index == count:
            self._shown = now
            self.relay.post((done, total, name, index, count))

    def _progress(self, value: tuple) -> None:
        done, total, name, index, count = value
        self._arrived = (done, total)
        self._meter.add(done)
        self.bar.setValue(int(1000 * done / total) if total else 1000)
        file = f" · file {index + 1} of {count}: {shown_name(name)}" if name else ""
        self.status.setText(self._meter.text(done, total) + file)

    def cancel(self) -> None:
        """Stop the transfer (what arrived stays for the next Download), or close when nothing runs."""
        if self._busy:
            self._cancel.set()
            self.status.setText("Cancelling…")
        else:
            self.reject()

    def _done(self, result: PullResult) -> None:
        self.result = result
        self._busy = False
        self.bar.setValue(1000)
        parts = [f"Downloaded {len(result.downloaded)} file(s), {size_text(result.bytes)} in {result.seconds:.1f} s "
                 f"to {result.out_dir}"]
        if result.resumed_bytes:
            parts.append(f"{size_text(result.resumed_bytes)} continued from an earlier try")
        if result.unchanged:
            parts.append(f"{len(result.unchanged)} already there, unchanged")
        self.status.setText("; ".join(parts) + ".")
        self._set_busy(False)
        self.download_button.setText("Download")

    def _failed(self, exc: BaseException) -> None:
        self._busy = False
        arrived = f" at {size_text(self._arrived[0])} of {size_text(self._arrived[1])}" if self._arrived else ""
        if isinstance(exc, PullCancelled):
            self.status.setText(f"Cancelled{arrived}. What arrived is kept: Download continues from there.")
            self.error.hide()
        else:
            self.status.setText(f"Stopped{arrived}." if arrived else "")
            message, hint = describe(exc)
            message = message or f"the download stopped: {type(exc).__name__}"  # never an empty red line
            self.error.setText(message + (f"\n{hint}" if hint else ""))
            self.error.show()
            self.download_button.setText("Retry")
        self._set_busy(False)

    def _set_busy(self, busy: bool, listing: bool = False) -> None:
        ready = self.listing is not None and bool(self.files()) and bool(self.folder.text().strip())
        self.download_button.setEnabled(not busy and (ready or self.listing is None))
        self.cancel_button.setEnabled(busy and not listing)
        for widget in (self.tree, self.all_button, self.none_button, self.folder, self.browse):
            widget.setEnabled(not busy)

    def reject(self) -> None:
        self._cancel.set()  # a transfer still running stops at its next chunk, its .part kept
        super().reject()


def download_outputs(window, run_id: str) -> DownloadOutputsDialog:
    """Open the dialog for ``run_id`` over the main window's manager, workers and settings."""
    dialog = DownloadOutputsDialog(window.manager, window.workers, window.settings, run_id, window)
    dialog.open()
    return dialog
