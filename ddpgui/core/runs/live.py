"""Turns the follow stream of one run into the latest numbers a human wants to see.

:class:`LiveRun` is fed the records of a run (metrics, telemetry, events) and keeps
what a progress line or a dashboard header shows: step, loss, throughput, ETA,
CPU/GPU use, compile time, the last error with its hint.  The CLI and the GUI
read the same object.
"""
from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from remote_runner.spools import EVENTS, FINAL_EVENTS, METRICS, TELEMETRY
from remote_runner.status import FINAL_STATES

#: Below this average GPU utilization after warm-up the input pipeline is probably the bottleneck.
LOW_UTIL_PCT = 60.0
#: GPU samples (all GPUs together) needed after warm-up before saying so.
LOW_UTIL_MIN_SAMPLES = 20
#: The header's throughput is the mean over the intervals that ended in the last this many seconds.
RATE_WINDOW_S = 10.0


def run_elapsed_s(started_at: float | None, ended_at: float | None, now: float | None = None) -> float | None:
    """A run's elapsed time, the one definition every view uses (the dashboard header, live and re-selected, the
    runs table's Duration and Cost, ``ddpgui follow``'s line and summary): the wall time since the run started
    (its record's ``started_at``: when its launch returned, or its queued job began) until it ended
    (``ended_at``), or until ``now`` while it has not.  Start-up, compile and warm-up are in it: the user waited
    for them.  None before the run started."""
    if started_at is None:
        return None
    end = ended_at if ended_at is not None else (time.time() if now is None else now)
    return max(0.0, end - started_at)


def record_elapsed_s(run, now: float | None = None) -> float | None:
    """:func:`run_elapsed_s` of a stored run (a RunRecord); an ended one without an end time has none."""
    if run.ended_at is None and run.state in FINAL_STATES:
        return None
    return run_elapsed_s(run.started_at, run.ended_at, now)


