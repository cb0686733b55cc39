"""Intervals that hold at small n: estimates of a centre (with spread) and ratios of two centres.

The rules (docs/ANALYSIS.md, "Intervals"):

- fewer than :data:`MIN_N` values: no interval at all; the values themselves and their range are kept;
- values that are all > 0 (throughput, time, memory, energy, cost, a positive loss): the t-interval of the
  mean of their logarithms, back-transformed, around the **geometric mean** — it never leaves the positive
  axis and is asymmetric, as the spread of a positive quantity is;
- other values (a loss that may be negative, a utilisation of 0 %): the plain Student-t interval around the
  arithmetic mean, its low end cut at 0 for a quantity that cannot be negative (``nonnegative``);
- a ratio of two positive centres: the Welch t-interval of the difference of the log means, back-transformed
  (never below 0); below :data:`MIN_N` on either side: the range of the pairwise ratios instead.

The t quantile and CDF are SciPy's (``scipy.special.stdtrit``/``stdtr``, what ``scipy.stats.t.ppf``/``cdf``
call), imported on first use: ``import scipy.stats`` alone takes over a second.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
#: The fewest values an interval is computed from; below it, the values and their range.
MIN_N = 3

#: Interval methods (``Estimate.method``, ``Ratio.method``) → how a table or a caption names them.
LOG_T = "log-t"
PLAIN_T = "t"
INVERTED_T = "inverted-t"
RANGE = "range"
METHODS = {LOG_T: "95% t-interval on the log scale (geometric mean)", PLAIN_T: "95% t-interval (mean)",
           INVERTED_T: "95% t-interval of the time per unit, inverted", RANGE: "range of the repeats",
           "": "no interval"}


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom (SciPy's ``stdtr``)."""
    from scipy.special import stdtr

    return float(stdtr(df, t))


def t_quantile(df: float, confidence: float = CONFIDENCE) -> float:
    """The two-sided critical value: P(|T| <= q) = ``confidence`` (12.706 for df 1, 1.960 as df grows).

    ``scipy.special.stdtrit(df, p)``: the function ``scipy.stats.t.ppf(p, df)`` evaluates.
    """
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    from scipy.special import stdtrit

    return float(stdtrit(df, 0.5 + confidence / 2.0))


def needs_note(n: int, over: str = "repeats") -> str:
    """What a value over fewer than :data:`MIN_N` ``over`` says: how many a claim needs."""
    return f"an interval needs ≥ {MIN_N} {over}; n={n}"


class _Spread:
    """What an Estimate and a Ratio share: whether there is an interval, and the range of the values."""

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def range(self) -> tuple[float, float] | None:
        """(smallest, largest) of the values, when there are two or more."""
        return (min(self.values), max(self.values)) if len(self.values) >= 2 else None


@dataclass
class Estimate(_Spread):
    """A centre with its spread and its 95% interval [low, high] (``method`` says which kind, ``centre`` which
    mean ``mean`` is).

    ``over`` says what the n values are: ``"intervals"`` (the logged intervals of one run, each
    ``log_every`` steps) or ``"repeats"`` (one value per run of a group).  ``values`` are those values
    (repeats only: a run's intervals are not kept).  ``mean`` is None when there was nothing to average and
    ``reason`` says why.  ``ci95`` is the half-width of a symmetric (plain t) interval, else None; ``low`` and
    ``high`` are None below :data:`MIN_N` values (see ``values`` and their range instead).
    """

    mean: float | None
    std: float | None = None
    ci95: float | None = None
    n: int = 0
    over: str = ""
    reason: str = ""
    low: float | None = None
    high: float | None = None
    values: tuple[float, ...] = ()
    method: str = ""
    centre: str = "mean"

    def __post_init__(self):
        if self.ci95 is not None and self.mean is not None and self.low is None and self.high is None:
            self.low, self.high = self.mean - self.ci95, self.mean + self.ci95
            self.method = self.method or PLAIN_T

    @property
    def interval_text(self) -> str:
        """How the interval is shown in words: its kind, or the range of the repeats and what a claim needs."""
        if self.has_interval:
            return METHODS[self.method]
        if self.range is not None:
            return f"range of n={len(self.values)} {self.over} ({needs_note(len(self.values), self.over)})"
        return f"no interval ({needs_note(self.n, self.over)})" if self.mean is not None else ""


