"""Where every reader of a user script's output puts what it found: the run's metric records.

One ``MetricSink`` per run, on the node that has global rank 0; the readers of rank 0's stdout and
stderr (printed lines, progress-bar frames) and of the files the script writes (TensorBoard event files,
CSV logs) call it from their threads.  It decides, in one place (docs/PROTOCOL.md, "Script metrics"):

- **names**: lowercase; ``learning_rate`` → ``lr``; the prefixes Transformers' TensorBoard callback
  adds: ``train/x`` → ``x``, ``eval/x`` → ``eval_x``, ``test/x`` → ``test_x``, and the suffixes of
  PyTorch's TensorBoard tutorial: ``x/train`` → ``x``, ``x/val`` (``x/valid``, ``x/validation``) → ``val_x``,
  ``x/test`` → ``test_x``, ``x/eval`` → ``eval_x``;
- **one source per series**: the first source that gives a name keeps it; another source's values of the
  same name are counted, not written (the run shows a value once), and named in a ``series`` event.  A file
  log's first values of a name wait ``FILE_GRACE_S``, so the script's printed output (live, read at once)
  keeps a name both give, whichever is read first;
- **the run's loss**: written under ``loss`` (``script.loss_series`` when the user chose one, else the series
  whose name is, by preference, ``loss``, ``train_loss``, ``training_loss``, … any loss that is not a
  validation/evaluation/test one: the best name seen so far, so a better one that comes later takes over from
  then on); the series it came from is named in its ``series`` event;
- **steps**: a printed step that starts again (a per-epoch counter) keeps the run's step counting; a line
  without a step takes the step of the script's progress bar, else the count of such lines;
- **the end**: a run that gave no metric at all gets a ``no_metrics`` event saying what was seen.
"""
import functools
import math
import re
import threading
import time
from collections.abc import Iterable
from typing import Callable, Optional

#: Names the run's loss is recognised by, most preferred first (after canonical names).
LOSS_NAMES = ("loss", "train_loss", "training_loss", "loss_step", "train_loss_step", "loss_train")
#: A series whose name starts so is never taken for the run's loss unless the user chose it.
NOT_TRAINING = ("val", "valid", "eval", "test", "predict", "orig_")
#: Record keys that are the record's bookkeeping, not series of the script.
RESERVED = ("seq", "t", "step", "src", "phase", "world_size", "printed_step", "bar_total", "eta_s")
#: Seconds the first values of a name that a file log (TensorBoard, CSV) gives wait before they are written:
#: the script's own output, which shows them live, keeps the name whichever of the two is read first.
FILE_GRACE_S = 0.5
#: Steps above this are not steps (a counter gone wild, a hash printed as a number).
MAX_STEP = 2 ** 53
_PREFIXES = (("train/", ""), ("eval/", "eval_"), ("test/", "test_"))
_SUFFIXES = (("/train", ""), ("/training", ""), ("/val", "val_"), ("/valid", "val_"), ("/validation", "val_"),
             ("/test", "test_"), ("/eval", "eval_"))
_RENAMES = {"learning_rate": "lr", "global_step": "step"}
_SPACES = re.compile(r"\s+")
_SUMMARY = "summary"  # the owner of the names of the script's closing summary


@functools.lru_cache(maxsize=4096)  # a run has a few dozen names, given thousands of times a second
def canonical(name: str) -> str:
    """The series name of a printed key, a TensorBoard tag or a CSV column."""
    key = _SPACES.sub("_", name.strip().lower())
    for prefix, replacement in _PREFIXES:
        if key.startswith(prefix) and len(key) > len(prefix):
            key = replacement + key[len(prefix):]
            break
    else:
        for suffix, replacement in _SUFFIXES:
            if key.endswith(suffix) and len(key) > len(suffix) and "/" not in key[:-len(suffix)]:
                key = replacement + key[:-len(suffix)]
                break
    return _RENAMES.get(key, key)


def loss_rank(name: str) -> Optional[int]:
    """How much ``name`` looks like the run's training loss (0 best), or None when it is not one."""
    if name in LOSS_NAMES:
        return LOSS_NAMES.index(name)
    if "loss" in name and not name.startswith(NOT_TRAINING):
        return len(LOSS_NAMES)
    return None