@dataclass
class LiveRun:
    total_steps: int | None = None
    total_minutes: float | None = None
    step: int = 0
    loss: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    mem_peak_gib: float | None = None
    compile_s: float | None = None
    started_t: float | None = None  # host time of the "started" event, else of the first record
    last_t: float | None = None
    ended_t: float | None = None  # host time of the final event
    run_started_at: float | None = None  # the run record's start and end (see run_elapsed_s), once known
    run_ended_at: float | None = None
    first_metric: tuple[float, int] | None = None  # (t, step) of the first record, for the step rate
    state: str = "starting"
    message: str = ""
    hint: str = ""
    summary: dict = field(default_factory=dict)
    cpu_pct: float | None = None
    proc_cpu_pct: float | None = None
    rss_gib: float | None = None
    gpus: dict[int, dict] = field(default_factory=dict)
    steady: list[float] = field(default_factory=list)
    inference: list[dict] = field(default_factory=list)
    warm: bool = False  # a training step past warm-up has been recorded
    util_sum: float = 0.0  # GPU utilization samples after warm-up, for the input-pipeline hint
    util_n: int = 0
    compile_started_t: float | None = None  # host time of compile_start; None once compile_end came
    bar: tuple[int, int, float | None] | None = None  # a script's progress bar: (n, total, seconds left or None)
    #: Recent training intervals' ends: (host t, step, global batch or None, samples/s or None), past warm-up
    #: (the last warm-up record kept as the start of the first steady interval).
    recent: deque = field(default_factory=lambda: deque(maxlen=4096))

    @classmethod
    def of_run(cls, run) -> LiveRun:
        """A LiveRun for the stored run ``run`` (a RunRecord): its length, then :meth:`set_run`."""
        live = cls(total_steps=run.total_steps, total_minutes=(run.config or {}).get("minutes"))
        live.set_run(run)
        return live

    def set_run(self, run) -> None:
        """The run's record as stored now: its state, message, hint, summary (when it has one), start and end."""
        self.state, self.message, self.hint = run.state, run.message, run.hint
        if run.summary:
            self.summary = run.summary
        self.run_started_at, self.run_ended_at = run.started_at, run.ended_at

    def add_metric(self, rec: dict) -> None:
        self.step = rec.get("step", self.step)
        self.last_t = rec.get("t", self.last_t)
        if self.started_t is None:
            self.started_t = self.last_t
        if self.first_metric is None and self.last_t is not None:
            self.first_metric = (self.last_t, self.step or 0)
        for key in ("loss", "samples_per_s", "tokens_per_s", "mem_peak_gib"):
            if rec.get(key) is not None:
                setattr(self, key, rec[key])
        if rec.get("bar_total") is not None:  # the bar's own position and ETA, as it drew them
            self.bar = (rec.get("printed_step", self.step), rec["bar_total"], rec.get("eta_s"))
        if rec.get("phase") != "inference" and rec.get("t") is not None and rec.get("step") is not None:
            self.add_interval(rec["t"], rec["step"], rec.get("global_batch"), rec.get("samples_per_s"),
                              bool(rec.get("warmup")))
        if not rec.get("warmup") and rec.get("phase") != "inference":
            self.warm = True
            if rec.get("samples_per_s") is not None:
                self.steady.append(rec["samples_per_s"])

    def add_interval(self, t: float, step: int, global_batch: float | None, samples_per_s: float | None,
                     warmup: bool) -> None:
        """One training record's end into the throughput window (a warm-up interval only starts the next one)."""
        if warmup:
            self.recent.clear()
        self.recent.append((t, step, global_batch, samples_per_s))
        while len(self.recent) > 2 and self.recent[1][0] <= t - RATE_WINDOW_S:
            self.recent.popleft()

    def add_telemetry(self, rec: dict) -> None:
        if rec.get("kind") == "cpu":
            self.cpu_pct = rec.get("cpu_pct")
            self.proc_cpu_pct = rec.get("proc_cpu_pct")
            self.rss_gib = rec.get("rss_gib")
        elif rec.get("kind") == "gpu":
            self.gpus[rec.get("gpu", 0)] = rec
            if self.warm and rec.get("util_pct") is not None:
                self.util_sum += rec["util_pct"]
                self.util_n += 1

    def add_event(self, rec: dict) -> None:
        event = rec.get("event")
        if event == "started" and self.started_t is None:
            self.started_t = rec.get("t")
        elif event == "train_start":
            self.state = "running"
        elif event == "compile_start":
            self.compile_started_t = rec.get("t") or time.time()
        elif event == "compile_end":
            self.compile_s = rec.get("duration_s")
            self.compile_started_t = None
        elif event == "summary":
            self.summary = rec
        elif event in ("inference_summary", "inference_unsupported"):
            self.inference.append(rec)
        elif event in FINAL_EVENTS:
            self.ended_t = rec.get("t") or self.ended_t
            self.state = event
            self.message = rec.get("message") or self.message
            self.hint = rec.get("hint") or self.hint

    def add(self, spool: str, rec: dict) -> None:
        if spool == METRICS:
            self.add_metric(rec)
        elif spool == TELEMETRY:
            self.add_telemetry(rec)
        elif spool == EVENTS:
            self.add_event(rec)

    @property
    def elapsed_s(self) -> float | None:
        return self.elapsed_at()

    def elapsed_at(self, now: float | None = None) -> float | None:
        """:func:`run_elapsed_s` of the run: by its record's start and end once :meth:`set_run` gave them (the end,
        until then, its final event's time); without a record, by its records' host times."""
        ended = self.state in FINAL_EVENTS
        started = self.run_started_at if self.run_started_at is not None else self.started_t
        end = self.run_ended_at if self.run_started_at is not None else None
        if end is None and ended:
            end = self.ended_t if self.ended_t is not None else (self.last_t or started)
        return run_elapsed_s(started, end, now)

    @property
    def length_known(self) -> bool:
        """Whether the run's length was given (a script's is unknown unless the user gave steps or minutes)."""
        return bool(self.total_steps or self.total_minutes)

    @property
    def steps_per_s(self) -> float | None:
        """Steps per second since the first record (start-up excluded)."""
        if self.first_metric and self.last_t and self.last_t > self.first_metric[0]:
            return (self.step - self.first_metric[1]) / (self.last_t - self.first_metric[0])
        return None

    @property
    def window_rates(self) -> tuple[float | None, float | None]:
        """(steps/s, samples/s) over the training intervals that ended in the last RATE_WINDOW_S seconds, warm-up
        excluded: samples/s is global batch × steps/s when the records give the batch (else the time-weighted mean
        of their samples/s), so the two always agree; (None, None) until two records span some time."""
        if len(self.recent) < 2:
            return None, None
        (t0, step0, _, _), (t1, step1, batch, _) = self.recent[0], self.recent[-1]
        if t1 <= t0:
            return None, None
        steps_per_s = (step1 - step0) / (t1 - t0)
        if batch:
            return steps_per_s, steps_per_s * batch
        points = list(self.recent)
        weighted = [(b[0] - a[0], b[3]) for a, b in zip(points, points[1:]) if b[3] is not None and b[0] > a[0]]
        seconds = sum(dt for dt, _ in weighted)
        return steps_per_s, (sum(dt * r for dt, r in weighted) / seconds if seconds else None)

    @property
    def compiling(self) -> bool:
        """torch.compile is working (compile_start seen, compile_end not yet, the run not ended)."""
        return self.compile_started_t is not None and self.state not in FINAL_EVENTS

    def compile_elapsed_s(self, now: float | None = None) -> float | None:
        """Seconds since compile started (by the host's clock), while compiling."""
        if not self.compiling:
            return None
        return max(0.0, (time.time() if now is None else now) - self.compile_started_t)

    @property
    def fraction(self) -> float | None:
        """How much of the run is done (0..1), when its length is known."""
        if self.total_steps:
            return min(1.0, self.step / self.total_steps)
        if self.total_minutes and self.elapsed_s is not None:
            return min(1.0, self.elapsed_s / (self.total_minutes * 60))
        return None

    @property
    def eta_s(self) -> float | None:
        """Seconds left: by the step rate since the first record (start-up excluded), or by the clock."""
        if self.total_steps and self.first_metric and self.last_t and self.step < self.total_steps:
            t0, step0 = self.first_metric
            if self.step > step0 and self.last_t > t0:
                return (self.total_steps - self.step) * (self.last_t - t0) / (self.step - step0)
            return None
        frac, elapsed = self.fraction, self.elapsed_s
        if not frac or elapsed is None or frac >= 1.0:
            return None
        return elapsed * (1 - frac) / frac

    @property
    def mean_gpu_util(self) -> float | None:
        """Average GPU utilization (all GPUs) since warm-up ended."""
        return self.util_sum / self.util_n if self.util_n else None

    @property
    def pipeline_hint(self) -> str | None:
        """Advice when the GPUs mostly wait: utilization under LOW_UTIL_PCT after warm-up."""
        util = self.mean_gpu_util
        if util is None or self.util_n < LOW_UTIL_MIN_SAMPLES or util >= LOW_UTIL_PCT:
            return None
        return (f"The GPUs were busy only {util:.0f}% of the time since warm-up: the input pipeline is probably the "
                f"bottleneck. Try more DataLoader workers, pinned memory, or a larger batch per GPU.")

    @property
    def peak_mem_gib(self) -> float | None:
        """Peak memory: the summary's (the runner's, or the stored records' highest) once there is one, else the
        last record's."""
        peak = self.summary.get("mem_peak_gib")
        return peak if peak is not None else self.mem_peak_gib

    @property
    def steady_samples_per_s(self) -> float | None:
        if self.summary.get("steady_samples_per_s") is not None:
            return self.summary["steady_samples_per_s"]
        return sum(self.steady) / len(self.steady) if self.steady else None


