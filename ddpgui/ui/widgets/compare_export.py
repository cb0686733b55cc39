"""The Compare tab's export: the dialog, and the files written on a worker (:func:`ddpgui.core.outputs.export.export_steps`)."""
from __future__ import annotations

from pathlib import Path

from ddpgui.core.outputs import export, figures

from ..dialogs.export import ExportDialog


class ExportMixin:
    """Export of a :class:`~ddpgui.ui.widgets.compare.CompareView` (its comparison, store, settings, loader)."""

    def ask_export(self) -> ExportDialog:
        dialog = ExportDialog(self.settings, self)
        dialog.accepted.connect(lambda: self.export(Path(dialog.folder.text().strip()), dialog.chosen_formats(),
                                                    dialog.width()))
        dialog.open()
        return dialog

    def export(self, folder: Path, formats: list[str], width: str) -> None:
        """Write the chosen formats into ``folder`` on a worker; the status line says what was written where."""
        if self.comparison is None:
            return
        self.export_button.setEnabled(False)
        self.exported = None
        self.status.setText(f"Exporting to {folder}…")

        def done(written: figures.Exported) -> None:
            self.exported = written
            self.export_button.setEnabled(True)
            skipped = "; ".join(f"no {name} figure: {why}" for name, why in written.skipped.items())
            self.status.setText(f"Wrote {len(written.paths)} files to {folder}: "
                                f"{', '.join(p.name for p in written.paths)}" + (f". {skipped}" if skipped else ""))

        def failed(exc: Exception) -> None:
            self.export_button.setEnabled(True)
            self.status.setText(f"Export failed: {exc}")

        self.loader(export.export_steps, self.comparison, self.store, folder, formats, width,
                    self.align_combo.currentText(), on_yield=lambda text: self.status.setText(f"Exporting: {text}"),
                    on_return=done, on_error=failed)