def _clean(values: Iterable[float | None]) -> np.ndarray:
    x = np.asarray([v for v in values if v is not None], dtype=float)
    return x[np.isfinite(x)]


def estimate(values: Iterable[float | None], over: str, confidence: float = CONFIDENCE,
             nonnegative: bool = False) -> Estimate:
    """The centre and 95% interval of the finite values (rules in the module docstring).

    All > 0: geometric mean exp(m) and exp(m ± t(n − 1) · s / √n), m and s the mean and sample std of the
    logs.  Otherwise: mean ± t(n − 1) · std / √n, the low end cut at 0 when ``nonnegative`` (said in
    ``reason``).  ``std`` is always the values' own sample standard deviation (n − 1).
    """
    x = _clean(values)
    n = len(x)
    if n == 0:
        return Estimate(None, n=0, over=over, reason=f"no values over {over}")
    kept = tuple(float(v) for v in x)
    same = bool((x == x[0]).all())  # exactly no spread: no rounding noise in the centre or the std
    positive = bool((x > 0).all())
    centre = "geometric mean" if positive and n > 1 else "mean"
    mean = float(x[0]) if same else (float(np.exp(np.log(x).mean())) if positive else float(x.mean()))
    if n == 1:
        return Estimate(mean, n=1, over=over, reason=f"one value over {over}: no spread", values=kept)
    std = 0.0 if same else float(x.std(ddof=1))
    if n < MIN_N:
        return Estimate(mean, std, None, n, over, values=kept, method=RANGE, centre=centre)
    t = t_quantile(n - 1, confidence)
    if positive:
        logs = np.log(x)
        half = 0.0 if same else t * float(logs.std(ddof=1)) / math.sqrt(n)
        low, high = (mean, mean) if same else (float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half)))
        return Estimate(mean, std, None, n, over, low=low, high=high, values=kept, method=LOG_T, centre=centre)
    half = t * std / math.sqrt(n)
    est = Estimate(mean, std, half, n, over, "values not all > 0: plain t-interval around the mean", values=kept,
                   method=PLAIN_T)
    if nonnegative and est.low < 0:  # a quantity that cannot be negative: the interval stops at 0
        est.low, est.ci95 = 0.0, None
        est.reason += ", cut at 0"
    return est


def rate_estimate(rates: np.ndarray, over: str, confidence: float = CONFIDENCE) -> Estimate:
    """Throughput from per-interval rates, as work over time: the mean *time per unit* τ = 1 / rate.

    Every interval does the same work (``log_every`` steps), so 1 / mean(τ) is total work over
    total time — what the runner's summary reports — where the mean of the rates would favour
    fast intervals.  The interval is τ̄'s t-interval, inverted: [1 / (τ̄ + h), 1 / (τ̄ − h)] (never below 0);
    none when h ≥ τ̄ (said in ``reason``).  ``std`` by the delta method: s_τ / τ̄².
    """
    tau = _clean(1.0 / np.asarray(rates, dtype=float))
    n = len(tau)
    if n == 0:
        return Estimate(None, n=0, over=over, reason=f"no values over {over}")
    same = bool((tau == tau[0]).all())
    tau_mean = float(tau[0]) if same else float(tau.mean())
    rate = 1.0 / tau_mean
    if n == 1:
        return Estimate(rate, n=1, over=over, reason=f"one value over {over}: no spread", centre="work over time")
    std_tau = 0.0 if same else float(tau.std(ddof=1))
    std = std_tau / tau_mean ** 2
    if n < MIN_N:
        return Estimate(rate, std, None, n, over, reason=needs_note(n, over), centre="work over time")
    half = t_quantile(n - 1, confidence) * std_tau / math.sqrt(n)
    if half >= tau_mean:
        return Estimate(rate, std, None, n, over, reason="the intervals' spread is too wide for an interval",
                        centre="work over time")
    return Estimate(rate, std, None, n, over, low=1.0 / (tau_mean + half), high=1.0 / (tau_mean - half),
                    method=INVERTED_T, centre="work over time")