@dataclass
class RunSummary:
    """What an ended run did, read from the store alone, so every reader (each ``ddpgui follow`` of the run,
    one started after it ended, the app) gets the same numbers: see :func:`run_summary`."""

    state: str
    elapsed_s: float | None
    steps: int
    final_loss: float | None = None
    steady_samples_per_s: float | None = None
    steady_tokens_per_s: float | None = None
    mem_peak_gib: float | None = None
    compile_s: float | None = None
    inference: list[dict] = field(default_factory=list)
    message: str = ""
    hint: str = ""
    no_metrics: dict | None = None  # the host's report on a script that gave no metric at all


def _last(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)] if values.dtype.kind == "f" else np.array([])
    return float(finite[-1]) if finite.size else None


#: What :func:`records_summary` gives: the numbers of the runner's summary event that the stored records hold too.
SUMMARY_KEYS = ("steady_samples_per_s", "steady_tokens_per_s", "final_loss", "best_loss", "mem_peak_gib")


def records_summary(store, run_id: str) -> dict:
    """The summary numbers (:data:`SUMMARY_KEYS`, those known) computed from the run's stored metric records, for
    a run that has no summary event (stopped, failed, a script's): steady throughput is the mean of the records
    past warm-up (training ones), as the live header's; the final loss the last finite one, peak memory the
    highest."""
    metrics = store.series(run_id, keys=("step", "loss", "samples_per_s", "tokens_per_s", "mem_peak_gib",
                                         "warmup", "phase"))
    out: dict = {}
    if not metrics["step"].size:
        return out
    steady = (metrics["warmup"] != 1) & np.array([p != "inference" for p in metrics["phase"]], dtype=bool)
    for key in ("samples_per_s", "tokens_per_s"):
        values = metrics[key][steady] if metrics[key].dtype.kind == "f" else np.array([])
        values = values[np.isfinite(values)]
        if values.size:
            out[f"steady_{key}"] = float(values.mean())
    loss = metrics["loss"]
    if loss.dtype.kind == "f" and np.isfinite(loss).any():
        out["final_loss"], out["best_loss"] = _last(loss), float(np.nanmin(loss))
    peaks = metrics["mem_peak_gib"]
    if peaks.dtype.kind == "f" and np.isfinite(peaks).any():
        out["mem_peak_gib"] = float(np.nanmax(peaks))
    return out


