"""One stream of rank 0's output (stdout or stderr) read for metrics: frames → progress bars or lines → the sink.

A progress bar redraws many times per step (Lightning draws each batch's frame, then again once its postfix
is set), so a bar's frame is held until the bar moves on: the *last* frame drawn at each ``n`` is the one
that counts.  The step clock moves at once, though, so a line printed right after the frame (Transformers
prints its log dict after its bar moved) gets that step.  A frame still held after ``HOLD_S`` is written
(the bar stopped moving: the end of an epoch, a slow step), and written again if it is redrawn at the same
``n`` with other values.  Rich draws a bar's values that do not fit on the line below it: those lines
belong to the frame above them.  A new epoch's bar first drawn at ``n = 0`` with the values the last one
ended with (Lightning's) is not a step of its own: it moves the clock, and writes only what it shows anew.
A validation value stays in a bar's postfix until the next validation (Lightning shows ``val_loss`` at every
step): such a value is written when it changes.
"""
import time
from typing import Optional

from .bars import BarFrame, continuation_values, parse_bar
from .frames import FrameSplitter, Segment
from .lines import is_summary, parse_metric_line
from .sink import NOT_TRAINING, MetricSink

#: Seconds a bar's last frame is held before it is written although the bar has not moved on.
HOLD_S = 1.0


class _Held:
    __slots__ = ("frame", "step", "main", "since", "written", "identity")

    def __init__(self, frame: BarFrame, step: int, main: bool, since: float, identity: str):
        self.frame, self.step, self.main, self.since, self.written = frame, step, main, since, False
        self.identity = identity


class OutputReader:
    """Feed it the stream's bytes as they come (:meth:`feed`), :meth:`idle` when none came for a while,
    :meth:`close` at the end."""

    def __init__(self, stream: str, sink: MetricSink, regex=None, clock=time.monotonic, reports=None):
        self.stream = stream
        self.sink = sink
        self.reports = reports  # a SettingsReports (reports.py): what the script says it runs with
        self.regex = regex
        self.clock = clock
        self.splitter = FrameSplitter(every_line=regex is not None)
        self.bar_frames = 0  # frames that held no value
        self._held: dict[str, _Held] = {}
        self._rich: Optional[str] = None  # the Rich bar whose wrapped values may follow
        self._shown: dict = {}  # validation values last written from a bar, by key
        self._last: dict = {}  # bar identity → the values its last written frame had

    @property
    def lines(self) -> int:
        return self.splitter.lines

    def last_lines(self) -> list[str]:
        return list(self.splitter.last)

    def feed(self, data: bytes) -> None:
        if self.reports is not None:
            self.reports.feed(self.stream, data)
        for segment in self.splitter.feed(data):
            self._segment(segment)

    def catch_up(self) -> None:
        """Read the bar frame being drawn (a frame is ended only by the next one's ``\r``): before another
        stream's line is read (Transformers' bar on stderr moved, then it printed its log dict on stdout), and
        when the output goes quiet."""
        segment = self.splitter.peek()
        if segment is not None:
            self._segment(segment, partial=True)

    def idle(self) -> None:
        """Nothing came for a while: read the frame being drawn, write bar frames held longer than HOLD_S."""
        self.catch_up()
        now = self.clock()
        for held in self._held.values():
            if not held.written and now - held.since >= HOLD_S:
                self._write(held)

    def close(self) -> None:
        for segment in self.splitter.flush():
            self._segment(segment)
        for held in self._held.values():
            if not held.written:
                self._write(held)

    def _segment(self, segment: Segment, partial: bool = False) -> None:
        """One frame; ``partial``: the frame being drawn (read as a bar or a bar's wrapped values only)."""
        text = segment.text
        if not text.strip():
            return
        frame = parse_bar(text, segment.up) if "/" in text else None
        if frame is not None:
            self._frame(frame)
            return
        if self._rich is not None:
            values = continuation_values(text)
            if values:
                self._held[self._rich].frame.values.update(values)
                self.sink.claim(self.stream, values)
                return
            if partial:
                return
            self._rich = None
        if partial:
            return
        record = parse_metric_line(text, self.regex)
        if record is None:
            return
        if is_summary(record):
            self.sink.summary(self.stream, record)
            return
        step = record.pop("step", None)
        self.sink.printed(self.stream, record, step=step if isinstance(step, int) else None)

    def _frame(self, frame: BarFrame) -> None:
        rich = frame.style == "rich"
        nested = frame.nested and not rich  # Rich moves the cursor up to redraw itself, not to nest
        identity = "%s:%s:%s" % (frame.style, "nested" if nested else "top", frame.desc)
        main = not nested and frame.phase == "train"
        held = self._held.get(identity)
        if held is not None and not held.written and held.frame.n != frame.n:
            self._write(held)
        if held is not None and held.frame.n == frame.n and held.frame.values == frame.values:
            return  # the same frame drawn (or read) again
        step = self.sink.bar_step(identity, frame.n, main, frame.total, frame.epoch)
        self._held[identity] = _Held(frame, step, main, self.clock(), identity)
        self._rich = identity if rich else None
        if frame.values:
            self.sink.claim(self.stream, frame.values)

    def _write(self, held: _Held) -> None:
        held.written = True
        frame = held.frame
        last, self._last[held.identity] = self._last.get(held.identity, {}), dict(frame.values)
        values = self._changed(frame.values, every=not held.main)
        if frame.n == 0:  # no step done on this bar yet: only what it shows anew (a validation that just ran)
            values = {k: v for k, v in values.items() if k not in last or last[k] != v}
        if not values:
            if not frame.values:
                self.bar_frames += 1
            return
        if frame.epoch is not None and frame.n:
            values.setdefault("epoch", frame.epoch)
        extra = {}
        if held.main:  # a validation bar's position and ETA are not the run's
            if frame.n != held.step:
                extra["printed_step"] = frame.n
            if frame.total is not None:
                extra["bar_total"] = frame.total
            if frame.remaining_s is not None:
                extra["eta_s"] = frame.remaining_s
        self.sink.bar(self.stream, held.step, values, extra)

    def _changed(self, values: dict, every: bool = False) -> dict:
        """The frame's values less the validation ones it shows unchanged since they were last written (all of
        them, ``every``, for a bar that is not the main one: its frames do not move the run's step)."""
        out = {}
        for key, value in values.items():
            if every or key.lower().startswith(NOT_TRAINING):
                if self._shown.get(key, object()) == value:
                    continue
                self._shown[key] = value
            out[key] = value
        return out
