"""What one stored run measured: steady throughput, memory, compile time, loss, energy, duration and cost.

A value that cannot be computed is ``None`` and the object's ``reasons`` says why
(``reasons["energy_j"] == "no GPU power samples (a CPU run?)"``): a missing
measurement is never a crash and never a made-up number.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from remote_runner.spools import METRICS, TELEMETRY

from ..store import RunRecord, RunStore
from .settings import setting_key
from .stats import Estimate, rate_estimate
from .steady import DEFAULT_RULE, SteadyRule, events_cut_step, steady_start

if TYPE_CHECKING:
    from ..hosts import HostStore

#: The RunStats fields that a group summarises over its repeats.
RUN_METRICS = ("throughput", "mem_peak_gib", "compile_s", "time_to_n_s", "final_loss", "best_loss", "gpu_util_pct",
               "energy_j", "energy_per_1000_steps_j", "duration_s", "cost", "cost_per_1000_steps")


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


#: The throughput a script prints (series names as the host's reader stores them), most preferred first.
SCRIPT_RATES = (("samples_per_second", "samples/s"), ("samples/s", "samples/s"), ("tokens_per_s", "tokens/s"),
                ("tokens_per_second", "tokens/s"), ("tokens/s", "tokens/s"), ("tok/s", "tokens/s"),
                ("tps", "tokens/s"))


def _throughput(metrics: dict[str, np.ndarray], events: list[dict],
                rule: SteadyRule) -> tuple[np.ndarray, np.ndarray, str, str]:
    """(per-interval rates, their steps, unit, reason when empty) of the training intervals past the events' cut."""
    step, t = metrics["step"], metrics["t"]
    unit = "samples/s"
    rate = metrics["samples_per_s"]
    for name, name_unit in SCRIPT_RATES:  # a script's own throughput, as it prints it
        if np.isfinite(rate).any():
            break
        rate, unit = metrics[name], name_unit
    if not np.isfinite(rate).any():  # a script's records with no rate: steps per second from step and t
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
    keys = ["step", "t", "phase", "loss", "samples_per_s", "mem_peak_gib", "warmup"]
    metrics = store.series(run_id, METRICS, keys=keys + [name for name, _ in SCRIPT_RATES])
    phase = metrics["phase"]
    if phase.dtype == object:  # a script's records are all training ones (phase "script", or none before)
        train = (phase == "train") | (phase == "script") | (phase == None)  # noqa: E711 (elementwise on an object array)
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
