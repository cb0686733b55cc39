"""Runs that stall: a run that stops making progress while its processes live, told apart from a slow phase.

A :class:`StallDetector` is fed one run's records (metrics, telemetry, events: the spools of
docs/PROTOCOL.md) and its stdout/stderr bytes, and :meth:`StallDetector.decide` says, in words, whether the
run looks stalled and since when (docs/STALLS.md):

- **silence**: no metric record for much longer than the run's own usual interval, ``max(silence_factor ×
  median interval, min_silence_s)``; compile and warm-up intervals do not count towards the usual interval,
  and while torch.compile works (``compile_start`` without ``compile_end``) no metrics are expected;
- **idle GPUs**: every GPU of the run below ``gpu_idle_pct`` for ``gpu_idle_s`` after warm-up, with no metric
  or output line in that time (a run whose metrics still arrive is progressing, whatever its GPUs say);
- **not a stall**: a phase that announces itself, an ``eval_start``/``phase_start`` event without its end, or a
  line of the script's own output that is no metric and names a phase ("Evaluating…", "saving checkpoint"):
  "in evaluation (no metrics expected)" until the next metric record; any other output line of the script
  (its own progress) counts as a sign of life like a metric.

A run is judged only while its processes are known to live: the supervisor's CPU record (``nprocs``, every
``telemetry_interval_s``) is recent.  When nothing has come from the host for a while (a dropped link, a
sleeping laptop) the decision is "unknown", never "stalled?".

Record times are the host's clock; the detector maps its own clock onto the host's from when records arrive
(the smallest recent lag), so a host whose clock differs from this computer's is judged by its own clock.
:class:`~ddpgui.core.runs.stall_watch.StallWatch` feeds one detector per run from a RunManager.
"""
from __future__ import annotations

import math
import re
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields

from remote_runner.scriptread.lines import parse_metric_line
from remote_runner.spools import EVENTS, FINAL_EVENTS, METRICS, STDOUT, TELEMETRY

#: Intervals between metric records needed before the run's usual interval is known.
MIN_INTERVALS = 3
#: The usual interval is the median of the last this many intervals.
INTERVALS_KEPT = 200
#: The run's processes count as alive while its last CPU record is at most this old (seconds), or this many
#: telemetry intervals, whichever is longer.
ALIVE_S = 15.0
ALIVE_INTERVALS = 10
#: Lines of output kept for the notification.
LAST_LINES = 8
#: A line of a script's own output that announces a phase in which no metrics are expected.
_PHASE_LINE = re.compile(r"\b(?:(?P<eval>eval\w*|validat\w*|valid|val|test(?:ing)?)|(?P<save>sav(?:e|ing)\w*|"
                         r"checkpoint\w*))\b", re.IGNORECASE)
#: Events that open and close a phase (``{"event": "phase_start", "phase": "eval"}`` or ``eval_start``).
PHASE_START, PHASE_END = ("phase_start", "eval_start"), ("phase_end", "eval_end")
#: How a phase is named in a decision (others: "in <phase>").
PHASE_WORDS = {"eval": "in evaluation", "evaluation": "in evaluation", "saving": "saving", "warm-up": "warming up"}
#: Events after which an inference run warms up its next precision (compiling, with compile on), recording nothing.
WARMUP_EVENTS = ("inference_start", "inference_summary", "inference_unsupported")

OK, STALLED, PHASE, UNKNOWN, ENDED, OFF = "ok", "stalled", "phase", "unknown", "ended", "off"


class StallPolicyError(ValueError):
    """A threshold that cannot be used; ``field`` names it, ``hint`` says what to give instead."""

    def __init__(self, field_name: str, message: str, hint: str = ""):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.hint = hint


