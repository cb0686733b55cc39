"""Statistics of stored runs: steady-state throughput with confidence intervals, and comparisons.

Qt-free, numpy only.  Every rule and formula is written down in docs/ANALYSIS.md.
The intended use, from the CLI or the app's compare view::

    stats = [run_stats(store, run_id, price_per_hour=run_price_per_hour(store.get_run(run_id), hosts))
             for run_id in run_ids]
    comparison = compare(stats, baseline=run_ids[0])      # groups repeats, speedups, scaling
    comparison.groups[0].metrics["throughput"]            # an Estimate: mean, std, ci95, n, over

A value that cannot be computed is ``None`` and the object's ``reasons`` says why
(``reasons["energy_j"] == "no GPU power samples (a CPU run?)"``): a missing
measurement is never a crash and never a made-up number.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from remote_runner.spools import METRICS, TELEMETRY

from ..store import RunRecord, RunStore

if TYPE_CHECKING:
    from ..hosts import HostStore

#: Config keys that do not change what a run measures: runs that differ only in these are repeats
#: (identity, the seed, and the operational timeouts and sampling interval).
REPEAT_KEYS = frozenset({"schema", "run_id", "name", "tags", "seed", "node_rank", "rdzv_endpoint", "rdzv_timeout_s",
                         "rank_failure_timeout_s", "stop_grace_s", "telemetry_interval_s"})
#: The key that names a run's hosts in a setting (hosts are a setting: another machine, another result).
HOSTS_KEY = "hosts"
#: Which way is better for each compared metric (True: higher).
HIGHER_IS_BETTER = {"throughput": True, "speedup": True, "mem_peak_gib": False, "compile_s": False,
                    "time_to_n_s": False, "final_loss": False, "best_loss": False, "gpu_util_pct": True,
                    "energy_j": False, "energy_per_1000_steps_j": False, "cost": False, "cost_per_1000_steps": False}
#: The RunStats fields that a group summarises over its repeats.
RUN_METRICS = ("throughput", "mem_peak_gib", "compile_s", "time_to_n_s", "final_loss", "best_loss", "gpu_util_pct",
               "energy_j", "energy_per_1000_steps_j", "duration_s", "cost", "cost_per_1000_steps")
CONFIDENCE = 0.95


# --------------------------------------------------------------------------------------------------
# Student t and estimates


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


# --------------------------------------------------------------------------------------------------
# Steady state


@dataclass(frozen=True)
class SteadyRule:
    """The stability test of docs/ANALYSIS.md, applied after the runner's warm-up and compile events.

    Over the m intervals left: window ``w = clamp(round(m · window_fraction), min_window,
    max_window)`` (at most m); the final level M is the median of the last
    ``max(w, ceil(m · final_fraction))`` values; the noise σ is estimated from successive
    differences, σ = 1.4826 · MAD(diff(x)) / √2 (a trend does not inflate it); a rolling
    median is *settled* when it is within δ = max(tolerance · |M|, noise_z · 1.2533 · σ · √(1/w + 1/f))
    of M, f being the size of M's block (1.2533 σ / √k: the standard error of a median of k
    values; noise_z = 3 keeps chance deviations rare across the many windows).  The steady state
    starts right after the last unsettled window, at the first value itself within δ of M; a steady part shorter than
    ``min_fraction`` of the m intervals means the run never settled: no steady state.
    """

    tolerance: float = 0.05
    window_fraction: float = 0.1
    min_window: int = 3
    max_window: int = 50
    final_fraction: float = 0.25
    noise_z: float = 3.0
    min_fraction: float = 0.2

    def window(self, m: int) -> int:
        return min(m, max(self.min_window, min(self.max_window, round(m * self.window_fraction))))


DEFAULT_RULE = SteadyRule()


def _rolling_medians(x: np.ndarray, w: int) -> np.ndarray:
    return np.median(np.lib.stride_tricks.sliding_window_view(x, w), axis=1)


def noise_sigma(values: np.ndarray) -> float:
    """σ from successive differences: 1.4826 · median(|d − median(d)|) / √2 with d = diff(values)."""
    if len(values) < 3:
        return 0.0
    d = np.diff(values)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2.0))


def steady_start(values: np.ndarray, rule: SteadyRule = DEFAULT_RULE) -> tuple[int | None, str]:
    """Index of the first steady value of ``values`` (already past warm-up and compile), or None and why."""
    m = len(values)
    if m == 0:
        return None, "no intervals after warm-up and compile"
    w = rule.window(m)
    block = max(w, math.ceil(m * rule.final_fraction))
    final = float(np.median(values[-block:]))
    spread = rule.noise_z * 1.2533 * noise_sigma(values) * math.sqrt(1.0 / w + 1.0 / block)
    band = max(rule.tolerance * abs(final), spread)
    off = np.flatnonzero(np.abs(_rolling_medians(values, w) - final) > band)
    start = int(off[-1]) + 1 if len(off) else 0
    while start < m and abs(values[start] - final) > band:  # a transitional value the last window's median hid
        start += 1
    if m - start < rule.min_fraction * m:
        return None, (f"throughput never settled: only the last {m - start} of {m} intervals stay within "
                      f"±{band:.4g} of the final median {final:.4g} (needs {rule.min_fraction:.0%})")
    return start, ""


def events_cut_step(events: Sequence[dict]) -> float:
    """The last step that warm-up or compilation touched, by the runner's events (0 when none)."""
    cut = 0.0
    for event in events:
        if event.get("event") == "warmup_done" and isinstance(event.get("step"), (int, float)):
            cut = max(cut, float(event["step"]))
        elif event.get("event") == "compile_end":
            cut = max(cut, 1.0)  # the first step traces and compiles the model
    return cut


