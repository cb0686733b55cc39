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
from ..analysis.stats import METHODS, MIN_N, Estimate, Ratio, needs_note
from .figures import caption_text
from .files import output_file

SUMMARY_COLUMNS = ("level", "id", "label", "runs", "metric", "unit", "value", "std", "ci95", "low", "high", "n",
                   "over", "reason", "centre", "interval", "min", "max")


def _number(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _spread(item: Estimate | Ratio) -> list:
    """The interval's kind in words, and the smallest and largest value (of the repeats, or repeat ratios)."""
    lo_hi = item.range
    return [METHODS[item.method] if item.has_interval else (
                f"none: {needs_note(len(item.values), 'repeats')}" if lo_hi else ""),
            _number(lo_hi[0] if lo_hi else None), _number(lo_hi[1] if lo_hi else None)]


def _estimate_row(est: Estimate) -> list:
    return [_number(est.mean), _number(est.std), _number(est.ci95), _number(est.low), _number(est.high), est.n,
            est.over, est.reason, est.centre if est.mean is not None else "", *_spread(est)]


def _ratio_row(r: Ratio) -> list:
    n = f"{r.n[0]}/{r.n[1]}"
    return [_number(r.value), "", "", _number(r.low), _number(r.high), n, r.over, r.reason,
            "ratio of the centres" if r.value is not None else "", *_spread(r)]


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
                               run.reasons.get(metric, "") if value is None else "", "", "", "", ""]
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


def _rounded(value: float, decimals: int) -> str:
    """``value`` to ``decimals`` places (negative: to tens, hundreds, …), in math mode (a true minus sign)."""
    return f"${round(value, decimals):.{max(0, decimals)}f}$"


def format_interval(centre: float, low: float | None = None, high: float | None = None,
                    bracket: str = "[]") -> str:
    """``centre [low, high]``: the ends to 2 significant digits of the interval's width, the centre to the same
    decimals (at least whole units); ``bracket="()"`` writes a range of repeats, ``(low--high)``.  Never ±: an
    interval of a positive quantity is asymmetric."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return f"${centre:.4g}$"
    decimals = 1 - math.floor(math.log10(high - low))
    ends = (f" [{_rounded(low, decimals)}, {_rounded(high, decimals)}]" if bracket == "[]" else
            f" ({_rounded(low, decimals)}--{_rounded(high, decimals)})")
    return _rounded(centre, max(0, decimals)) + ends


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


def _cell(comparison: Comparison, group, metric: str) -> tuple[float | None, str]:
    """(centre, its cell text) of one table cell: "centre [low, high]" with a 95% interval, "centre (min--max)"
    for fewer than 3 repeats, the centre alone for one run (and for the baseline's own speedup, exactly 1)."""
    item: Estimate | Ratio = comparison.speedup[group.key] if metric == "speedup" else group.metrics[metric]
    centre = item.value if isinstance(item, Ratio) else item.mean
    if centre is None:
        return None, "--"
    scale = 1e-3 if metric == "energy_j" else 1.0
    if metric == "speedup" and group.key == comparison.baseline:
        return centre, format_interval(centre)
    if item.has_interval:
        return centre * scale, format_interval(centre * scale, item.low * scale, item.high * scale)
    lo_hi = item.range
    return centre * scale, (format_interval(centre * scale, lo_hi[0] * scale, lo_hi[1] * scale, "()") if lo_hi
                            else format_interval(centre * scale))


def write_latex_table(comparison: Comparison, path: Path) -> Path:
    """A booktabs tabular: one row per setting, "centre [95% CI]" per column (with fewer than 3 repeats
    "centre (min--max)" of the repeats), the best centre of each column bold.

    Columns without any value are left out.  "Best" is the highest throughput and speedup, the
    lowest of the others; a tie goes to the first row.
    """
    unit = comparison.runs[0].throughput_unit
    groups = comparison.groups
    columns = []
    for title, metric in _TEX_COLUMNS:
        cells = [_cell(comparison, g, metric) for g in groups]
        if any(centre is not None for centre, _ in cells):
            columns.append((title.format(unit=unit), metric, cells))
    lines = [f"% ddpgui {time.strftime('%Y-%m-%d')}: centre [95% confidence interval]; n = runs per setting. "
             "Positive quantities: geometric mean, t-interval of the logs (asymmetric, never below 0);",
             f"% speedup: ratio of geometric means, log-scale Welch interval. (a--b): n < {MIN_N}, the range of "
             f"the repeats: an interval needs >= {MIN_N} repeats (n = 1: the value alone)."]
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
            centre, text = cells[i]
            if i == b and centre is not None:  # the centre bold (its math-mode number as \mathbf)
                head, _, rest = text[1:].partition("$")
                text = f"$\\mathbf{{{head}}}${rest}"
            row.append(text)
        lines.append(" & ".join(row) + r" \\")
    lines.append(r"\bottomrule")
    lines.append(r"\end{tabular}")
    with output_file(path, encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    return path
