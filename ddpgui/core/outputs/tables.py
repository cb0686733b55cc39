"""Tables of a comparison's numbers: the summary CSV (every value with its n) and a booktabs LaTeX table.

The numbers are those of :mod:`ddpgui.core.analysis` (docs/ANALYSIS.md).
"""
from __future__ import annotations

import csv
import math
import time
from pathlib import Path

from ..analysis.comparison import HIGHER_IS_BETTER, Comparison
from ..analysis.metric_names import UNITS, metric_unit
from ..analysis.run_stats import RUN_METRICS
from ..analysis.stats import Estimate, Ratio
from .figures import caption_text
from .files import output_file

SUMMARY_COLUMNS = ("level", "id", "label", "runs", "metric", "unit", "value", "std", "ci95", "low", "high", "n",
                   "over", "reason")


def _number(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _estimate_row(est: Estimate) -> list:
    return [_number(est.mean), _number(est.std), _number(est.ci95), _number(est.low), _number(est.high), est.n,
            est.over, est.reason]


def _ratio_row(r: Ratio) -> list:
    n = f"{r.n[0]}/{r.n[1]}"
    return [_number(r.value), "", "", _number(r.low), _number(r.high), n, r.over, r.reason]


def write_summary_csv(comparison: Comparison, path: Path) -> Path:
    """One row per (run or group, metric): value, spread, 95% interval, n and what n counts, or why none.

    Run rows hold a run's own values (throughput over its steady intervals); group rows the
    estimates over repeats plus speedup, memory saving and scaling efficiency against the baseline.
    """
    with output_file(path, newline="") as fh:
        w = csv.writer(fh)
        w.writerow(SUMMARY_COLUMNS)
        for i, g in enumerate(comparison.groups):
            runs = " ".join(g.run_ids)
            for metric in RUN_METRICS:
                w.writerow(["group", i, g.label, runs, metric, metric_unit(metric, comparison),
                            *_estimate_row(g.metrics[metric])])
            for metric, ratios in (("speedup", comparison.speedup), ("memory_saving", comparison.memory_saving),
                                   ("scaling_efficiency", comparison.scaling)):
                w.writerow(["group", i, g.label, runs, metric, UNITS[metric], *_ratio_row(ratios[g.key])])
            for run in g.runs:
                for metric in RUN_METRICS:
                    if metric == "throughput":
                        row = _estimate_row(run.throughput)
                    else:
                        value = run.value(metric)
                        row = [_number(value), "", "", "", "", 1 if value is not None else 0, "run",
                               run.reasons.get(metric, "") if value is None else ""]
                    w.writerow(["run", run.run_id, g.label, run.run_id, metric, metric_unit(metric, comparison), *row])
    return path


# --------------------------------------------------------------------------------------------------
# LaTeX


_TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "×": r"$\times$",
                "±": r"$\pm$"}


def tex_escape(text: str) -> str:
    """Text safe in a LaTeX table cell (pdflatex, no extra packages)."""
    return "".join(_TEX_ESCAPES.get(c, c) for c in text)


def format_pm(mean: float, ci: float | None) -> str:
    """``mean \\pm ci`` with the interval to 2 significant digits and the mean to the same decimals."""
    if ci is None or not math.isfinite(ci) or ci <= 0:
        return f"{mean:.4g}"
    decimals = max(0, 1 - math.floor(math.log10(ci)))
    return f"{mean:.{decimals}f} \\pm {ci:.{decimals}f}"


#: (column title, metric) of the LaTeX table.
_TEX_COLUMNS = (
    ("throughput ({unit})", "throughput"),
    ("speedup", "speedup"),
    ("peak memory (GiB)", "mem_peak_gib"),
    ("compile (s)", "compile_s"),
    ("final loss", "final_loss"),
    ("energy (kJ)", "energy_j"),
    ("cost", "cost"),
)


def _cell(comparison: Comparison, group, metric: str) -> tuple[float | None, float | None]:
    """(mean, ci95 half-width) of one table cell; the speedup's interval made symmetric by its wider side."""
    if metric == "speedup":
        r = comparison.speedup[group.key]
        if r.value is None:
            return None, None
        ci = None if r.low is None or r.high is None or r.reason == "the baseline" else max(r.value - r.low,
                                                                                              r.high - r.value)
        return r.value, ci
    est = group.metrics[metric]
    scale = 1e-3 if metric == "energy_j" else 1.0
    return (None if est.mean is None else est.mean * scale), (None if est.ci95 is None else est.ci95 * scale)


def write_latex_table(comparison: Comparison, path: Path) -> Path:
    """A booktabs tabular: one row per setting, mean ± 95% CI per column, the best value of each column bold.

    Columns without any value are left out.  "Best" is the highest throughput and speedup, the
    lowest of the others; a tie goes to the first row.
    """
    unit = comparison.runs[0].throughput_unit
    groups = comparison.groups
    columns = []
    for title, metric in _TEX_COLUMNS:
        cells = [_cell(comparison, g, metric) for g in groups]
        if any(mean is not None for mean, _ in cells):
            columns.append((title.format(unit=unit), metric, cells))
    lines = [f"% ddpgui {time.strftime('%Y-%m-%d')}: mean ± 95% CI half-width; n = runs per setting "
             "(for n = 1, the CI is over the run's steady logged intervals)."]
    caption = caption_text(comparison)
    if caption:
        lines.append(f"% environment: {caption}")
    lines.append(f"% speedup vs {comparison.baseline_group.label}; bold: the best value of each column.")
    lines.append(r"\begin{tabular}{lr" + "r" * len(columns) + "}")
    lines.append(r"\toprule")
    lines.append(" & ".join(["setting", "$n$"] + [tex_escape(title) for title, _, _ in columns]) + r" \\")
    lines.append(r"\midrule")
    best = []
    for _, metric, cells in columns:
        sign = -1.0 if HIGHER_IS_BETTER[metric] else 1.0  # the smallest of sign × mean is the best; ties: first row
        best.append(min((sign * m, i) for i, (m, _) in enumerate(cells) if m is not None)[1])
    for i, g in enumerate(groups):
        row = [tex_escape(g.label), str(g.n)]
        for (_, _, cells), b in zip(columns, best):
            mean, ci = cells[i]
            if mean is None:
                row.append("--")
                continue
            text = format_pm(mean, ci)
            row.append(f"$\\mathbf{{{text}}}$" if i == b else f"${text}$")
        lines.append(" & ".join(row) + r" \\")
    lines.append(r"\bottomrule")
    lines.append(r"\end{tabular}")
    with output_file(path, encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    return path