def _number(value: object) -> Optional[float]:
    if type(value) is float:  # the common case, thousands of times a second: one test
        return value if value - value == 0.0 else None  # NaN and ±inf give NaN
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


class PrintedClock:
    """The run's step for what the script prints: printed steps that start again keep counting (the step
    after the last one, by the stride the counter was printed with: a counter printed every 2 batches,
    0, 2 | 0, 2, continues 4, 6); a progress bar's ``n`` counts across its epochs; a line without a step
    takes the bar's step."""

    def __init__(self) -> None:
        self.step = 0  # the run's step as far as printed output goes
        self._line = (0, None, 1)  # (offset, last printed step, stride) of printed step counters
        self._bars: dict[str, tuple] = {}  # bar identity → (offset, last n, its total, its epoch)
        self._stepless = 0

    def from_line(self, printed: int) -> int:
        offset, last, stride = self._line
        if last is not None and printed < last:  # a per-epoch counter started again
            offset = max(self.step, offset + last) + stride - printed
        elif last is not None and printed > last:
            stride = printed - last
        self._line = (offset, printed, stride)
        return self._advance(offset + printed)

    def from_bar(self, identity: str, n: float, total: Optional[int] = None, epoch: Optional[int] = None) -> int:
        """The step at a bar's frame.  When the bar starts again, the steps before it are the last ``n`` seen,
        or the last bar's ``total`` when the frame's epoch is a later one: a bar that redraws at a rate of its
        own (Rich, 10 times a second) may never draw an epoch's last frame."""
        offset, last, last_total, last_epoch = self._bars.get(identity, (0, 0.0, None, None))
        if n < last:  # the bar started again (the next epoch's bar)
            ended = epoch is not None and last_epoch is not None and epoch > last_epoch
            offset += last_total if ended and last_total and last_total >= last else int(last)
        self._bars[identity] = (offset, n, total, epoch)
        return self._advance(offset + int(n))

    def stepless(self) -> int:
        if self._bars or self._line[1] is not None:
            return self.step
        self._stepless += 1
        return self._advance(self._stepless)

    def _advance(self, step: int) -> int:
        self.step = max(self.step, step)
        return step