# --------------------------------------------------------------------------------------------------
# Per run


@dataclass
class RunStats:
    """What one run measured.  ``None`` fields have their reason in ``reasons`` (field name → why).

    ``throughput`` is over the steady intervals of this run (``over="intervals"``), in
    ``throughput_unit`` (samples/s, or steps/s for a script that logs no samples_per_s).
    Energy is in joules, cost in the host's currency per hour × hours.
    """

    run_id: str
    name: str
    config: dict
    hosts: list[str]
    environment: dict
    world_size: int
    steps: int | None
    throughput: Estimate
    throughput_unit: str = "samples/s"
    steady_from_step: float | None = None
    mem_peak_gib: float | None = None
    compile_s: float | None = None
    n_steps: int | None = None
    time_to_n_s: float | None = None
    final_loss: float | None = None
    best_loss: float | None = None
    gpu_util_pct: float | None = None
    energy_j: float | None = None
    energy_per_1000_steps_j: float | None = None
    duration_s: float | None = None
    cost: float | None = None
    cost_per_1000_steps: float | None = None
    price_per_hour: float | None = None
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def setting(self) -> str:
        return setting_key(self.config, self.hosts)

    def value(self, metric: str) -> float | None:
        """A metric by name; ``throughput`` is its steady mean."""
        return self.throughput.mean if metric == "throughput" else getattr(self, metric)


def world_size(config: dict) -> int:
    return int(config.get("nproc_per_node") or 1) * int(config.get("nnodes") or 1)


def _finite(x: np.ndarray) -> np.ndarray:
    return x[np.isfinite(x)]


def _throughput(metrics: dict[str, np.ndarray], events: list[dict],
                rule: SteadyRule) -> tuple[np.ndarray, np.ndarray, str, str]:
    """(per-interval rates, their steps, unit, reason when empty) of the training intervals past the events' cut."""
    step, t = metrics["step"], metrics["t"]
    unit = "samples/s"
    rate = metrics["samples_per_s"]
    if not np.isfinite(rate).any():  # a script's records: steps per second from step and t
        unit = "steps/s"
        rate = np.full(len(step), np.nan)
        if len(step) > 1:
            dt, ds = np.diff(t), np.diff(step)
            with np.errstate(divide="ignore", invalid="ignore"):
                rate[1:] = np.where(dt > 0, ds / dt, np.nan)
    keep = np.isfinite(rate) & (rate > 0) & np.isfinite(step)
    warmup = metrics["warmup"]
    keep &= ~(warmup == 1)  # the runner marks intervals that include warm-up steps
    keep &= step > events_cut_step(events)
    for event in events:
        if event.get("event") == "compile_end" and isinstance(event.get("t"), (int, float)):
            keep &= t > event["t"]  # recorded before the compiled model ran: not steady
    if not keep.any():
        return rate[:0], step[:0], unit, "no training intervals after warm-up and compile"
    return rate[keep], step[keep], unit, ""


