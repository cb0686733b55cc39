"""A run's series: what each is, where it came from, which one is the loss; and the user's choice of the loss.

A script run's host names every series it writes in a ``series`` event (``{"name", "from", "source",
"file"?, "loss"?}``, and ``{"name", "also"}`` when a second source gives the same name: see
docs/PROTOCOL.md, "Script metrics").  :func:`series_info` joins those events with the stored values (points,
first and last); :func:`set_loss_series` makes another series the run's loss after the fact (kept in the run
store: every reader then sees it as ``loss``, see :mod:`ddpgui.core.store.loss`).  The same
:class:`SeriesInfo` describes what ``ddpgui parse-log`` finds in a log (:mod:`.parselog`).
"""
from __future__ import annotations

import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from remote_runner.scriptread.sink import RESERVED, canonical
from remote_runner.spools import EVENTS

from ..errors import HintedError
from ..store import RunRecord, RunStore
from ..store.loss import LossChoice, host_loss_from, host_name_of
from .live import format_number, records_summary

#: Record keys that are no series: the record's bookkeeping (the script's and the built-in workloads'); the step
#: a script printed is one (it restarts each epoch where the run's step keeps counting).
NOT_SERIES = (frozenset(RESERVED) - {"printed_step"}) | {"warmup", "global_batch", "precision", "kind", "gpu", "name"}
#: The source of a series a built-in workload wrote (it sends no ``series`` events).
BUILTIN_SOURCE = "built-in workload"
#: The sources of the series the host adds itself (no ``series`` event names them).
HOST_SOURCES = {"printed_step": "the step as printed, where the run's step differs"}

Point = tuple[int | None, float]


@dataclass
class SeriesInfo:
    """One series of a run (or of a parsed log): its name as read, where it came from, how many values it has.

    ``from_`` is the name the script gave it (a printed key, a TensorBoard tag, a CSV column, canonical),
    ``source`` how it was read ("printed lines (stdout)", "progress bar (stderr)", "TensorBoard tag train/loss",
    "CSV log column train_loss"), ``also`` the other sources that gave the same name (their values are not
    kept twice), ``file`` the log file of a file source; ``first``/``last`` are (step, value) of its first
    and last finite values, ``points`` how many it has."""

    name: str
    source: str = ""
    from_: str | None = None
    also: list[str] = field(default_factory=list)
    points: int = 0
    first: Point | None = None
    last: Point | None = None
    is_loss: bool = False
    file: str | None = None

    def to_dict(self) -> dict:
        """As JSON has it (``from`` for ``from_``; first and last as ``{"step", "value"}``)."""
        def point(p: Point | None) -> dict | None:
            return None if p is None else {"step": p[0], "value": p[1]}

        return {"name": self.name, "source": self.source, "from": self.from_, "also": list(self.also),
                "points": self.points, "first": point(self.first), "last": point(self.last),
                "is_loss": self.is_loss, "file": self.file}


def point_text(point: Point | None) -> str:
    """A series' first or last point as listed: ``4.33 @12`` (the value at its step), ``-`` without one."""
    if point is None:
        return "-"
    step, value = point
    return format_number(value) + ("" if step is None else f" @{step}")


class LossSeriesError(HintedError, ValueError):
    """The series named as the loss is not one of the run's; ``hint`` lists them."""


@dataclass
class SeriesStats:
    """Points, first and last (step, value) of one series, added to record by record (:meth:`add`)."""

    points: int = 0
    first: Point | None = None
    last: Point | None = None

    def add(self, step: int | None, value: float) -> None:
        self.points += 1
        if self.first is None:
            self.first = (step, value)
        self.last = (step, value)


def column_stats(columns: dict[str, np.ndarray]) -> dict[str, SeriesStats]:
    """:class:`SeriesStats` of every numeric column that is a series (finite values only)."""
    steps = columns.get("step")
    out = {}
    for key, values in columns.items():
        if key in NOT_SERIES or values.dtype.kind != "f":
            continue
        finite = np.flatnonzero(np.isfinite(values))
        stats = out[key] = SeriesStats(points=int(finite.size))
        if finite.size:
            stats.first, stats.last = (_point(steps, values, finite[0]), _point(steps, values, finite[-1]))
    return out


