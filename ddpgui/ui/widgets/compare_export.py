"""The Compare tab's export: the dialog, and the files written on a worker (:func:`ddpgui.core.outputs.export.export_steps`,
the writer of ``ddpgui compare`` too)."""
from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

from ddpgui.core.analysis.comparison import Comparison, compute_comparison
from ddpgui.core.hosts import HostStore
from ddpgui.core.outputs import export, figures
from ddpgui.core.store import RunStore

from ..dialogs.export import ExportDialog


def compared_steps(comparison: Comparison) -> int | None:
    """N of the comparison's "time to N steps"."""
    return next((r.n_steps for r in comparison.runs if r.n_steps), None)


def export_on_worker(comparison: Comparison, store: RunStore, hosts: HostStore | None, folder: Path,
                     formats: list[str], n_steps: int | None = None, known: dict | None = None,
                     **options) -> Generator[str, None, figures.Exported]:
    """:func:`~ddpgui.core.outputs.export.export_steps` of the comparison; with ``n_steps`` other than its N of
    "time to N steps", of the same runs and baseline computed again with that N (as ``ddpgui compare --steps``)."""
    if n_steps is not None and n_steps != compared_steps(comparison):
        yield f"computing time to {n_steps} steps…"
        comparison = compute_comparison(store, hosts, [r.run_id for r in comparison.runs], comparison.baseline,
                                        known, n_steps=n_steps, with_curves=False).comparison
    return (yield from export.export_steps(comparison, store, folder, formats, **options))


class ExportMixin:
    """Export of a :class:`~ddpgui.ui.widgets.compare.CompareView` (its comparison, store, settings, loader)."""

    def ask_export(self) -> ExportDialog:
        n_steps = compared_steps(self.comparison) if self.comparison is not None else None
        dialog = ExportDialog(self.settings, self, x=self.align_combo.currentText(),
                              individual=self.individual_box.isChecked(), n_steps=n_steps)
        dialog.accepted.connect(lambda: self.export(Path(dialog.folder.text().strip()), n_steps=dialog.n_steps(),
                                                    **dialog.options()))
        dialog.open()
        return dialog

    def export(self, folder: Path, formats: list[str], width: str = "single", n_steps: int | None = None,
               **options) -> None:
        """Write the chosen formats into ``folder`` on a worker; the status line says what was written where.

        ``options``: :func:`~ddpgui.core.outputs.export.export_steps`'s (``x`` by default the tab's alignment);
        ``n_steps``: N of "time to N steps" when not the comparison's.
        """
        if self.comparison is None:
            return
        self.export_button.setEnabled(False)
        self.exported = None
        self.status.setText(f"Exporting to {folder}…")
        options.setdefault("x", self.align_combo.currentText())

        def done(written: figures.Exported) -> None:
            self.exported = written
            self.export_button.setEnabled(True)
            skipped = "; ".join(f"no {name} figure: {why}" for name, why in written.skipped.items())
            self.status.setText(f"Wrote {len(written.paths)} files to {folder}: "
                                f"{', '.join(p.name for p in written.paths)}" + (f". {skipped}" if skipped else ""))

        def failed(exc: Exception) -> None:
            self.export_button.setEnabled(True)
            self.status.setText(f"Export failed: {exc}")

        self.loader(export_on_worker, self.comparison, self.store, self.hosts, folder, formats, n_steps,
                    dict(self.known), width=width, **options,
                    on_yield=lambda text: self.status.setText(f"Exporting: {text}"), on_return=done, on_error=failed)
