"""Loss curves of repeats, drawn and written: each group's mean with its 95% interval, runs faintly under it.

The aggregation (alignment on steps, the t-interval) is :mod:`ddpgui.core.analysis.curves`;
here are the loss figure of :func:`ddpgui.core.outputs.figures.write_figures` and ``curves.csv``.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from ..analysis.comparison import Comparison, Curve, load_curve
from ..analysis.curves import CURVE_COLUMNS, MeanCurve, group_curves
from ..store import RunStore
from .files import output_file
from .style import MARKERS_PER_CURVE, X_LABELS, Notes, Style, envelope, outside_legend, shared_settings


def load_curves(comparison: Comparison, store: RunStore) -> dict[str, Curve]:
    """Every compared run's loss curve (run id → curve)."""
    return {r.run_id: load_curve(store, r.run_id) for r in comparison.runs}


def write_curves_csv(comparison: Comparison, store: RunStore, path: Path, x: str = "step",
                     curves: dict[str, Curve] | None = None) -> Path:
    """``curves.csv``: per group and x its n, mean loss and 95% interval (empty where n = 1)."""
    curves = load_curves(comparison, store) if curves is None else curves
    with output_file(path, newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CURVE_COLUMNS)
        for c in group_curves(comparison, curves, x):
            for i in range(len(c.x)):
                lo, hi = c.ci_lo[i], c.ci_hi[i]
                w.writerow([c.label, _num(c.x[i]), int(c.n[i]), repr(float(c.mean[i])),
                            "" if np.isnan(lo) else repr(float(lo)), "" if np.isnan(hi) else repr(float(hi))])
    return path


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def draw_loss(ax, comparison: Comparison, store: RunStore, x: str, columns: int, notes: Notes,
              individual: bool = True) -> str:
    """Each group's mean loss with its shaded 95% interval (where n ≥ 2); each run faintly under it.

    The y axis spans the drawn runs and means (log when they span more than ×10): with two
    repeats t(0.975, 1) = 12.7 makes the interval far wider than the runs, and it is cut at the
    axes rather than squeezing the curves; curves.csv holds it whole.
    """
    curves = load_curves(comparison, store)
    means = [c for c in group_curves(comparison, curves, x) if len(c.x)]
    if not means:
        return "no run logged a loss"
    lo = min(float(np.nanmin(c.x)) for c in means)
    hi = max(float(np.nanmax(c.x)) for c in means)
    low = min(float(np.nanmin(c.mean)) for c in means)
    high = max(float(np.nanmax(c.mean)) for c in means)
    log = low > 0 and high > 10 * low  # decided by the means
    if individual:  # the y range is the data's (runs and means): a wide interval (n = 2) runs off the edges
        drawn = [curves[r].loss for c in means for r in comparison.group(c.key).run_ids if r in curves]
        low = min([low] + [float(np.min(y)) for y in drawn if len(y)])
        high = max([high] + [float(np.max(y)) for y in drawn if len(y)])
    index = {g.key: i for i, g in enumerate(comparison.groups)}
    for c in means:
        style = Style(index[c.key])
        group = comparison.group(c.key)
        if individual and group.n > 1:
            for run_id in group.run_ids:
                run = curves.get(run_id)
                if run is not None and len(run.step):
                    px, py = envelope(run.step if x == "step" else run.time, run.loss, columns, lo, hi)
                    ax.plot(px, py, color=style.color, linewidth=0.5, alpha=0.3, zorder=1)
        _draw_mean(ax, c, style, columns, lo, hi, group.n, low / 2 if log else None)
    ax.set_xlabel(X_LABELS[x])
    ax.set_ylabel("training loss")
    ax.set_title("loss (mean ± 95% CI over repeats)" if any(comparison.group(c.key).n > 1 for c in means)
                 else "loss")
    ax.set_xlim(lo, hi)
    if log and low > 0:
        from matplotlib.ticker import FuncFormatter

        ax.set_yscale("log")
        ax.set_ylim(low / 1.15, high * 1.15)
        plain = FuncFormatter(lambda v, _: f"{v:.3g}")  # "0.5", "2", not "2 × 10⁰"
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:.3g}" if f"{v:.0e}"[0] in "25" else ""))
    else:
        pad = 0.05 * (high - low) or 0.05 * abs(high) or 0.05
        ax.set_ylim(low - pad, high + pad)
    notes.shared = shared_settings(comparison)
    outside_legend(ax)
    return ""


def _draw_mean(ax, c: MeanCurve, style: Style, columns: int, lo: float, hi: float, n: int,
               floor: float | None) -> None:
    """The mean line and its band; ``floor``: a log axis's band bottom where the interval reaches zero."""
    ok = np.isfinite(c.x) & np.isfinite(c.mean)
    label = c.label if n == 1 else f"{c.label} (n={n})"
    px, py = envelope(c.x[ok], c.mean[ok], columns, lo, hi)
    ax.plot(px, py, color=style.color, linestyle=style.linestyle, marker=style.marker, markersize=2.5,
            markevery=max(1, len(px) // MARKERS_PER_CURVE), label=label, zorder=3)
    band = ok & np.isfinite(c.ci_lo) & np.isfinite(c.ci_hi)
    if band.any():
        bx, blo, bhi = band_envelope(c.x, c.ci_lo, c.ci_hi, band, columns, lo, hi)
        bottom = blo if floor is None else np.maximum(blo, floor)
        ax.fill_between(bx, bottom, bhi, where=np.isfinite(blo), color=style.color, alpha=0.2, linewidth=0,
                        zorder=2, interpolate=False)


def band_envelope(x: np.ndarray, low: np.ndarray, high: np.ndarray, valid: np.ndarray, columns: int, lo: float,
                  hi: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A band reduced to ``columns`` pixel columns: per column its lowest low and highest high (never narrower).

    Points outside ``valid`` (no interval) become NaN, so the band has gaps there.
    """
    low, high = np.where(valid, low, np.nan), np.where(valid, high, np.nan)
    if len(x) <= 4 * columns or (np.diff(x) < 0).any():
        return x, low, high
    span = hi - lo if hi > lo else 1.0
    col = np.clip(((x - lo) / span * columns).astype(np.int64), 0, columns - 1)
    starts = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])
    with np.errstate(invalid="ignore"):
        blo = np.fmin.reduceat(low, starts)
        bhi = np.fmax.reduceat(high, starts)
    return x[starts], blo, bhi
