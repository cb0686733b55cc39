"""Loss curves of repeats: each run smoothed, then the centre across the runs of one setting with a 95% interval.

Smoothing: TensorBoard's debiased exponential moving average (:func:`ema`, weight :data:`SMOOTHING`, its
default) of each run's own logged points, before anything is averaged; weight 0 keeps the raw values.

Alignment (no interpolation): the runs of a group are aligned on their logged **steps**.  Every
step that any run of the group logged is a point; ``n`` there is the number of runs that logged
it (a stopped or shorter repeat leaves the tail with a smaller n, and that is shown, not hidden).
With ``x="time"`` a point's x is the mean, over those runs, of their seconds since their own
first logged step at that step: repeats log the same steps, not the same instants, so this
aligns them without interpolating.

The centre and interval per point follow :mod:`.stats`: when every smoothed value of the group is > 0 the
geometric mean with the t-interval of the log values, back-transformed (never below 0); otherwise the
arithmetic mean ± t(0.975, n−1)·s/√n.  Where n < 3 there is no interval (NaN): the repeats are drawn instead.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .comparison import Comparison, Curve
from .stats import MIN_N, t_quantile

CURVE_COLUMNS = ("group", "x", "n", "mean", "ci_lo", "ci_hi", "centre", "smoothing")
#: TensorBoard's default smoothing weight (its slider starts at 0.6).
SMOOTHING = 0.6


def ema(y: np.ndarray, weight: float = SMOOTHING) -> np.ndarray:
    """TensorBoard's debiased exponential moving average of finite values (``weight`` in [0, 1)).

    s_i = w·s_{i−1} + (1 − w)·y_i from s_{−1} = 0, divided by 1 − w^(i+1) (the debiasing: the first value is
    y_0, not (1 − w)·y_0).  Computed in blocks short enough that w^−k stays far inside float range: within a
    block s_k = w^(k+1)·c + (1 − w)·w^k·Σ_{j≤k} w^−j·y_j, c the value carried from the block before.
    """
    y = np.asarray(y, dtype=np.float64)
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"the smoothing weight must be in [0, 1), got {weight}")
    if weight == 0.0 or len(y) < 2 or (y == y[0]).all():  # TensorBoard leaves a constant series as it is
        return y.copy()
    block = max(1, min(len(y), int(150.0 / -math.log10(weight))))
    out = np.empty_like(y)
    carry = 0.0
    powers = weight ** np.arange(block, dtype=np.float64)  # w^k
    for start in range(0, len(y), block):
        part = y[start:start + block]
        k = len(part)
        pw = powers[:k]
        out[start:start + k] = weight * pw * carry + (1.0 - weight) * pw * np.cumsum(part / pw)
        carry = out[start + k - 1]
    return out / (1.0 - weight ** np.arange(1, len(y) + 1, dtype=np.float64))


@dataclass
class MeanCurve:
    """One group's aligned curve: per point its x, the runs counted (n), centre and 95% interval (NaN for
    n < 3); ``centre`` names the centre; ``runs`` holds each run's smoothed (x, y), as drawn faintly."""

    key: str
    label: str
    x: np.ndarray
    n: np.ndarray
    mean: np.ndarray
    ci_lo: np.ndarray
    ci_hi: np.ndarray
    centre: str = "mean"
    smoothing: float = SMOOTHING
    runs: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)


def _interval(values: np.ndarray, n: np.ndarray, log: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column of ``values`` (runs × points, NaN where a run has no point): centre, low, high."""
    counted = np.maximum(n, 1)
    data = np.log(values) if log else values
    mean = np.nansum(data, axis=0) / counted  # every step has n >= 1: some run logged it
    std = np.sqrt(np.nansum((data - mean) ** 2, axis=0) / np.maximum(n - 1, 1))
    half = np.full(len(mean), np.nan)
    for k in np.unique(n[n >= MIN_N]):
        at = n == k
        half[at] = t_quantile(int(k) - 1) * std[at] / math.sqrt(int(k))
    if log:
        mean, low, high = np.exp(mean), np.exp(mean - half), np.exp(mean + half)
        single = n == 1
        mean[single] = np.nansum(values[:, single], axis=0)  # one run: its own value, exactly
        return mean, low, high
    return mean, mean - half, mean + half


def mean_curve(curves: Sequence[Curve], x: str = "step", key: str = "", label: str = "",
               smoothing: float = SMOOTHING) -> MeanCurve:
    """The centre of ``curves`` (repeats, each smoothed by :func:`ema`) per step, with its 95% interval."""
    if x not in ("step", "time"):
        raise ValueError(f"x must be step or time, got {x!r}")
    curves = [c for c in curves if len(c.step)]
    steps = np.unique(np.concatenate([c.step for c in curves])) if curves else np.zeros(0)
    loss = np.full((len(curves), len(steps)), np.nan)
    time = np.full((len(curves), len(steps)), np.nan)
    runs = []
    for i, c in enumerate(curves):
        # the last value a run logged at a step counts (a resumed step is logged again)
        order = np.argsort(c.step, kind="stable")
        s, keep = c.step[order], np.r_[np.diff(c.step[order]) != 0, True]
        at = np.searchsorted(steps, s[keep])
        smooth = ema(c.loss[order][keep], smoothing)
        loss[i, at] = smooth
        time[i, at] = c.time[order][keep]
        runs.append((s[keep].astype(np.float64) if x == "step" else c.time[order][keep], smooth))
    n = np.sum(np.isfinite(loss), axis=0)
    log = bool(len(steps)) and bool(np.all(loss[np.isfinite(loss)] > 0))
    mean, low, high = _interval(loss, n, log)
    xs = steps.astype(np.float64) if x == "step" else np.nansum(time, axis=0) / np.maximum(n, 1)
    return MeanCurve(key, label, xs, n.astype(np.int64), mean, low, high,
                     "geometric mean" if log else "mean", smoothing, runs)


def group_curves(comparison: Comparison, curves: Mapping[str, Curve], x: str = "step",
                 smoothing: float = SMOOTHING) -> list[MeanCurve]:
    """Each group's :func:`mean_curve` over its runs' curves (runs without a curve are left out)."""
    out = []
    for g in comparison.groups:
        mine = [curves[r] for r in g.run_ids if r in curves]
        out.append(mean_curve(mine, x, g.key, g.label, smoothing))
    return out