def run_stats(store: RunStore, run_id: str, price_per_hour: float | None = None, n_steps: int | None = None,
              rule: SteadyRule = DEFAULT_RULE) -> RunStats:
    """The statistics of one stored run (see docs/ANALYSIS.md for each rule).

    ``price_per_hour`` (the host's, see :func:`run_price_per_hour`) gives the cost;
    ``n_steps`` the step count for ``time_to_n_s`` (default: the run's last step).
    """
    run = store.get_run(run_id)
    reasons: dict[str, str] = {}
    metrics = store.series(run_id, METRICS, keys=["step", "t", "phase", "loss", "samples_per_s", "mem_peak_gib",
                                                   "warmup"])
    phase = metrics["phase"]
    if phase.dtype == object:  # a script's records have no phase: all of them are training
        train = (phase == "train") | (phase == None)  # noqa: E711 (elementwise on an object array)
        metrics = {k: v[train] for k, v in metrics.items()}
    events = [e for e in store.events(run_id) if e.get("source") != "client"]
    step, t = metrics["step"], metrics["t"]
    steps = int(np.nanmax(step)) if np.isfinite(step).any() else None

    rates, rate_steps, unit, why = _throughput(metrics, events, rule)
    steady_from = None
    if why:
        throughput = Estimate(None, over="intervals", reason=why)
    else:
        start, why = steady_start(rates, rule)
        if start is None:
            throughput = Estimate(None, n=0, over="intervals", reason=why)
        else:
            throughput = rate_estimate(rates[start:], "intervals")
            steady_from = float(rate_steps[start])
    if throughput.mean is None:
        reasons["throughput"] = throughput.reason

    stats = RunStats(run_id=run.id, name=run.name, config=run.config, hosts=list(run.hosts),
                     environment=run.environment, world_size=world_size(run.config), steps=steps,
                     throughput=throughput, throughput_unit=unit, steady_from_step=steady_from,
                     price_per_hour=price_per_hour, reasons=reasons)

    mem = _finite(metrics["mem_peak_gib"])
    if len(mem):
        stats.mem_peak_gib = float(mem.max())
    compile_s = [e["duration_s"] for e in events if e.get("event") == "compile_end"
                 and isinstance(e.get("duration_s"), (int, float))]
    if compile_s:
        stats.compile_s = float(compile_s[0])
    else:
        reasons["compile_s"] = ("not compiled (compile=off)" if run.config.get("compile", "off") == "off"
                                else "no compile_end event")
    loss = metrics["loss"]
    finite_loss = _finite(loss)
    if len(finite_loss):
        stats.final_loss = float(loss[np.flatnonzero(np.isfinite(loss))[-1]])
        stats.best_loss = float(finite_loss.min())
    else:
        reasons["final_loss"] = reasons["best_loss"] = "no finite loss logged"

    start_t = _start_time(events, t)
    stats.n_steps = n_steps if n_steps is not None else steps
    if stats.n_steps is not None and start_t is not None:
        reached = np.flatnonzero(step >= stats.n_steps)
        if len(reached):
            stats.time_to_n_s = float(t[reached[0]] - start_t)
        else:
            reasons["time_to_n_s"] = f"the run stopped at step {steps}, before step {stats.n_steps}"
    else:
        reasons["time_to_n_s"] = "no steps logged"

    _telemetry_stats(store, run, stats)
    _duration_and_cost(run, events, stats)
    return _fill_reasons(stats)