def _point(steps: np.ndarray | None, values: np.ndarray, i: int) -> Point:
    step = None if steps is None or not np.isfinite(steps[i]) else int(steps[i])
    return step, float(values[i])


def describe_series(stats: dict[str, SeriesStats], events: Iterable[dict], default_source: str = "") -> list[SeriesInfo]:
    """The series of ``stats`` (and of ``series`` events that have no value yet) described by those events:
    the loss first, then in the order the host announced them, then the rest by name."""
    described: dict[str, SeriesInfo] = {}
    for rec in events:
        name = rec.get("name")
        if rec.get("event") != "series" or not isinstance(name, str):
            continue
        info = described.setdefault(name, SeriesInfo(name))
        if "also" in rec:
            if rec["also"] not in info.also:
                info.also.append(str(rec["also"]))
        else:  # the latest announcement (the loss is announced again when a better-named one takes over)
            info.source, info.from_, info.file = str(rec.get("source") or ""), rec.get("from"), rec.get("file")
    for name in sorted(set(stats) - set(described)):
        described[name] = SeriesInfo(name, source=HOST_SOURCES.get(name, default_source))
    for name, info in described.items():
        info.is_loss = name == "loss"
        if name in stats:
            info.points, info.first, info.last = stats[name].points, stats[name].first, stats[name].last
    return sorted(described.values(), key=lambda info: not info.is_loss)


def _series_events(store: RunStore, run_id: str) -> list[dict]:
    return [r for r in store.records(run_id, EVENTS) if r.get("event") == "series"]


def _choice(run: RunRecord, events: list[dict]) -> LossChoice | None:
    return LossChoice(run.loss_series, host_name_of(host_loss_from(events))) if run.loss_series else None


def series_info(store: RunStore, run_id: str) -> list[SeriesInfo]:
    """Every series of a stored run as readers see it (the loss the user chose is ``loss``): name, source,
    the script's own name, other sources, points, first and last values; the loss first."""
    run = store.get_run(run_id)
    events = _series_events(store, run_id)
    choice = _choice(run, events)
    if choice is not None:
        events = [choice.event(e) for e in events]
    builtin = (run.config or {}).get("mode") != "script"
    infos = describe_series(column_stats(store.series(run_id)), events, BUILTIN_SOURCE if builtin else "")
    for info in infos:
        if info.is_loss and choice is not None and info.from_ is None:
            info.from_ = choice.chosen
    return infos


def set_loss_series(store: RunStore, run_id: str, name: str | None) -> RunRecord:
    """Make the series ``name`` the run's loss (None: the one the host chose again), from now on for every
    reader; an ended run's summary gets the final and best loss of that series.

    ``name`` is a series as :func:`series_info` lists it, or the name the script gave it (``train/loss``
    and ``Train Loss`` as the host would name them).  Raises :class:`LossSeriesError` for a name that is no
    series of the run."""
    run = store.get_run(run_id)
    chosen = None if name is None else _resolve(store, run, name)
    record = store.update_run(run_id, loss_series=chosen)
    if record.summary and not record.active:
        numbers = records_summary(store, run_id)
        summary = {k: v for k, v in record.summary.items() if k not in ("final_loss", "best_loss")}
        summary.update({k: numbers[k] for k in ("final_loss", "best_loss") if k in numbers})
        record = store.update_run(run_id, summary=summary)
    return record


def _resolve(store: RunStore, run: RunRecord, name: str) -> str | None:
    """The stored key of the series ``name`` (None: the host's own loss), or LossSeriesError."""
    events = _series_events(store, run.id)
    stored = {k for k, s in column_stats(store.series(run.id, as_stored=True)).items() if s.points}
    by_origin = {e["from"]: e["name"] for e in events
                 if "also" not in e and isinstance(e.get("from"), str) and isinstance(e.get("name"), str)}
    choice = _choice(run, events)
    wanted = name.strip()
    for candidate in dict.fromkeys((wanted, canonical(wanted))):
        if by_origin.get(candidate) in stored:  # the script's own name
            key = by_origin[candidate]
        elif candidate == "loss":  # the run's loss as read now
            key = choice.chosen if choice is not None else "loss"
        else:  # a name as read now (under a choice, the host's loss has its own name)
            key = choice.stored_name(candidate) if choice is not None else candidate
        if key in stored:
            return None if key == "loss" else key
    listed = [f"loss (from {i.from_})" if i.is_loss and i.from_ not in (None, "loss") else i.name
              for i in series_info(store, run.id) if i.points]
    raise LossSeriesError(f"run {run.id} has no series {name!r}",
                          f"its series: {', '.join(listed)}" if listed else "the run has no series yet")