def run_summary(store, run_id: str) -> RunSummary:
    """The run's summary from its stored record, events and metrics (call it once the run's end is stored).

    Elapsed time is :func:`record_elapsed_s` (the run's own start to end, not when somebody looked); steps are
    the last stored metric record's; loss, throughput and peak memory the runner's summary event's, else the
    stored records' (:func:`records_summary`: a stopped run's or a script's has no summary event)."""
    run = store.get_run(run_id)
    steps = _last(store.series(run_id, keys=("step",))["step"])
    events = store.records(run_id, EVENTS)
    summary = dict(records_summary(store, run_id), **{k: v for k, v in run.summary.items() if v is not None})
    compile_s = next((e.get("duration_s") for e in events if e.get("event") == "compile_end"), None)
    return RunSummary(
        state=run.state, elapsed_s=record_elapsed_s(run),
        steps=int(steps) if steps is not None else int(run.last_step or 0),
        final_loss=summary.get("final_loss"), steady_samples_per_s=summary.get("steady_samples_per_s"),
        steady_tokens_per_s=summary.get("steady_tokens_per_s"), mem_peak_gib=summary.get("mem_peak_gib"),
        compile_s=compile_s,
        inference=[e for e in events if e.get("event") in ("inference_summary", "inference_unsupported")],
        message=run.message, hint=run.hint, no_metrics=next((e for e in events if e.get("event") == "no_metrics"), None))


