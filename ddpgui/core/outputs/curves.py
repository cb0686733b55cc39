"""Loss curves of repeats, drawn and written: each group's smoothed centre with its 95% interval, runs under it.

The aggregation (smoothing, alignment on steps, the interval) is :mod:`ddpgui.core.analysis.curves`;
here are the loss figure of :func:`ddpgui.core.outputs.figures.write_figures` and ``curves.csv``.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from ..analysis.comparison import Comparison, Curve, load_curve
from ..analysis.curves import CURVE_COLUMNS, SMOOTHING, MeanCurve, group_curves
from ..analysis.stats import MIN_N
from ..store import RunStore
from .files import output_file
from .style import MARKERS_PER_CURVE, X_LABELS, Notes, Style, envelope, group_key, outside_legend, shared_parts

#: Two centres closer than this share of the y axis everywhere they overlap are said to coincide (a line is
#: about 0.7% of a single-column axis high).
COINCIDE = 0.01


def load_curves(comparison: Comparison, store: RunStore) -> dict[str, Curve]:
    """Every compared run's loss curve (run id → curve)."""
    return {r.run_id: load_curve(store, r.run_id) for r in comparison.runs}


def write_curves_csv(comparison: Comparison, store: RunStore, path: Path, x: str = "step",
                     curves: dict[str, Curve] | None = None, smoothing: float = SMOOTHING) -> Path:
    """``curves.csv``: per group and x its n, centre of the smoothed loss and 95% interval (empty where n < 3),
    which centre it is and the smoothing weight."""
    curves = load_curves(comparison, store) if curves is None else curves
    with output_file(path, newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CURVE_COLUMNS)
        for c in group_curves(comparison, curves, x, smoothing):
            for i in range(len(c.x)):
                lo, hi = c.ci_lo[i], c.ci_hi[i]
                w.writerow([c.label, _num(c.x[i]), int(c.n[i]), repr(float(c.mean[i])),
                            "" if np.isnan(lo) else repr(float(lo)), "" if np.isnan(hi) else repr(float(hi)),
                            c.centre, c.smoothing])
    return path


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def coinciding(means: list[MeanCurve], span: float, share: float = COINCIDE) -> list[tuple[int, int]]:
    """Pairs (i, j) of centres that differ by less than ``share`` of ``span`` at every step both have."""
    pairs = []
    for i, a in enumerate(means):
        for j in range(i + 1, len(means)):
            b = means[j]
            common, ia, ib = np.intersect1d(a.x, b.x, assume_unique=True, return_indices=True)
            if len(common) and np.nanmax(np.abs(a.mean[ia] - b.mean[ib])) < share * span:
                pairs.append((i, j))
    return pairs


def draw_loss(ax, comparison: Comparison, store: RunStore, x: str, columns: int, notes: Notes,
              individual: bool = True, smoothing: float = SMOOTHING) -> str:
    """Each group's smoothed centre with its shaded 95% interval (where n ≥ 3); each run faintly under it
    (``individual``; always for a group of 2 repeats, which has no interval).

    The y axis spans the drawn curves (log when the centres span more than ×10), never the band:
    curves.csv holds the band whole.  Centres that coincide are said to in a remark; their markers are
    staggered so that each stays visible.
    """
    curves = load_curves(comparison, store)
    means = [c for c in group_curves(comparison, curves, x, smoothing) if len(c.x)]
    if not means:
        return "no run logged a loss"
    lo = min(float(np.nanmin(c.x)) for c in means)
    hi = max(float(np.nanmax(c.x)) for c in means)
    low = min(float(np.nanmin(c.mean)) for c in means)
    high = max(float(np.nanmax(c.mean)) for c in means)
    log = low > 0 and high > 10 * low  # decided by the centres
    index = {g.key: i for i, g in enumerate(comparison.groups)}
    faint = [c for c in means if len(c.runs) > 1 and (individual or len(c.runs) < MIN_N)]
    for c in faint:  # the y range is the drawn curves': runs and centres, never the band
        low = min([low] + [float(np.min(y)) for _, y in c.runs if len(y)])
        high = max([high] + [float(np.max(y)) for _, y in c.runs if len(y)])
    for c in faint:
        style = Style(index[c.key])
        for rx, ry in c.runs:
            px, py = envelope(rx, ry, columns, lo, hi)
            ax.plot(px, py, color=style.color, linewidth=0.5, alpha=0.35, zorder=1)
    span = (np.log(high) - np.log(low)) if log else (high - low)
    together = coinciding([_logged(c) for c in means] if log else means, span or 1.0)
    for k, c in enumerate(means):
        _draw_mean(ax, c, Style(index[c.key]), columns, lo, hi, comparison.group(c.key).n,
                   low / 2 if log else None, k, len(means))
    if together:
        named = [" and ".join(_name(means[i], index) for i in pair) for pair in together]
        notes.remark(f"{'; '.join(named)} coincide (within {COINCIDE:.0%} of the axis): markers staggered.")
    ax.set_xlabel(X_LABELS[x])
    ax.set_ylabel("training loss" + (f" (EMA {smoothing:g})" if smoothing else ""))
    counts = [comparison.group(c.key).n for c in means]
    centre = "geometric mean" if all(c.centre == "geometric mean" for c in means if len(c.runs) > 1) else "mean"
    if any(n >= MIN_N for n in counts):
        ax.set_title(f"loss ({centre}, 95% CI" + ("" if all(n >= MIN_N for n in counts if n > 1) else
                                                  f" where n ≥ {MIN_N}") + ")")
    else:
        ax.set_title("loss" + (f" ({centre}; faint: repeats)" if any(n > 1 for n in counts) else ""))
    if smoothing:
        notes.remark(f"Smoothed: TensorBoard's debiased EMA, weight {smoothing:g}, each run before averaging.")
    if any(1 < n < MIN_N for n in counts):
        notes.remark(f"An interval needs ≥ {MIN_N} repeats: with fewer, the faint lines are the repeats.")
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
    notes.shared = shared_parts(comparison)
    outside_legend(ax, notes)
    return ""


def _logged(c: MeanCurve) -> MeanCurve:
    return MeanCurve(c.key, c.label, c.x, c.n, np.log(c.mean), c.ci_lo, c.ci_hi)


def _name(c: MeanCurve, index: dict[str, int]) -> str:
    return c.label or group_key(index[c.key])


def _draw_mean(ax, c: MeanCurve, style: Style, columns: int, lo: float, hi: float, n: int,
               floor: float | None, k: int = 0, count: int = 1) -> None:
    """The centre line and its band; ``floor``: a log axis's band bottom; the k-th of ``count`` curves puts its
    markers k/count of the way between the others' (coinciding curves stay apart)."""
    ok = np.isfinite(c.x) & np.isfinite(c.mean)
    label = c.label if n == 1 else f"{c.label} (n={n})"
    px, py = envelope(c.x[ok], c.mean[ok], columns, lo, hi)
    every = max(1, len(px) // MARKERS_PER_CURVE)
    ax.plot(px, py, color=style.color, linestyle=style.linestyle, marker=style.marker, markersize=2.5,
            markevery=(min(len(px) - 1, k * every // max(1, count)), every), label=label, zorder=3)
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
