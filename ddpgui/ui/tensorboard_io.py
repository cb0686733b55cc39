"""File ▸ Export selected runs to TensorBoard… and Import TensorBoard folder…: the tools users already have.

Export writes the selected runs as a TensorBoard log folder (:func:`~ddpgui.core.outputs.tensorboard.export_tensorboard`:
one subfolder per run that ``tensorboard --logdir`` opens); import takes an existing log folder into the run store
(:func:`~ddpgui.core.runs.tbimport.import_tensorboard`: one finished run per subfolder), shows the new runs in the
runs table and says what it did: runs, points, folders skipped and why, damaged files.  Both run on the window's
workers; the folder is asked for unless given (tests give it).
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMessageBox

from ddpgui.core.outputs.tensorboard import export_tensorboard
from ddpgui.core.runs.tbimport import TensorBoardImport, import_tensorboard

from .texts import without_class_name

#: Lines of skipped folders and warnings shown in the import's message (the rest under Show Details…).
SHOWN_LINES = 8


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def export_to_tensorboard(window, folder: str | None = None) -> None:
    """The selected runs into a TensorBoard log folder (asked for unless given), on a worker."""
    ids = window.runs_table.selected_ids()
    if not ids:
        window.statusBar().showMessage("Select the runs to export in the Runs tab first", 8000)
        return
    folder = folder or QFileDialog.getExistingDirectory(window, "Export runs to a TensorBoard log folder")
    if not folder:
        return
    window.statusBar().showMessage(f"Exporting {_plural(len(ids), 'run')} to {folder}…")

    def done(written: dict[Path, int]) -> None:
        window.statusBar().showMessage(
            f"Exported {_plural(len(written), 'run')} ({_plural(sum(written.values()), 'point')}) to {folder}: "
            f"open it with tensorboard --logdir {folder}", 15000)

    window.workers.start(export_tensorboard, window.store, ids, folder, on_return=done,
                         on_error=lambda exc: window.statusBar().showMessage(
                             f"Export to TensorBoard failed: {without_class_name(str(exc))}", 15000))


def import_summary(result: TensorBoardImport, folder: str) -> tuple[str, list[str]]:
    """What an import did, in words: a headline (runs, points, runs it had already) and the lines about folders
    skipped (and why) and damaged files."""
    points = sum(i.points for i in result.imported)
    if result.imported:
        headline = f"Imported {_plural(len(result.imported), 'run')} ({_plural(points, 'point')}) from {folder}"
    else:
        headline = f"No new run in {folder}"
    if result.known:
        headline += f"; {_plural(len(result.known), 'run')} imported before"
    details = [f"skipped {path}: {why}" for path, why in result.skipped]
    details += [f"warning: {warning}" for warning in result.warnings]
    return headline, details


def import_tensorboard_folder(window, folder: str | None = None) -> None:
    """A TensorBoard log folder (asked for unless given) into the run store, on a worker; the new runs are
    selected in the runs table and what was done is said."""
    folder = folder or QFileDialog.getExistingDirectory(window, "Import a TensorBoard log folder")
    if not folder:
        return
    window.statusBar().showMessage(f"Importing {folder}…")

    def done(result: TensorBoardImport) -> None:
        for imported in result.imported:
            window.runs_table.model.update_run(imported.run)
        if result.imported:
            window.tabs.setCurrentIndex(window.tabs.indexOf(window.runs_table.parentWidget()))
            window.runs_table.select_runs([i.run.id for i in result.imported])
        headline, details = import_summary(result, folder)
        window.statusBar().showMessage(headline + (f" ({_plural(len(details), 'note')})" if details else ""), 15000)
        if details:
            _box(window, QMessageBox.Icon.Information, headline, details)

    def failed(exc: Exception) -> None:
        hint = getattr(exc, "hint", "")
        window.statusBar().showMessage(f"Import failed: {without_class_name(str(exc))}", 15000)
        _box(window, QMessageBox.Icon.Warning, f"Could not import {folder}: {without_class_name(str(exc))}",
             [f"Hint: {hint}"] if hint else [])

    window.workers.start(import_tensorboard, window.store, folder, on_return=done, on_error=failed)


def _box(window, icon: QMessageBox.Icon, text: str, details: list[str]) -> QMessageBox:
    box = QMessageBox(icon, "Import TensorBoard folder", text, QMessageBox.StandardButton.Close, window)
    box.setObjectName("tensorboard_import_box")
    box.setInformativeText("\n".join(details[:SHOWN_LINES]) + (
        f"\n… and {len(details) - SHOWN_LINES} more (Show Details…)" if len(details) > SHOWN_LINES else ""))
    if len(details) > SHOWN_LINES:
        box.setDetailedText("\n".join(details))
    box.open()
    return box