def summary_lines(summary: RunSummary) -> list[str]:
    """The summary as printed at the end of ``ddpgui follow``: ``run finished after 00:33: 6000 steps`` and the rest."""
    lines = [f"run {summary.state} after {format_duration(summary.elapsed_s)}: {summary.steps} steps"]
    if summary.final_loss is not None:
        lines.append(f"  final loss          {summary.final_loss:.4f}")
    if summary.steady_samples_per_s is not None:
        lines.append(f"  steady throughput   {format_rate(summary.steady_samples_per_s, 'samples/s')}")
    if summary.steady_tokens_per_s is not None:
        lines.append(f"  steady tokens       {format_rate(summary.steady_tokens_per_s, 'tok/s')}")
    if summary.mem_peak_gib is not None:
        lines.append(f"  peak memory         {summary.mem_peak_gib:.2f} GiB")
    if summary.compile_s is not None:
        lines.append(f"  compile time        {summary.compile_s:.1f} s")
    for rec in summary.inference:
        if rec.get("event") == "inference_summary":
            lines.append(f"  inference {rec.get('precision'):5} p50 {rec.get('latency_p50_ms', 0):.2f} ms  "
                         f"p99 {rec.get('latency_p99_ms', 0):.2f} ms  "
                         f"{format_rate(rec.get('samples_per_s'), 'samples/s')}")
        else:
            lines.append(f"  inference {rec.get('precision'):5} {rec.get('reason')}")
    if summary.state == "failed":
        lines.append(f"  error: {summary.message}")
        if summary.hint:
            lines.append(f"  hint:  {summary.hint}")
    if summary.no_metrics:
        lines.append(f"  no metrics: {summary.no_metrics.get('message', '')}")
        lines += [f"    | {line}" for line in (summary.no_metrics.get("last_lines") or [])[-5:]]
        lines.append(f"  hint:  {summary.no_metrics.get('hint', '')}")
    return lines


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def format_number(value: float | None, digits: int = 3, missing: str = "–") -> str:
    """``value`` to ``digits`` significant digits: 0.137, 2.35, 123, 1.23e-04, 5.00e-05, 1.23e+05 (never 0.0000)."""
    if value is None:
        return missing
    if not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(float(f"{abs(value):.{digits - 1}e}")))  # of the rounded value: 9.999 → 10.0
    if -3 <= exponent < max(digits, 4):
        return f"{value:.{max(0, digits - 1 - exponent)}f}"
    return f"{value:.{digits - 1}e}"


def format_rate(value: float | None, unit: str) -> str:
    """A rate to 3 significant digits (:func:`format_number`), thousands as k and millions as M: ``99.6 steps/s``,
    ``6.55k samples/s``, ``1.23M tok/s``."""
    if value is None:
        return f"- {unit}"
    rounded = abs(float(format_number(value))) if math.isfinite(value) else 0.0  # 999.6 → 1000: "1.00k"
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if rounded >= scale:
            return f"{format_number(value / scale)}{suffix} {unit}"
    return f"{format_number(value)} {unit}"


def shown_rates(live: LiveRun, active: bool) -> tuple[float | None, float | None]:
    """(steps/s, samples/s) as every view shows them, always from one mean (samples/s = global batch × steps/s
    where the records give the batch): while the run is active the mean over the last RATE_WINDOW_S seconds
    (:attr:`LiveRun.window_rates`), else (and until that window has two records) the runner's steady samples/s
    (or the last record's) and the steps/s it makes; without a global batch, steps/s since the first record."""
    window_steps, window_samples = live.window_rates if active else (None, None)
    if window_steps is not None:
        return window_steps, window_samples
    samples_per_s = live.steady_samples_per_s or live.samples_per_s
    batch = live.recent[-1][2] if live.recent else None
    if samples_per_s and batch:
        return samples_per_s / batch, samples_per_s
    return live.steps_per_s, samples_per_s