@dataclass(frozen=True)
class StallPolicy:
    """The thresholds of stall detection (docs/STALLS.md).  ``auto_stop_after_s``: stop a run this long after it
    was flagged (None, the default: never)."""

    enabled: bool = True
    silence_factor: float = 10.0
    min_silence_s: float = 180.0
    gpu_idle_pct: float = 5.0
    gpu_idle_s: float = 300.0
    auto_stop_after_s: float | None = None

    def __post_init__(self) -> None:
        checks = (("silence_factor", self.silence_factor >= 1, "a factor of 1 or more (10 by default)"),
                  ("min_silence_s", self.min_silence_s >= 0, "seconds, 0 or more (180 by default)"),
                  ("gpu_idle_pct", 0 <= self.gpu_idle_pct <= 100, "a percentage from 0 to 100 (5 by default)"),
                  ("gpu_idle_s", self.gpu_idle_s > 0, "seconds, more than 0 (300 by default)"),
                  ("auto_stop_after_s", self.auto_stop_after_s is None or self.auto_stop_after_s >= 0,
                   "seconds, 0 or more, or none for no automatic stop"))
        for name, ok, wanted in checks:
            value = getattr(self, name)
            if isinstance(value, bool) or not ok or (isinstance(value, float) and math.isnan(value)):
                raise StallPolicyError(name, f"{value!r} is not usable", f"give {wanted}")

    def silence_limit_s(self, usual_s: float) -> float:
        """How long metrics may be silent in a run that logs every ``usual_s`` seconds."""
        return max(self.silence_factor * usual_s, self.min_silence_s)

    def to_dict(self) -> dict:
        """Plain values, for settings (QSettings keys ``stalls/<name>``, or JSON)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> StallPolicy:
        """The policy from :meth:`to_dict`'s values, also as text (QSettings gives "true", "0.5", "" or None for
        none); a missing key keeps its default, an unknown one is ignored; a bad value raises StallPolicyError."""
        values = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            raw = data[f.name]
            try:
                values[f.name] = _setting(f.name, raw)
            except (TypeError, ValueError):
                raise StallPolicyError(f.name, f"{raw!r} is not a {'yes/no' if f.name == 'enabled' else 'number'}",
                                       "give a number of seconds, or leave it out for the default") from None
        return cls(**values)


def _setting(name: str, raw: object) -> object:
    if name == "enabled":
        if isinstance(raw, str):
            if raw.strip().lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(raw)
            return raw.strip().lower() in ("true", "1", "yes")
        return bool(raw)
    if name == "auto_stop_after_s" and (raw is None or raw == "" or raw == "none"):
        return None
    if isinstance(raw, bool):
        raise TypeError(raw)
    return float(raw)


@dataclass(frozen=True)
class StallDecision:
    """What the detector says about a run now.

    ``state``: ``ok``, ``stalled`` (shown as "stalled?"), ``phase`` (a slow phase that announced itself, or
    compiling), ``unknown`` (no recent news from the host, or its processes are gone), ``ended``, ``off``.
    ``kind`` of a stall: ``silence`` or ``gpu_idle``.  ``since``: when the silence (or idleness) began, host
    clock; ``flagged_at``: when it became a stall.  ``last_lines``: the run's last output lines."""

    state: str
    reason: str
    since: float | None = None
    flagged_at: float | None = None
    kind: str | None = None
    phase: str | None = None
    last_lines: tuple[str, ...] = ()

    @property
    def stalled(self) -> bool:
        return self.state == STALLED

    @property
    def label(self) -> str:
        """The short text a table or header shows: ``stalled?``, ``in evaluation``, or empty."""
        if self.state == STALLED:
            return "stalled?"
        return self.reason.split(" (")[0] if self.state == PHASE else ""


def auto_stop_at(decision: StallDecision, policy: StallPolicy) -> float | None:
    """When (host clock) a stalled run is to be stopped: ``auto_stop_after_s`` after it was flagged; None when the
    run is not stalled, or the policy stops nothing."""
    if not policy.enabled or policy.auto_stop_after_s is None or not decision.stalled or decision.flagged_at is None:
        return None
    return decision.flagged_at + policy.auto_stop_after_s


def auto_stop_due(decision: StallDecision, policy: StallPolicy, now: float) -> bool:
    """Whether a stalled run is to be stopped now (``now`` on the host clock, as the decision's times)."""
    at = auto_stop_at(decision, policy)
    return at is not None and now >= at


def auto_stop_message(decision: StallDecision, policy: StallPolicy) -> str:
    """The words kept with a run stopped automatically."""
    return (f"stopped automatically: stalled? {decision.reason}; no progress "
            f"{format_span(policy.auto_stop_after_s or 0)} after it was flagged")