def _trapezoid(y: np.ndarray, x: np.ndarray) -> float:
    """∫ y dx by the trapezoid rule: Σ (y[i] + y[i+1]) / 2 · (x[i+1] − x[i])."""
    return float(np.sum((y[1:] + y[:-1]) * 0.5 * np.diff(x)))


def _start_time(events: list[dict], t: np.ndarray) -> float | None:
    """When training started: the train_start event, else the first metric record's time."""
    for event in events:
        if event.get("event") == "train_start" and isinstance(event.get("t"), (int, float)):
            return float(event["t"])
    finite = _finite(t)
    return float(finite[0]) if len(finite) else None


def _telemetry_stats(store: RunStore, run: RunRecord, stats: RunStats) -> None:
    """Average GPU utilisation and energy (trapezoid over each GPU's power samples, summed over GPUs)."""
    utils, energy, powered = [], 0.0, False
    for node in run.nodes:
        tel = store.series(run.id, TELEMETRY, node, keys=["t", "kind", "gpu", "util_pct", "power_w"])
        if not len(tel["t"]):
            continue
        gpu_rows = np.array([k == "gpu" for k in tel["kind"]], bool)
        utils.append(tel["util_pct"][gpu_rows])
        for gpu in np.unique(_finite(tel["gpu"][gpu_rows])):
            rows = gpu_rows & (tel["gpu"] == gpu) & np.isfinite(tel["power_w"]) & np.isfinite(tel["t"])
            if rows.sum() >= 2:
                energy += _trapezoid(tel["power_w"][rows], tel["t"][rows])
                powered = True
    util = _finite(np.concatenate(utils)) if utils else np.zeros(0)
    if len(util):
        stats.gpu_util_pct = float(util.mean())
    else:
        stats.reasons["gpu_util_pct"] = "no GPU utilisation samples (a CPU run?)"
    if powered:
        stats.energy_j = energy
        if stats.steps:
            stats.energy_per_1000_steps_j = 1000.0 * energy / stats.steps
    else:
        stats.reasons["energy_j"] = "no GPU power samples (a CPU run, or the GPU does not report power)"


def _duration_and_cost(run: RunRecord, events: list[dict], stats: RunStats) -> None:
    """Wall time from the supervisor's ``started`` event to the final event (else the run record's times)."""
    times = [e["t"] for e in events if isinstance(e.get("t"), (int, float))]
    if len(times) >= 2:
        stats.duration_s = float(max(times) - min(times))
    elif run.started_at is not None and run.ended_at is not None:
        stats.duration_s = float(run.ended_at - run.started_at)
    else:
        stats.reasons["duration_s"] = "the run has no start and end time yet"
    if stats.price_per_hour is None:
        stats.reasons["cost"] = "no price per hour in the host profile"
    elif stats.duration_s is not None:
        stats.cost = stats.price_per_hour * stats.duration_s / 3600.0
        if stats.steps:
            stats.cost_per_1000_steps = 1000.0 * stats.cost / stats.steps


#: Why a derived value is missing when nothing more specific was said: the value it derives from.
_DERIVED_FROM = {"energy_per_1000_steps_j": "energy_j", "cost_per_1000_steps": "cost", "cost": "duration_s"}


def _fill_reasons(stats: RunStats) -> RunStats:
    """Every None metric gets a reason: its own, the one of what it derives from, or a generic one."""
    for name in RUN_METRICS:
        if name != "throughput" and getattr(stats, name) is None and name not in stats.reasons:
            source = _DERIVED_FROM.get(name)
            stats.reasons[name] = stats.reasons.get(source, "") if source else ""
            stats.reasons[name] = stats.reasons[name] or ("no steps logged" if not stats.steps else "not logged")
    return stats


def run_price_per_hour(run: RunRecord, hosts: HostStore) -> float | None:
    """The summed price per hour of the run's hosts (every node is billed); None when any host has no price."""
    total = 0.0
    for name in run.hosts or [run.host]:
        try:
            price = hosts.get(name).price_per_hour
        except KeyError:
            return None
        if price is None:
            return None
        total += price
    return total