def stats_line(live: LiveRun, active: bool, script: bool = False, now: float | None = None) -> str:
    """The dashboard header's numbers: ``step 120/1500 · loss 0.137 · elapsed 00:47 · ETA 01:12 · 41.2 steps/s ·
    330 samples/s · …``; while torch.compile works ``compiling · 00:12`` instead of step, loss and ETA.

    Live throughput is the mean over the last RATE_WINDOW_S seconds (samples/s = global batch × steps/s); an
    ended run's the runner's steady mean."""
    sep = "   ·   "
    if active and live.compiling:
        return sep.join([f"compiling · {format_duration(live.compile_elapsed_s(now))}",
                         f"elapsed {format_duration(live.elapsed_at(now))}"])
    total = f"/{live.total_steps}" if live.total_steps else ""
    parts = [f"step {live.step}{total}", *_bar_parts(live, active)[:1], f"loss {format_number(live.loss)}",
             f"elapsed {format_duration(live.elapsed_at(now))}"]
    if live.length_known:  # a script's length is unknown unless given: no ETA from a made-up total
        parts.append(f"ETA {format_duration(live.eta_s) if active else '–'}")
    else:  # the ETA its progress bar drew, if it has one
        parts += _bar_parts(live, active)[1:]
    steps_per_s, rate = shown_rates(live, active)
    parts.append(format_rate(steps_per_s, "steps/s") if steps_per_s else "– steps/s")
    if rate is not None or not script:
        parts.append(format_rate(rate, "samples/s") if rate is not None else "– samples/s")
    if live.compile_s is not None:
        parts.append(f"compile {live.compile_s:.1f} s")
    if live.peak_mem_gib:
        parts.append(f"peak mem {live.peak_mem_gib:.2f} GiB")
    if live.mean_gpu_util is not None:
        parts.append(f"GPU {live.mean_gpu_util:.0f}% avg")
    return sep.join(parts)


def progress_bar(fraction: float | None, width: int = 20) -> str:
    """``[#####...............]  25.0% `` (empty when the fraction is unknown)."""
    if fraction is None:
        return ""
    filled = int(fraction * width)
    return "[" + "#" * filled + "." * (width - filled) + f"] {fraction * 100:5.1f}% "


def progress_line(live: LiveRun, width: int = 20) -> str:
    """One line: bar, step/total, loss, throughput (as the app shows it: :func:`shown_rates`), device use, ETA
    (without a known length: steps and rate)."""
    bar = progress_bar(live.fraction, width)
    total = f"/{live.total_steps}" if live.total_steps else ""
    loss = format_number(live.loss, missing="-")
    steps_per_s, samples_per_s = shown_rates(live, live.state not in FINAL_EVENTS)
    if samples_per_s is None and steps_per_s is not None:  # a script that prints no throughput
        rate = format_rate(steps_per_s, "steps/s")
    else:
        rate = format_rate(samples_per_s, "samples/s")
    parts = [f"{bar}step {live.step}{total}", *_bar_parts(live)[:1], f"loss {loss}", rate]
    if live.tokens_per_s is not None and samples_per_s and live.samples_per_s:  # tokens per sample: the record's
        parts.append(format_rate(samples_per_s * live.tokens_per_s / live.samples_per_s, "tok/s"))
    elif live.tokens_per_s is not None:
        parts.append(format_rate(live.tokens_per_s, "tok/s"))
    if live.gpus:
        utils = [g.get("util_pct") for _, g in sorted(live.gpus.items())]
        parts.append("GPU " + " ".join("-" if u is None else f"{u:.0f}%" for u in utils))
    elif live.proc_cpu_pct is not None:
        rss = f" rss {live.rss_gib:.2f} GiB" if live.rss_gib is not None else ""
        parts.append(f"CPU {live.proc_cpu_pct:.0f}%{rss}")
    if live.length_known:
        parts.append(f"ETA {format_duration(live.eta_s)}")
    else:
        parts += [f"elapsed {format_duration(live.elapsed_s)}", *_bar_parts(live)[1:]]
    return "  ".join(parts)


def _bar_parts(live: LiveRun, active: bool = True) -> list[str]:
    """A script's progress bar as it drew itself: ``["bar 20/50", "ETA 00:12"]`` (no ETA when it drew none, or
    once the run has ended); [] without a bar that knows its total."""
    if live.bar is None:
        return []
    n, total, eta_s = (float(v) if v is not None else None for v in live.bar)
    count = "{:.0f}/{:.0f}" if n.is_integer() and total.is_integer() else "{:.1f}/{:.1f}"
    return ["bar " + count.format(n, total)] + ([f"ETA {format_duration(eta_s)}"] if eta_s is not None and active else [])
