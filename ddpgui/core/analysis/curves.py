"""Loss curves of repeats: the mean across the runs of one setting with a 95% t-interval per x.

Alignment (no interpolation): the runs of a group are aligned on their logged **steps**.  Every
step that any run of the group logged is a point; ``n`` there is the number of runs that logged
it (a stopped or shorter repeat leaves the tail with a smaller n, and that is shown, not hidden).
With ``x="time"`` a point's x is the mean, over those runs, of their seconds since their own
first logged step at that step: repeats log the same steps, not the same instants, so this
aligns them without interpolating.  The interval is mean ± t(0.975, n−1)·s/√n; where n = 1
there is no interval (NaN) and the mean is that run's value.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .comparison import Comparison, Curve
from .stats import t_quantile

CURVE_COLUMNS = ("group", "x", "n", "mean", "ci_lo", "ci_hi")


@dataclass
class MeanCurve:
    """One group's aligned curve: per point its x, the runs counted (n), mean and 95% interval (NaN for n < 2)."""

    key: str
    label: str
    x: np.ndarray
    n: np.ndarray
    mean: np.ndarray
    ci_lo: np.ndarray
    ci_hi: np.ndarray


def mean_curve(curves: Sequence[Curve], x: str = "step", key: str = "", label: str = "") -> MeanCurve:
    """The mean of ``curves`` (repeats) per step, with its 95% t-interval; x is the step or the mean time there."""
    if x not in ("step", "time"):
        raise ValueError(f"x must be step or time, got {x!r}")
    curves = [c for c in curves if len(c.step)]
    steps = np.unique(np.concatenate([c.step for c in curves])) if curves else np.zeros(0)
    loss = np.full((len(curves), len(steps)), np.nan)
    time = np.full((len(curves), len(steps)), np.nan)
    for i, c in enumerate(curves):
        # the last value a run logged at a step counts (a resumed step is logged again)
        order = np.argsort(c.step, kind="stable")
        s, keep = c.step[order], np.r_[np.diff(c.step[order]) != 0, True]
        at = np.searchsorted(steps, s[keep])
        loss[i, at] = c.loss[order][keep]
        time[i, at] = c.time[order][keep]
    n = np.sum(np.isfinite(loss), axis=0)
    counted = np.maximum(n, 1)
    mean = np.nansum(loss, axis=0) / counted  # every step has n >= 1: some run logged it
    xs = steps.astype(np.float64) if x == "step" else np.nansum(time, axis=0) / counted
    std = np.sqrt(np.nansum((loss - mean) ** 2, axis=0) / np.maximum(n - 1, 1))
    half = np.full(len(steps), np.nan)
    for k in np.unique(n[n >= 2]):
        at = n == k
        half[at] = t_quantile(int(k) - 1) * std[at] / math.sqrt(int(k))
    return MeanCurve(key, label, xs, n.astype(np.int64), mean, mean - half, mean + half)


def group_curves(comparison: Comparison, curves: Mapping[str, Curve], x: str = "step") -> list[MeanCurve]:
    """Each group's :func:`mean_curve` over its runs' curves (runs without a curve are left out)."""
    out = []
    for g in comparison.groups:
        mine = [curves[r] for r in g.run_ids if r in curves]
        out.append(mean_curve(mine, x, g.key, g.label))
    return out
