"""A comparison's export: every format it can be written to, and the one writer of ``ddpgui compare`` and the app.

Figures first, then the data (points CSV, summary CSV, the loss curves' means and intervals (curves.csv),
LaTeX table, JSON bundle), all in one folder::

    written = export.export_comparison(comparison, store, out_dir, ["pdf", "csv"], width="single")
    written.paths, written.skipped          # files, and figure → why it was not drawn
"""
from __future__ import annotations

from collections.abc import Generator, Iterable
from pathlib import Path

from ..analysis.comparison import Comparison
from ..analysis.curves import SMOOTHING
from ..store import RunStore
from . import figures
from .bundle import write_bundle
from .curves import write_curves_csv
from .figures import Exported
from .files import output_folder
from .points import write_points_csv
from .tables import write_latex_table, write_summary_csv

DATA_FORMATS = ("csv", "tex", "json", "curves")
#: Every format of an export: the figures' and the data's.
FORMATS = figures.FORMATS + DATA_FORMATS


def write_data(comparison: Comparison, store: RunStore, out_dir: str | Path,
               formats: Iterable[str] = DATA_FORMATS, x: str = "step", smoothing: float = SMOOTHING) -> Exported:
    """Write the data formats asked for: csv (points, telemetry, summary), curves (curves.csv: each group's
    smoothed loss centre and 95% interval per ``x``), tex (summary.tex), json (runs.json)."""
    formats = set(formats)
    unknown = formats - set(DATA_FORMATS)
    if unknown:
        raise ValueError(f"unknown format {', '.join(sorted(unknown))}: choose from {', '.join(DATA_FORMATS)}")
    result = Exported()
    if not formats:
        return result
    out = output_folder(out_dir)
    run_ids = [r.run_id for r in comparison.runs]
    if "csv" in formats:
        result.paths += write_points_csv(store, run_ids, out)
        result.paths.append(write_summary_csv(comparison, out / "summary.csv"))
    if "curves" in formats:
        result.paths.append(write_curves_csv(comparison, store, out / "curves.csv", x, smoothing=smoothing))
    if "tex" in formats:
        result.paths.append(write_latex_table(comparison, out / "summary.tex"))
    if "json" in formats:
        result.paths.append(write_bundle(store, run_ids, out / "runs.json"))
    return result


def export_steps(comparison: Comparison, store: RunStore, folder: str | Path, formats: Iterable[str],
                 width: str = "single", x: str = "step", dpi: int = 300, caption: bool = True,
                 individual: bool = True, smoothing: float = SMOOTHING) -> Generator[str, None, Exported]:
    """Figures, then data; yields what it is doing (for a worker's progress), returns what was written.

    ``individual``: the loss figure draws each repeat faintly under its group's centre; ``smoothing``: the
    loss curves' EMA weight (0: raw).
    """
    formats = list(formats)
    wanted_figures = [f for f in formats if f in figures.FORMATS]
    wanted_data = [f for f in formats if f in DATA_FORMATS]
    written = Exported()
    if wanted_figures:
        yield f"drawing figures ({', '.join(wanted_figures)})…"
        written.extend(figures.write_figures(comparison, store, folder, wanted_figures, width, x, dpi, caption,
                                                individual=individual, smoothing=smoothing))
    if wanted_data:
        yield f"writing tables ({', '.join(wanted_data)})…"
        written.extend(write_data(comparison, store, folder, wanted_data, x, smoothing))
    return written


def export_comparison(comparison: Comparison, store: RunStore, folder: str | Path, formats: Iterable[str],
                      width: str = "single", x: str = "step", dpi: int = 300, caption: bool = True,
                      individual: bool = True, smoothing: float = SMOOTHING) -> Exported:
    """:func:`export_steps` run to its end without progress: what was written."""
    steps = export_steps(comparison, store, folder, formats, width, x, dpi, caption, individual, smoothing)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