class MetricSink:
    """Turns what the readers found into metric records (``writer.write(record, t=None)``) and events
    (``event(name, **fields)``)."""

    def __init__(self, writer, event: Callable[..., None], world_size: Optional[int] = None,
                 loss_series: Optional[str] = None, now: Callable[[], float] = time.monotonic):
        self.writer = writer
        self.event = event
        self.extra: dict = {"phase": "script"}
        if world_size is not None:
            self.extra["world_size"] = world_size
        self.chosen_loss = canonical(loss_series) if loss_series else None
        self.loss_from: Optional[str] = None  # the canonical name written as "loss"
        self.clock = PrintedClock()
        self.owners: dict[str, str] = {}  # series name (as written) → source id
        self.duplicates: dict[tuple[str, str], int] = {}  # (series, other source) → values not written
        self.records = 0
        self.summaries = 0
        self.files: list[dict] = []  # what the file readers reported (for the no-metric report)
        self.now = now
        self._given: set = set()  # canonical names some source has given
        self._first_in_file: dict[str, float] = {}  # canonical name → when a file log first gave it
        self._held_files: list = []  # (since, _write arguments) of file values waiting (see logged)
        self._lock = threading.Lock()

    # ---- what the readers call --------------------------------------------------------------
    def printed(self, src: str, values: dict, step: Optional[int] = None, extra: Optional[dict] = None,
                describe: str = "printed lines") -> Optional[dict]:
        """Values from a printed line (``src`` "stdout" or "stderr"); ``step`` as printed, if any."""
        with self._lock:
            if step is not None and 0 <= step < MAX_STEP:
                run_step = self.clock.from_line(int(step))
                if run_step != step:
                    extra = dict(extra or {}, printed_step=int(step))
            else:
                run_step = self.clock.stepless()
            return self._write(src, "%s (%s)" % (describe, src), run_step, values, extra)

    def bar_step(self, identity: str, n: float, main: bool, total: Optional[int] = None,
                 epoch: Optional[int] = None) -> int:
        """The run's step at a progress-bar frame: the main bar's ``n`` counted across its epochs (another bar,
        a validation one, leaves the step where it is)."""
        with self._lock:
            return self.clock.from_bar(identity, n, total, epoch) if main else self.clock.step

    def bar(self, src: str, step: int, values: dict, extra: Optional[dict] = None) -> Optional[dict]:
        """The values of a progress bar's frame, at the ``step`` :meth:`bar_step` gave it."""
        with self._lock:
            return self._write(src, "progress bar (%s)" % src, step, values, extra)

    def logged(self, kind: str, path: str, step: Optional[int], values: dict, t: Optional[float] = None) -> None:
        """Values a file log holds at ``step`` (``kind`` "tensorboard" or "csv"; ``values`` by tag/column).

        The first values of a name no source has given yet wait FILE_GRACE_S (:meth:`release`): the script's
        printed output shows the same values live, and keeps the name whichever of the two is read first."""
        with self._lock:
            if step is None or not 0 <= step < MAX_STEP:
                step = self.clock.step
            label = "TensorBoard tag" if kind == "tensorboard" else "CSV log column"
            args = ("%s:%s" % (kind, path), label, int(step), values, None, t, path)
            now = self.now()
            waiting = False
            for original in values:
                name = canonical(original)
                if name not in self._given:
                    waiting = now - self._first_in_file.setdefault(name, now) < FILE_GRACE_S or waiting
            if waiting or self._held_files:  # in order: behind what waits already
                self._held_files.append((now, args))
            else:
                self._write(*args)

    def release(self, everything: bool = False) -> None:
        """Once the first waiting value's wait is over (or at the end), write every value waiting: those that
        came after it only waited behind it, in file order."""
        with self._lock:
            if self._held_files and (everything or self.now() - self._held_files[0][0] >= FILE_GRACE_S):
                held, self._held_files = self._held_files, []
                for _, args in held:
                    self._write(*args)

    def claim(self, src: str, values: dict) -> None:
        """A progress bar's frame is held (its values are written when the bar moves on): its names are this
        source's from now, as if written."""
        with self._lock:
            self._own(src, "progress bar (%s)" % src, values, "")

    def summary(self, src: str, values: dict) -> None:
        """The script's closing summary (Transformers' ``train_runtime`` dict): an event, not a step."""
        with self._lock:
            self.summaries += 1
            numbers = {canonical(k): _number(v) for k, v in values.items()}
            for name in numbers:  # the same numbers logged to a file (Trainer's TensorBoard) are no series
                self.owners.setdefault(name, _SUMMARY)
            self.event("script_summary", values=numbers, source="printed lines (%s)" % src)

    def file_found(self, path: str, kind: str, reading: bool, reason: str = "") -> None:
        with self._lock:
            info = {"path": path, "kind": kind, "reading": reading}
            if reason:
                info["reason"] = reason
            self.files.append(info)
            self.event("log_file", **info)

    # ---- records ---------------------------------------------------------------------------
    def _write(self, src: str, label: str, step: int, values: dict, extra: Optional[dict],
               t: Optional[float] = None, file: str = "") -> Optional[dict]:
        record: dict = {"step": step}
        record.update(self._own(src, label, values, file))
        if len(record) == 1:  # nothing of its own
            return None
        record["src"] = src.split(":", 1)[0]
        record.update(self.extra)
        if extra:
            record.update(extra)
        self.writer.write(record, t=t)
        self.records += 1
        return record

    def _own(self, src: str, label: str, values: dict, file: str) -> dict:
        """The values of ``values`` that are ``src``'s to write, under the names they are written with (the
        loss as ``loss``); a name no source had becomes ``src``'s, a name another source has is counted."""
        names = [(name, original, value) for original, value in values.items()
                 if self.owners.get(name := canonical(original)) != _SUMMARY and name not in RESERVED]
        self._choose_loss([name for name, _, _ in names])
        kept = {}
        for name, original, value in names:
            self._given.add(name)
            key = "loss" if name == self.loss_from else ("orig_loss" if name == "loss" else name)
            owner = self.owners.get(key)
            if owner is None:
                self.owners[key] = src
                self._announce(key, name, original, label, file)
            elif owner != src:
                self._duplicate(key, src, original, label, file)
                continue
            kept[key] = _number(value)
        return kept

    def _choose_loss(self, names: list) -> None:
        """The user's choice, else the best-named loss so far: a better name that comes later (nanoGPT prints
        its evaluation's "train loss" before its first "iter 0: loss") is the loss from then on, and the one
        it replaces keeps its values under its own name from then on."""
        if self.chosen_loss is not None:
            if self.loss_from is None and self.chosen_loss in names:
                self.loss_from = self.chosen_loss
            return
        ranked = sorted((rank, name) for name in names if (rank := loss_rank(name)) is not None)
        if not ranked or (self.loss_from is not None and ranked[0][0] >= loss_rank(self.loss_from)):
            return
        if self.loss_from is not None:  # "loss" now means the better one, whichever source gives it
            self.owners.pop("loss", None)
        self.loss_from = ranked[0][1]

    def _source(self, original: str, label: str, file: str) -> str:
        return "%s %s" % (label, original) if file else label

    def _announce(self, key: str, name: str, original: str, label: str, file: str) -> None:
        fields = {"name": key, "from": name, "source": self._source(original, label, file)}
        if key == "loss":
            fields["loss"] = True
        if file:
            fields["file"] = file
        self.event("series", **fields)

    def _duplicate(self, key: str, src: str, original: str, label: str, file: str) -> None:
        count = self.duplicates.get((key, src), 0)
        self.duplicates[(key, src)] = count + 1
        if count == 0:
            self.event("series", name=key, also=self._source(original, label, file))

    # ---- the end ---------------------------------------------------------------------------
    def close(self, seen: Iterable[tuple[str, "object"]] = ()) -> None:
        """At the run's end: what waits is written; a ``no_metrics`` event when nothing was written at all
        (``seen``: (stream, reader))."""
        self.release(everything=True)
        with self._lock:
            if self.records:
                return
            self.event("no_metrics", **no_metrics_report(list(seen), self.files, self.summaries))