@dataclass
class Ratio(_Spread):
    """A ratio of centres a/b with its 95% interval [low, high] (``method``), or below :data:`MIN_N` on either
    side the pairwise ratios a_i / b_j (``values``) and their range.

    ``n`` is (n of a, n of b) and ``over`` what those n count; ``value`` None → ``reason``.
    """

    value: float | None
    low: float | None = None
    high: float | None = None
    n: tuple[int, int] = (0, 0)
    over: str = ""
    reason: str = ""
    values: tuple[float, ...] = ()
    method: str = ""

    def mapped(self, f, flips: bool = False) -> Ratio:
        """The same ratio through a monotone ``f`` (decreasing when ``flips``: low and high swap)."""
        g = lambda v: None if v is None else f(v)  # noqa: E731
        low, high = (g(self.high), g(self.low)) if flips else (g(self.low), g(self.high))
        return Ratio(g(self.value), low, high, self.n, self.over, self.reason, tuple(f(v) for v in self.values),
                     self.method)


def _log_moments(e: Estimate) -> tuple[float, float] | None:
    """(mean, variance of the mean) of log values: from the values, else by the delta method from (mean, std)."""
    x = np.asarray(e.values, float)
    if len(x) == e.n and len(x) >= 2:
        if not (x > 0).all():
            return None
        logs = np.log(x)
        return float(logs.mean()), float(logs.var(ddof=1)) / len(x)
    if e.mean is None or e.mean <= 0 or e.std is None:
        return None
    return math.log(e.mean), (e.std / e.mean) ** 2 / e.n


def ratio(a: Estimate, b: Estimate, confidence: float = CONFIDENCE) -> Ratio:
    """R = centre_a / centre_b; its interval on the log scale: log R ± t(ν) · √(va + vb), back-transformed.

    va = var(log a) / n_a (likewise b), ν = (va + vb)² / (va² / (n_a − 1) + vb² / (n_b − 1)) (Welch).
    With the geometric means as centres, log R is exactly the difference of the log means.
    """
    n = (a.n, b.n)
    over = a.over if a.over == b.over else f"{a.over}/{b.over}"
    if a.mean is None or b.mean is None:
        return Ratio(None, n=n, over=over, reason=a.reason if a.mean is None else f"baseline: {b.reason}")
    if b.mean == 0:
        return Ratio(None, n=n, over=over, reason="the baseline's mean is zero")
    r = a.mean / b.mean
    if min(a.n, b.n) < MIN_N:
        pairs = tuple(x / y for x in a.values for y in b.values if y != 0) if a.values and b.values else ()
        small = min(a.n, b.n)
        return Ratio(r, n=n, over=over, reason="no interval: " + needs_note(small, a.over or over),
                     values=pairs if len(pairs) >= 2 else (), method=RANGE if len(pairs) >= 2 else "")
    ma, mb = _log_moments(a), _log_moments(b)
    if ma is None or mb is None or r <= 0:
        return Ratio(r, n=n, over=over, reason="no interval: values not all > 0")
    va, vb = ma[1], mb[1]
    if va + vb == 0:
        return Ratio(r, r, r, n, over, method=LOG_T)
    df = (va + vb) ** 2 / (va ** 2 / (a.n - 1) + vb ** 2 / (b.n - 1))
    half = t_quantile(df, confidence) * math.sqrt(va + vb)
    return Ratio(r, r * math.exp(-half), r * math.exp(half), n, over, method=LOG_T)