def format_span(seconds: float) -> str:
    """``0.8 s``, ``12 s``, ``4 min 10 s``, ``2 h 5 min``."""
    seconds = max(0.0, seconds)
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        minutes, secs = divmod(whole, 60)
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(whole // 60, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def format_gpus(indices: Iterable[int]) -> str:
    """``GPU 3``, ``GPUs 0-1``, ``GPUs 0-2, 5``."""
    ids = sorted(set(indices))
    parts, start = [], None
    for i, gpu in enumerate(ids):
        if start is None:
            start = gpu
        if i + 1 == len(ids) or ids[i + 1] != gpu + 1:
            parts.append(str(start) if start == gpu else f"{start}-{gpu}")
            start = None
    return ("GPU " if len(ids) == 1 else "GPUs ") + ", ".join(parts)


def run_gpus(config: Mapping[str, object]) -> list[int] | None:
    """The GPU indices a run's ranks use on each node (its ``nproc_per_node`` first of CUDA_VISIBLE_DEVICES),
    or None when every GPU the host reports counts (no CUDA_VISIBLE_DEVICES, or one of UUIDs)."""
    visible = str((config.get("env") or {}).get("CUDA_VISIBLE_DEVICES", "")).strip()
    if not visible:
        return None
    try:
        ids = [int(part) for part in visible.split(",") if part.strip()]
    except ValueError:  # GPU UUIDs or MIG names: telemetry has indices only
        return None
    nproc = config.get("nproc_per_node")
    return ids[:nproc] if isinstance(nproc, int) and nproc > 0 else ids


class StallDetector:
    """One run's stall detection; not thread-safe (StallWatch holds a lock around it).

    ``gpus``: the run's GPU indices (None: every GPU in its telemetry); ``metric_regex``: the run's
    ``script.metric_regex``, so output lines are told from metric lines as the runner tells them;
    ``telemetry_interval_s``: the run's sampling interval; ``clock``: this computer's clock."""

    def __init__(self, policy: StallPolicy | None = None, gpus: Iterable[int] | None = None,
                 metric_regex: str | None = None, telemetry_interval_s: float = 0.5, clock=time.time):
        self.policy = policy or StallPolicy()
        self.gpus = None if gpus is None else set(gpus)
        self.regex = re.compile(metric_regex) if metric_regex else None
        self.alive_s = max(ALIVE_S, ALIVE_INTERVALS * telemetry_interval_s)
        self.clock = clock
        self.intervals: deque[float] = deque(maxlen=INTERVALS_KEPT)
        self.lags: deque[float] = deque(maxlen=64)  # arrival (this computer's clock) minus record t
        self.last_metric: dict | None = None
        self.last_activity: float | None = None  # last metric record or output line (host clock)
        self.last_output: tuple[float, str] | None = None
        self.announced: tuple[str, float] | None = None  # a phase announced by an output line: (phase, t)
        self.open_phase: tuple[str, float] | None = None  # a phase opened by an event, not closed yet
        self.compiling_since: float | None = None
        self._gap = False  # a phase began since the last metric record: the next interval is not the cadence
        self.warm = False
        self.ended: str | None = None
        self.cpu: dict[int, tuple[float, int]] = {}  # node → (t, nprocs) of its last CPU record
        self.gpu_idle: dict[tuple[int, int], float | None] = {}  # (node, gpu) → idle since (None: busy)
        self.gpu_seen: dict[tuple[int, int], float] = {}  # (node, gpu) → t of its last sample
        self.lines: deque[str] = deque(maxlen=LAST_LINES)
        self._partial: dict[tuple[int, str], bytes] = {}

    @classmethod
    def for_config(cls, config: Mapping[str, object], policy: StallPolicy | None = None, clock=time.time
                   ) -> StallDetector:
        """A detector for the run of ``config`` (its config.json as a dict)."""
        script = config.get("script") or {}
        return cls(policy, run_gpus(config), script.get("metric_regex") if isinstance(script, dict) else None,
                   float(config.get("telemetry_interval_s") or 0.5), clock)

    # ---- feeding ---------------------------------------------------------------------------------------------
    def add(self, spool: str, rec: dict, node: int = 0, arrived: float | None = None) -> None:
        """One record of ``spool`` from ``node``; ``arrived`` (this computer's clock) when it came, for records
        that arrive live (None for records read back from the store)."""
        t = rec.get("t")
        if not isinstance(t, (int, float)):
            return
        if arrived is not None:
            self.lags.append(arrived - t)
        if spool == METRICS:
            self._metric(rec, t)
        elif spool == TELEMETRY:
            self._telemetry(rec, t, node)
        elif spool == EVENTS:
            self._event(rec, t, node)

    def add_records(self, records: Mapping[str, Iterable[dict]], node: int = 0, arrived: float | None = None) -> None:
        """A RunUpdate's records (spool → records): events first, as the runner wrote them before the metrics."""
        for spool in (EVENTS, METRICS, TELEMETRY):
            for rec in records.get(spool, ()):
                self.add(spool, rec, node, arrived)

    def add_output(self, spool: str, data: bytes, node: int = 0, arrived: float | None = None) -> None:
        """Bytes of ``stdout.log``/``stderr.log`` as they arrive (whole lines, or a tail completed later).  A line
        of stdout that is no metric is a sign of life, and names a phase when it says one."""
        at = self.host_now(arrived)
        buffered = self._partial.pop((node, spool), b"") + data
        *lines, rest = buffered.split(b"\n")
        if rest:
            self._partial[(node, spool)] = rest[-65536:]
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            if "\r" in line:  # a progress bar redrawn: its last drawing
                line = line.rsplit("\r", 1)[-1]
            if not line.strip():
                continue
            self.lines.append(line[:500])
            if spool == STDOUT and parse_metric_line(line, self.regex) is None:
                self._output(line, at)

    def _metric(self, rec: dict, t: float) -> None:
        last = self.last_metric
        warmup = bool(rec.get("warmup"))
        if last is not None and not warmup and not last.get("warmup") and t >= last["t"] and not self._gap:
            self.intervals.append(t - last["t"])  # not across a phase: those are not the run's cadence
        self._gap = False
        self.last_metric = {"t": t, "warmup": warmup, "step": rec.get("step")}
        self.last_activity = max(t, self.last_activity or t)
        if self.announced is not None and t > self.announced[1]:  # a later metric ends an announced phase (the
            self.announced = None  # line may arrive before the metric the script printed just before it)
        if not warmup:
            self.warm = True

    def _output(self, line: str, t: float) -> None:
        self.last_output = (t, line)
        self.last_activity = max(t, self.last_activity or t)
        match = _PHASE_LINE.search(line)
        if match:
            self.announced, self._gap = ("evaluation" if match.group("eval") else "saving", t), True

    def _telemetry(self, rec: dict, t: float, node: int) -> None:
        if rec.get("kind") == "cpu":
            nprocs = rec.get("nprocs")
            self.cpu[node] = (t, nprocs if isinstance(nprocs, int) else 0)
            return
        if rec.get("kind") != "gpu" or not isinstance(rec.get("gpu"), int):
            return
        if self.gpus is not None and rec["gpu"] not in self.gpus:
            return
        key = (node, rec["gpu"])
        self.gpu_seen[key] = t
        util = rec.get("util_pct")
        if not self.warm or self.compiling_since is not None or util is None:
            self.gpu_idle[key] = None
        elif util < self.policy.gpu_idle_pct:
            if self.gpu_idle.get(key) is None:
                self.gpu_idle[key] = t
        else:
            self.gpu_idle[key] = None

    def _event(self, rec: dict, t: float, node: int) -> None:
        event = rec.get("event")
        if event == "compile_start":
            self.compiling_since, self._gap = t, True
        elif event == "compile_end":
            self.compiling_since = None
            self.last_activity = max(t, self.last_activity or t)
        elif event in WARMUP_EVENTS:  # inference: the next precision warms up (and compiles) without records
            self.announced, self._gap = ("warm-up", t), True
        elif event == "warmup_done":
            self.warm = True
        elif event in PHASE_START:
            self.open_phase, self._gap = (str(rec.get("phase") or "evaluation"), t), True
        elif event in PHASE_END:
            self.open_phase = None
            self.last_activity = max(t, self.last_activity or t)
        elif event in FINAL_EVENTS and node == 0:  # another node's end is the run's once the client says so
            self.ended = event

    # ---- deciding --------------------------------------------------------------------------------------------
    def host_now(self, now: float | None = None) -> float:
        """This computer's time ``now`` (default: the clock) on the host's clock."""
        now = self.clock() if now is None else now
        return now - min(self.lags) if self.lags else now

    @property
    def usual_interval_s(self) -> float | None:
        """The median interval between the run's metric records, warm-up and compile excluded."""
        if len(self.intervals) < MIN_INTERVALS:
            return None
        ordered = sorted(self.intervals)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2

    def decide(self, now: float | None = None) -> StallDecision:
        """The decision at ``now`` (host clock; default: this computer's clock mapped onto the host's)."""
        now = self.host_now() if now is None else now
        lines = tuple(self.lines)
        if not self.policy.enabled:
            return StallDecision(OFF, "stall detection is off", last_lines=lines)
        if self.ended:
            return StallDecision(ENDED, f"the run has {self.ended}", last_lines=lines)
        alive = self._alive(now)
        if alive is not None:
            return StallDecision(UNKNOWN, alive, last_lines=lines)
        if self.compiling_since is not None:
            return StallDecision(PHASE, f"compiling (no metrics expected), "
                                        f"{format_span(now - self.compiling_since)} so far", phase="compile",
                                 since=self.compiling_since, last_lines=lines)
        phase = self.open_phase or self.announced
        if phase is not None:
            name, since = phase
            words = PHASE_WORDS.get(name, f"in {name}")
            return StallDecision(PHASE, f"{words} (no metrics expected), {format_span(now - since)} so far",
                                 since=since, phase=name, last_lines=lines)
        stall = self._silence(now, lines) or self._gpus_idle(now, lines)
        if stall is not None:
            return stall
        usual = self.usual_interval_s
        if self.last_metric is None:
            return StallDecision(OK, "no metrics yet", last_lines=lines)
        if usual is None:
            return StallDecision(OK, "too few metrics yet to know how often they come", last_lines=lines)
        return StallDecision(OK, f"metrics usually every {format_span(usual)}, last "
                                 f"{format_span(now - self.last_metric['t'])} ago", last_lines=lines)

    def _alive(self, now: float) -> str | None:
        """None when the run's processes are known to live; else why the run cannot be judged now."""
        if not self.cpu:
            return "no telemetry from the host yet: its processes cannot be seen"
        stale = [node for node, (t, _) in self.cpu.items() if now - t > self.alive_s]
        if stale:
            node = min(stale, key=lambda n: self.cpu[n][0])
            where = "the host" if len(self.cpu) == 1 else f"node {node}"
            return f"nothing from {where} for {format_span(now - self.cpu[node][0])}: the link may be down, not judged"
        gone = [node for node, (_, nprocs) in self.cpu.items() if nprocs <= 0]
        if gone:
            return "its processes have ended; waiting for the run's final state"
        return None

    def _silence(self, now: float, lines: tuple[str, ...]) -> StallDecision | None:
        usual = self.usual_interval_s
        if usual is None or self.last_activity is None or (self.last_metric and self.last_metric["warmup"]):
            return None
        limit = self.policy.silence_limit_s(usual)
        silent = now - self.last_activity
        if silent <= limit:
            return None
        nprocs = sum(n for _, n in self.cpu.values())
        output = ""
        if self.last_output and self.last_output[0] >= self.last_metric["t"]:
            output = f", last output {format_span(now - self.last_output[0])} ago"
        reason = (f"no metrics for {format_span(now - self.last_metric['t'])}, usually every {format_span(usual)}"
                  f"{output}; its {nprocs} processes (supervisor, torchrun, ranks) alive")
        return StallDecision(STALLED, reason, since=self.last_activity, flagged_at=self.last_activity + limit,
                             kind="silence", last_lines=lines)

    def _gpus_idle(self, now: float, lines: tuple[str, ...]) -> StallDecision | None:
        if not self.gpu_idle:  # (GPUs idle only once warm: _telemetry)
            return None
        seen_recently = {key for key, t in self.gpu_seen.items() if now - t <= self.alive_s}
        if not seen_recently or any(self.gpu_idle.get(key) is None for key in seen_recently):
            return None
        since = max(self.gpu_idle[key] for key in seen_recently)
        if self.last_activity is not None:
            since = max(since, self.last_activity)  # metrics or output came while the GPUs idled: progress
        if now - since < self.policy.gpu_idle_s:
            return None
        names = "; ".join(f"{format_gpus(g for n, g in seen_recently if n == node)}" + (f" of node {node}" if node
                          else "") for node in sorted({n for n, _ in seen_recently}))
        reason = (f"{names} near 0% (below {self.policy.gpu_idle_pct:g}%) for {format_span(now - since)} "
                  f"after warm-up; processes alive")
        return StallDecision(STALLED, reason, since=since, flagged_at=since + self.policy.gpu_idle_s,
                             kind="gpu_idle", last_lines=lines)