def common_steps(runs: Sequence[RunRecord]) -> int | None:
    """N of "time to N steps" when comparing ``runs``: the fewest steps any of them reached (None: none logged)."""
    reached = [r.last_step for r in runs if r.last_step]
    return min(reached) if reached else None


# --------------------------------------------------------------------------------------------------
# Settings and groups


def settings_of(config: dict, hosts: Sequence[str] = ()) -> dict:
    """The settings that make a run measure what it measures: the config minus repeat keys, plus hosts."""
    out = {k: v for k, v in config.items() if k not in REPEAT_KEYS}
    out[HOSTS_KEY] = list(hosts)
    return out


def setting_key(config: dict, hosts: Sequence[str] = ()) -> str:
    """A string equal for runs that differ only in seed, run id, name or tags (repeats)."""
    return json.dumps(settings_of(config, hosts), sort_keys=True, default=str)


def _label_part(key: str, value: object) -> str:
    if key == "world_size":
        return f"{value}×"
    if key == "precision":
        return str(value)
    if key == HOSTS_KEY:
        return "@" + ",".join(value) if isinstance(value, list) else f"@{value}"
    if isinstance(value, (dict, list)):
        value = json.dumps(value, sort_keys=True)
    return f"{key}={value}"


#: Label order: the settings people compare most come first.
_LABEL_ORDER = ("compile", "precision", "world_size", "workload", HOSTS_KEY)


def setting_labels(settings: Sequence[dict]) -> list[str]:
    """A short label per settings dict naming only what differs among them ("compile=default bf16 2×").

    ``nproc_per_node`` and ``nnodes`` show as one world size.  With nothing differing, each
    label names the workload, precision, compile mode and world size.
    """
    rows = []
    for s in settings:
        row = {k: v for k, v in s.items() if k not in ("nproc_per_node", "nnodes")}
        row["world_size"] = int(s.get("nproc_per_node") or 1) * int(s.get("nnodes") or 1)
        rows.append(row)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    varying = [k for k in keys if len({json.dumps(row.get(k), sort_keys=True, default=str) for row in rows}) > 1]
    if not varying:
        varying = ["workload", "compile", "precision", "world_size"]
    order = [k for k in _LABEL_ORDER if k in varying] + sorted(k for k in varying if k not in _LABEL_ORDER)
    return [" ".join(_label_part(k, row.get(k)) for k in order) for row in rows]


@dataclass
class GroupStats:
    """Runs with the same settings (repeats).  ``metrics[name]`` is an Estimate over the repeats;
    for a group of one run ``throughput`` is that run's estimate over intervals instead."""

    key: str
    label: str
    runs: list[RunStats]
    metrics: dict[str, Estimate] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.runs]

    @property
    def world_size(self) -> int:
        return self.runs[0].world_size

    @property
    def settings(self) -> dict:
        return settings_of(self.runs[0].config, self.runs[0].hosts)


def _group_estimate(runs: list[RunStats], metric: str) -> Estimate:
    if metric == "throughput" and len(runs) == 1:
        return runs[0].throughput
    values = [r.value(metric) for r in runs]
    est = estimate(values, "repeats")
    if est.mean is None:
        reasons = {r.reasons.get(metric) or (r.throughput.reason if metric == "throughput" else "")
                   for r in runs} - {""}
        est.reason = "; ".join(sorted(reasons)) or est.reason
    elif None in values:
        est.reason = f"{values.count(None)} of {len(values)} runs have no value"
    return est


def group_stats(stats: Sequence[RunStats]) -> list[GroupStats]:
    """Group runs by :func:`setting_key`, in the order each setting first appears; label what differs."""
    groups: dict[str, list[RunStats]] = {}
    for s in stats:
        groups.setdefault(s.setting, []).append(s)
    labels = setting_labels([settings_of(runs[0].config, runs[0].hosts) for runs in groups.values()])
    out = []
    for (key, runs), label in zip(groups.items(), labels):
        out.append(GroupStats(key, label, runs, {m: _group_estimate(runs, m) for m in RUN_METRICS}))
    return out


