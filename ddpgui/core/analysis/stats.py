"""Student-t intervals: the t distribution, estimates of a mean (with spread) and ratios of two means."""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(df: float, confidence: float = CONFIDENCE) -> float:
    """The two-sided critical value: P(|T| <= q) = ``confidence`` (12.706 for df 1, 1.960 as df grows)."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    p = 0.5 + confidence / 2.0
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):  # bisection to float precision: the CDF is monotone
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13 * hi:
            break
    return 0.5 * (lo + hi)


@dataclass
class Estimate:
    """A mean with its spread: ``ci95`` is the half-width of the 95% interval (mean ± ci95).

    ``over`` says what the n values are: ``"intervals"`` (the logged intervals of one run,
    each ``log_every`` steps) or ``"repeats"`` (one value per run of a group).  ``mean`` is
    None when there was nothing to average and ``reason`` says why; ``std`` and ``ci95``
    are None (with a reason) for a single value.
    """

    mean: float | None
    std: float | None = None
    ci95: float | None = None
    n: int = 0
    over: str = ""
    reason: str = ""

    @property
    def low(self) -> float | None:
        return None if self.mean is None or self.ci95 is None else self.mean - self.ci95

    @property
    def high(self) -> float | None:
        return None if self.mean is None or self.ci95 is None else self.mean + self.ci95


def estimate(values: Iterable[float], over: str, confidence: float = CONFIDENCE) -> Estimate:
    """Mean, sample std (n − 1) and the Student-t interval t(n − 1) · std / √n of the finite values."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return Estimate(None, n=0, over=over, reason=f"no values over {over}")
    same = bool((x == x[0]).all())  # exactly no spread: no rounding noise in the mean or the std
    mean = float(x[0]) if same else float(x.mean())
    if n == 1:
        return Estimate(mean, n=1, over=over, reason=f"one value over {over}: no spread")
    std = 0.0 if same else float(x.std(ddof=1))
    return Estimate(mean, std, t_quantile(n - 1, confidence) * std / math.sqrt(n), n, over)


def rate_estimate(rates: np.ndarray, over: str, confidence: float = CONFIDENCE) -> Estimate:
    """Throughput from per-interval rates, as work over time: the mean *time per unit* τ = 1 / rate.

    Every interval does the same work (``log_every`` steps), so 1 / mean(τ) is total work over
    total time — what the runner's summary reports — where the mean of the rates would favour
    fast intervals.  Spread by the delta method: std = s_τ / τ̄², ci95 = ci_τ / τ̄².
    """
    est = estimate(1.0 / rates, over, confidence)
    if est.mean is None:
        return est
    scale = 1.0 / est.mean ** 2
    return Estimate(1.0 / est.mean, None if est.std is None else est.std * scale,
                    None if est.ci95 is None else est.ci95 * scale, est.n, over, est.reason)


@dataclass
class Ratio:
    """A ratio of means a/b with its 95% interval [low, high] (delta method, Welch–Satterthwaite df).

    ``n`` is (n of a, n of b) and ``over`` what those n count; ``value`` None → ``reason``.
    """

    value: float | None
    low: float | None = None
    high: float | None = None
    n: tuple[int, int] = (0, 0)
    over: str = ""
    reason: str = ""


def ratio(a: Estimate, b: Estimate, confidence: float = CONFIDENCE) -> Ratio:
    """R = mean_a / mean_b; SE(R) = |R| · sqrt(ra + rb) with ra = std_a² / (n_a · mean_a²) (likewise b).

    The interval is R ± t(df) · SE(R) with df = (ra + rb)² / (ra² / (n_a − 1) + rb² / (n_b − 1)).
    """
    n = (a.n, b.n)
    over = a.over if a.over == b.over else f"{a.over}/{b.over}"
    if a.mean is None or b.mean is None:
        return Ratio(None, n=n, over=over, reason=a.reason if a.mean is None else f"baseline: {b.reason}")
    if b.mean == 0:
        return Ratio(None, n=n, over=over, reason="the baseline's mean is zero")
    r = a.mean / b.mean
    if a.std is None or b.std is None or a.mean == 0:
        return Ratio(r, n=n, over=over, reason="no interval: " + (a.reason or b.reason or "a mean of zero"))
    ra, rb = a.std ** 2 / (a.n * a.mean ** 2), b.std ** 2 / (b.n * b.mean ** 2)
    if ra + rb == 0:
        return Ratio(r, r, r, n, over)
    df = (ra + rb) ** 2 / (ra ** 2 / (a.n - 1) + rb ** 2 / (b.n - 1))
    half = t_quantile(df, confidence) * abs(r) * math.sqrt(ra + rb)
    return Ratio(r, r - half, r + half, n, over)