def no_metrics_report(readers: list, files: list[dict], summaries: int = 0) -> dict:
    """The ``no_metrics`` event's fields: what was seen, and what to do."""
    parts, last_lines, seen = [], [], {}
    for stream, reader in readers:
        seen[stream + "_lines"] = reader.lines
        seen[stream + "_bar_frames"] = reader.bar_frames
        if reader.lines:
            parts.append("%d line%s on %s" % (reader.lines, "" if reader.lines == 1 else "s", stream))
        if reader.bar_frames:
            parts.append("%d progress-bar frame%s without values on %s"
                         % (reader.bar_frames, "" if reader.bar_frames == 1 else "s", stream))
        last_lines += ["%s: %s" % (stream, line) for line in reader.last_lines()]
    for info in files:
        state = "read" if info["reading"] else "not read: %s" % info.get("reason", "")
        parts.append("%s file %s (%s)" % ("TensorBoard" if info["kind"] == "tensorboard" else "CSV",
                                         info["path"], state))
    seen["files"] = files
    seen["summaries"] = summaries
    said = ", ".join(parts) if parts else "no output at all"
    message = "the script gave no metric ddpgui could read (rank 0 printed %s)" % said
    hint = ("ddpgui reads lines like 'step 10 loss 0.52' or {'loss': 0.52}, a progress bar's postfix "
            "(tqdm's set_postfix), and the TensorBoard event files and CSV logs the script writes; "
            "try `ddpgui parse-log` on the run's stdout.log or stderr.log (Open logs…), or give a "
            "--metric-regex with named groups such as 'step (?P<step>\\d+).*loss (?P<loss>[0-9.e+-]+)'")
    return {"message": message, "hint": hint, "seen": seen, "last_lines": last_lines[-10:]}