def no_metrics(store: RunStore, run_id: str) -> dict | None:
    """The host's report on a run that gave no metric at all (``message``, ``hint``, ``seen``, ``last_lines``),
    or None."""
    for rec in reversed(store.records(run_id, EVENTS)):
        if rec.get("event") == "no_metrics":
            return {"message": str(rec.get("message") or "the script gave no metric ddpgui could read"),
                    "hint": str(rec.get("hint") or ""), "seen": rec.get("seen") or {},
                    "last_lines": [str(line) for line in rec.get("last_lines") or []]}
    return None


def script_summary(store: RunStore, run_id: str) -> dict | None:
    """The script's closing summary (Transformers' ``train_runtime`` dict) as the host read it, or None."""
    for rec in reversed(store.records(run_id, EVENTS)):
        if rec.get("event") == "script_summary" and isinstance(rec.get("values"), dict):
            return rec["values"]
    return None


# ---- in words (``ddpgui show``, the app's run header) -------------------------------------------------------

def source_text(info: SeriesInfo) -> str:
    """Where a series came from: ``progress bar (stderr); also TensorBoard tag train/loss``."""
    text = info.source or "-"
    return text + "".join(f"; also {also}" for also in info.also)


def loss_text(infos: list[SeriesInfo], chosen: bool = False) -> str | None:
    """``loss  from train_loss, progress bar (stdout)`` (``chosen``: the user's choice), or None without a loss."""
    loss = next((i for i in infos if i.is_loss), None)
    if loss is None:
        return None
    origin = f"from {loss.from_}, " if loss.from_ and loss.from_ != "loss" else ""
    return f"loss  {origin}{source_text(loss)}" + ("  (your choice)" if chosen else "")


def other_series_text(infos: list[SeriesInfo], width: int = 96) -> list[str]:
    """The other series, grouped by where they came from, in lines of at most ``width`` characters:
    ``eval_loss, grad_norm, lr, epoch: printed lines (stdout)``."""
    groups: dict[str, list[str]] = {}
    for info in infos:
        if info.is_loss:
            continue
        where = info.source or "-"
        if info.file:  # one group per log file, not per tag or column
            where = f"{where.split(' ')[0]} {info.file}" if where.startswith(("TensorBoard", "CSV")) else where
        groups.setdefault(where, []).append(info.name)
    text = "; ".join(f"{', '.join(names)}: {where}" for where, names in groups.items())
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) if text else []



def summary_text(values: dict) -> str:
    """A script's closing summary in one line: ``train_runtime 0.425 · train_loss 4.33 · epoch 2``."""
    return " · ".join(f"{k} {format_number(v) if isinstance(v, (int, float)) else v}" for k, v in values.items())


def run_series_lines(store: RunStore, run_id: str, width: int = 96) -> list[tuple[str, str]]:
    """What ``ddpgui show`` (and the app's run header) says of a run's series, as (label, text) lines: the loss
    and where it came from, the other series by source, the script's closing summary, and for a run that gave
    no metric, the host's report and its hint.  A built-in workload's run says nothing of its series unless the
    user chose its loss."""
    run = store.get_run(run_id)
    if (run.config or {}).get("mode") not in ("script", "imported") and run.loss_series is None:
        return []
    infos = series_info(store, run_id)
    lines: list[tuple[str, str]] = []
    loss = loss_text(infos, chosen=run.loss_series is not None)
    others = other_series_text(infos, width)
    if loss or others:
        texts = ([loss] if loss else []) + others
        lines += [("series" if i == 0 else "", text) for i, text in enumerate(texts)]
    summary = script_summary(store, run_id)
    if summary:
        lines.append(("script", summary_text(summary)))
    report = no_metrics(store, run_id)
    if report:
        lines += [("no metrics", report["message"])] + [("", f"| {line}") for line in report["last_lines"][-5:]]
        lines.append(("hint", report["hint"]))
    return lines