# --------------------------------------------------------------------------------------------------
# Comparison


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


@dataclass
class Comparison:
    """Groups of repeats compared with the baseline group.

    ``speedup[key]``: throughput of the group / throughput of the baseline.
    ``memory_saving[key]``: 1 − peak memory of the group / that of the baseline (0.25 = 25% less).
    ``scaling[key]``: throughput(N) / (N × throughput(1)), against the 1-process group with
    otherwise the same settings.  Every value is a :class:`Ratio` with its n.
    """

    groups: list[GroupStats]
    baseline: str
    speedup: dict[str, Ratio] = field(default_factory=dict)
    memory_saving: dict[str, Ratio] = field(default_factory=dict)
    scaling: dict[str, Ratio] = field(default_factory=dict)

    @property
    def runs(self) -> list[RunStats]:
        return [r for g in self.groups for r in g.runs]

    def group(self, key: str) -> GroupStats:
        return next(g for g in self.groups if g.key == key)

    @property
    def baseline_group(self) -> GroupStats:
        return self.group(self.baseline)


def family_key(group: GroupStats) -> str:
    """The setting key without the process counts: groups that differ only in world size."""
    s = {k: v for k, v in group.settings.items() if k not in ("nproc_per_node", "nnodes")}
    return json.dumps(s, sort_keys=True, default=str)


def _memory_saving(a: Estimate, b: Estimate) -> Ratio:
    r = ratio(a, b)
    if r.value is None:
        return r
    flip = lambda v: None if v is None else 1.0 - v  # noqa: E731
    return Ratio(flip(r.value), flip(r.high), flip(r.low), r.n, r.over, r.reason)


def _itself(est: Estimate, value: float, reason: str) -> Ratio:
    """A group compared with itself: exactly ``value`` (when it has a mean at all)."""
    if est.mean is None:
        return Ratio(None, n=(est.n, est.n), over=est.over, reason=est.reason)
    return Ratio(value, value, value, (est.n, est.n), est.over, reason)


def compare(stats: Sequence[RunStats], baseline: str | None = None) -> Comparison:
    """Group ``stats`` into repeats and compare each group with the baseline.

    ``baseline`` is a run id (its group is the baseline) or a group key; default the first run's group.
    """
    if not stats:
        raise ValueError("compare needs at least one run")
    groups = group_stats(stats)
    by_run = {r.run_id: g.key for g in groups for r in g.runs}
    base_key = by_run.get(baseline, baseline) if baseline is not None else groups[0].key
    if base_key not in {g.key for g in groups}:
        raise ValueError(f"the baseline {baseline!r} is not one of the compared runs")
    comparison = Comparison(groups, base_key)
    base = comparison.baseline_group
    for g in groups:
        if g is base:  # a ratio of the baseline to itself is exactly 1: no interval to estimate
            comparison.speedup[g.key] = _itself(g.metrics["throughput"], 1.0, "the baseline")
            comparison.memory_saving[g.key] = _itself(g.metrics["mem_peak_gib"], 0.0, "the baseline")
            continue
        comparison.speedup[g.key] = ratio(g.metrics["throughput"], base.metrics["throughput"])
        comparison.memory_saving[g.key] = _memory_saving(g.metrics["mem_peak_gib"], base.metrics["mem_peak_gib"])
    singles = {family_key(g): g for g in groups if g.world_size == 1}
    for g in groups:
        one = singles.get(family_key(g))
        if one is None:
            comparison.scaling[g.key] = Ratio(None, reason="no 1-process run with otherwise the same settings")
            continue
        if g is one:
            comparison.scaling[g.key] = _itself(g.metrics["throughput"], 1.0, "the 1-process run")
            continue
        r = ratio(g.metrics["throughput"], one.metrics["throughput"])
        scale = lambda v, n=g.world_size: None if v is None else v / n  # noqa: E731
        comparison.scaling[g.key] = Ratio(scale(r.value), scale(r.low), scale(r.high), r.n, r.over, r.reason)
    return comparison
