"""Comparisons of stored runs: repeats grouped by setting, speedup, memory saving and scaling against a baseline.

Qt-free, numpy only.  Every rule and formula is written down in docs/ANALYSIS.md.
The intended use, from the CLI or the app's compare view::

    stats = [run_stats(store, run_id, price_per_hour=run_price_per_hour(store.get_run(run_id), hosts))
             for run_id in run_ids]
    comparison = compare(stats, baseline=run_ids[0])      # groups repeats, speedups, scaling
    comparison.groups[0].metrics["throughput"]            # an Estimate: mean, std, ci95, n, over
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from remote_runner.spools import METRICS
from remote_runner.status import FINAL_STATES

from ..store import RunStore
from .run_stats import RUN_METRICS, RunStats, common_steps, run_price_per_hour, run_stats
from .settings import setting_labels, settings_of
from .stats import Estimate, Ratio, estimate, ratio
from .steady import FALLBACK_MIN_INTERVALS, NEVER_SETTLED, WHOLE_RUN_RULE, fallback_note, is_fallback

if TYPE_CHECKING:
    from ..hosts import HostStore

#: Which way is better for each compared metric (True: higher).
HIGHER_IS_BETTER = {"throughput": True, "speedup": True, "mem_peak_gib": False, "compile_s": False,
                    "time_to_n_s": False, "final_loss": False, "best_loss": False, "gpu_util_pct": True,
                    "energy_j": False, "energy_per_1000_steps_j": False, "cost": False, "cost_per_1000_steps": False}


@dataclass
class GroupStats:
    """Runs with the same settings (repeats).  ``metrics[name]`` is an Estimate over the repeats (a group
    of one run: its value, no interval; the run's own interval over intervals is ``runs[0].throughput``)."""

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


#: Metrics that may be negative (a user's loss); every other one cannot be, and its interval stops at 0.
SIGNED_METRICS = ("final_loss", "best_loss")


def _group_estimate(runs: list[RunStats], metric: str) -> Estimate:
    """The estimate over the group's repeats (a group of one run: its value, no interval; docs/ANALYSIS.md)."""
    values = [r.value(metric) for r in runs]
    est = estimate(values, "repeats", nonnegative=metric not in SIGNED_METRICS)
    if est.n == 1:
        est.reason = ""  # one run is no fault: its interval_text says that there is no interval
    if est.mean is None:
        reasons = {r.reasons.get(metric) or (r.throughput.reason if metric == "throughput" else "")
                   for r in runs} - {""}
        est.reason = "; ".join(sorted(reasons)) or est.reason
    elif None in values:
        est.reason = f"{values.count(None)} of {len(values)} runs have no value"
    elif metric == "throughput":
        rough = [r.throughput.reason for r in runs if is_fallback(r.throughput.reason)]
        if len(runs) == 1 and rough:
            est.reason = rough[0]
        elif rough:
            est.reason = f"{len(rough)} of {len(runs)} runs not settled: the mean of all their intervals after warm-up"
    return est


def _noted(r: Ratio, *estimates: Estimate) -> Ratio:
    """A ratio from a throughput that did not settle says so (unless it already has a reason)."""
    notes = [e.reason for e in estimates if "not settled" in e.reason]
    if r.value is not None and notes and "not settled" not in r.reason:
        r.reason = "; ".join(filter(None, ["not settled: " + "; ".join(dict.fromkeys(notes)), r.reason]))
    return r


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
    """1 − a / b, the ratio's interval mirrored (its ends swap)."""
    return ratio(a, b).mapped(lambda v: 1.0 - v, flips=True)


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
        comparison.speedup[g.key] = _noted(ratio(g.metrics["throughput"], base.metrics["throughput"]),
                                           g.metrics["throughput"], base.metrics["throughput"])
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
        r = ratio(g.metrics["throughput"], one.metrics["throughput"]).mapped(lambda v, n=g.world_size: v / n)
        comparison.scaling[g.key] = _noted(r, g.metrics["throughput"], one.metrics["throughput"])
    return comparison


# --------------------------------------------------------------------------------------------------
# Comparing stored runs (the one computation of ``ddpgui compare`` and the app's Compare tab)


@dataclass
class Curve:
    """One run's loss curve: step, seconds since its first logged step, loss (finite points only)."""

    step: np.ndarray
    time: np.ndarray
    loss: np.ndarray


@dataclass
class CompareResult:
    """What :func:`compute_comparison` returns: the comparison, the loss curves, and the stats one may keep."""

    comparison: Comparison
    curves: dict[str, Curve]
    final: dict[str, RunStats] = field(default_factory=dict)  # ended runs: their stats no longer change
    missing: list[str] = field(default_factory=list)  # run ids no longer in the store


def load_curve(store: RunStore, run_id: str) -> Curve:
    s = store.series(run_id, METRICS, keys=["step", "t", "loss", "phase"])
    keep = np.isfinite(s["step"]) & np.isfinite(s["loss"]) & np.isfinite(s["t"])
    if s["phase"].dtype == object:
        keep &= s["phase"] != "inference"
    t = s["t"][keep]
    return Curve(s["step"][keep].astype(np.float64), t - (t[0] if len(t) else 0.0), s["loss"][keep])


def compute_comparison(store: RunStore, hosts: HostStore | None, run_ids: list[str], baseline: str | None = None,
                       known: dict[str, RunStats] | None = None, curves: dict[str, Curve] | None = None,
                       n_steps: int | None = None, with_curves: bool = True) -> CompareResult:
    """Each run's statistics (reusing ``known`` ones), their comparison and (``with_curves``) the loss curves.

    Run ids no longer in the store are left out (``missing``); a ``baseline`` that is neither a
    compared run nor a group key falls back to the first run's group.  ``n_steps`` is N of
    "time to N steps", by default the fewest steps any compared run reached; ``hosts`` (None:
    no prices) gives each run's price per hour.
    """
    known, curves = dict(known or {}), dict(curves or {})
    runs, missing = [], []
    for run_id in run_ids:
        try:
            runs.append(store.get_run(run_id))
        except KeyError:
            missing.append(run_id)
    if not runs:
        raise ValueError("none of the runs to compare is in the run store any more")
    if n_steps is None:
        n_steps = common_steps(runs)
    stats, final = [], {}
    for run in runs:
        cached = known.get(run.id)
        if cached is None or cached.n_steps != n_steps:
            price = run_price_per_hour(run, hosts) if hosts is not None else None
            cached = settled_or_whole(store, run_stats(store, run.id, price, n_steps), price)
        stats.append(cached)
        if run.state in FINAL_STATES:
            final[run.id] = cached
        if with_curves and (run.id not in curves or run.state not in FINAL_STATES):
            curves[run.id] = load_curve(store, run.id)
    ids = {s.run_id for s in stats}
    comparison = compare(stats, baseline if baseline in ids or _is_group(stats, baseline) else None)
    return CompareResult(comparison, {k: v for k, v in curves.items() if k in ids}, final, missing)


def settled_or_whole(store: RunStore, stats: RunStats, price_per_hour: float | None = None) -> RunStats:
    """A run whose throughput never settled (a stopped or short run) with enough intervals after warm-up
    (:data:`~.steady.FALLBACK_MIN_INTERVALS`) gets the throughput over all of them, its note saying so
    ("from 40 intervals after warm-up, not settled (…)"); any other run is returned as it is."""
    why = stats.throughput.reason
    if stats.throughput.mean is not None or not why.startswith(NEVER_SETTLED):
        return stats
    whole = run_stats(store, stats.run_id, price_per_hour, stats.n_steps, rule=WHOLE_RUN_RULE).throughput
    if whole.mean is None or whole.n < FALLBACK_MIN_INTERVALS:
        return stats
    whole.reason = fallback_note(whole.n, why)
    stats.throughput = whole
    stats.reasons.pop("throughput", None)
    return stats


def _is_group(stats: list[RunStats], key: str | None) -> bool:
    return key is not None and any(s.setting == key for s in stats)


def differing_settings(groups: list[GroupStats]) -> list[str]:
    """The settings whose values differ between the groups (process counts shown as one world size)."""
    rows = [grouping_settings(g) for g in groups]
    keys = list(dict.fromkeys(k for row in rows for k in row))
    return [k for k in keys if len({shown_value(row.get(k)) for row in rows}) > 1]


def grouping_settings(group: GroupStats) -> dict:
    """A group's settings with the process counts replaced by one ``world_size``."""
    s = dict(group.settings)
    s["world_size"] = group.world_size
    s.pop("nproc_per_node", None)
    s.pop("nnodes", None)
    return s


def shown_value(value: object) -> str:
    """A setting's value as shown and compared: "(unset)", a comma list, or the text / JSON of it."""
    if value is None:
        return "(unset)"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
