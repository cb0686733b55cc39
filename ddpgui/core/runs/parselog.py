"""Try the reading of a script's metrics before a launch: a log file, or a folder of TensorBoard/CSV logs, read
here by the host's own readers (``remote_runner.scriptread``), exactly as a run of the script would be read.

    result = parse_log("train.log")                       # printed output: lines, progress-bar frames
    result = parse_log("lightning_logs/", loss_series="val_loss")   # every event file and CSV log under it
    result.series, result.loss_from, result.skipped, result.no_metrics

One implementation for ``ddpgui parse-log`` and the app's launch form (which calls it on a worker thread:
``progress(done, total)`` is called between pieces, and an exception raised there stops the reading).
A file is read in pieces of :data:`PIECE` bytes and only each series' count, first and last values are
kept, so a 1 GB log costs little memory.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from remote_runner.scriptread.files import WRITTEN_FILES, LogFileWatcher, log_kind
from remote_runner.scriptread.frames import MAX_FRAME
from remote_runner.scriptread.output import OutputReader
from remote_runner.scriptread.sink import MetricSink

from .series import NOT_SERIES, SeriesInfo, SeriesStats, describe_series

#: Bytes of a log file read at a time.
PIECE = 1 << 20
#: What the hint of a log without metrics suggests.
REGEX_EXAMPLE = r"step (?P<step>\d+).*loss (?P<loss>[0-9.e+-]+)"

Progress = Callable[[int, int], object]


@dataclass
class ParseResult:
    """What reading a log found: its series (the loss first, as ``loss``: see ``loss_from``), the script's
    closing summary, what was skipped, and when nothing was found, why and what to try (``no_metrics``:
    ``message``, ``hint``, ``seen``, ``last_lines``)."""

    path: str
    kind: str  # "file" (printed output), "tensorboard" or "csv" (one log file), "folder"
    series: list[SeriesInfo] = field(default_factory=list)
    loss_from: str | None = None  # the series read as the loss (the name the log gave it)
    loss_series: str | None = None  # the series asked to be the loss (None: the first loss-like one)
    records: int = 0
    summary: dict | None = None
    files: list[dict] = field(default_factory=list)  # the log files found in a folder ({path, kind, reading, reason?})
    skipped: list[str] = field(default_factory=list)  # what was skipped, in words
    notes: list[str] = field(default_factory=list)  # what else the reader should know
    no_metrics: dict | None = None

    def to_dict(self) -> dict:
        return {"path": self.path, "kind": self.kind, "series": [s.to_dict() for s in self.series],
                "loss_from": self.loss_from, "loss_series": self.loss_series, "records": self.records,
                "summary": self.summary, "files": self.files, "skipped": self.skipped, "notes": self.notes,
                "no_metrics": self.no_metrics}


class _Collector:
    """The sink's writer: per series its count and first and last (step, value); the records are not kept."""

    def __init__(self) -> None:
        self.stats: dict[str, SeriesStats] = {}
        self.records = 0

    def write(self, record: dict, t: float | None = None) -> None:
        self.records += 1
        step = record.get("step")
        for key, value in record.items():
            if key in NOT_SERIES or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if value == value and abs(value) != float("inf"):
                self.stats.setdefault(key, SeriesStats()).add(step, float(value))


def parse_log(path: str | os.PathLike, metric_regex: str | None = None, loss_series: str | None = None,
              progress: Progress | None = None) -> ParseResult:
    """The series a log yields as a script run's metrics: ``path`` a file of printed output (stdout/stderr
    captured, with progress-bar redraws), a TensorBoard event file or a CSV log, or a folder read for every
    event file and CSV log under it.  ``metric_regex`` and ``loss_series`` as ``ddpgui launch`` takes them
    (an invalid regex raises ``re.error``); a path that cannot be read raises OSError."""
    path = Path(path)
    regex = re.compile(metric_regex) if metric_regex else None
    events: list[tuple[str, dict]] = []
    collector = _Collector()
    sink = MetricSink(collector, lambda event, /, **fields: events.append((event, fields)), loss_series=loss_series)
    if path.is_dir():
        result = ParseResult(str(path), "folder", loss_series=loss_series)
        _read_folder(path, sink, result, progress)
    else:
        kind = log_kind(str(path))
        result = ParseResult(str(path), kind or "file", loss_series=loss_series)
        if kind is None:
            _read_output(path, sink, regex, result, progress)
        else:
            _read_logs([(str(path.resolve()), kind)], sink, result, progress)
    _finish(result, sink, collector, events)
    return result


def _read_output(path: Path, sink: MetricSink, regex, result: ParseResult, progress: Progress | None) -> None:
    """A file of printed output, through the reader of one output stream (named as the file suggests)."""
    stream = "stderr" if "stderr" in path.name.lower() else "stdout"
    reader = OutputReader(stream, sink, regex)
    total, done = path.stat().st_size, 0
    with path.open("rb") as fh:
        while piece := fh.read(PIECE):
            if done == 0 and b"\0" in piece[:8192]:
                result.notes.append(f"{path.name} holds binary data (NUL bytes): it is not a text log")
            reader.feed(piece)
            done += len(piece)
            if progress is not None:
                progress(done, total)
    reader.close()
    if total == 0:
        result.notes.append("the file is empty")
    if reader.splitter.long_skipped:
        n = reader.splitter.long_skipped
        result.skipped.append(f"{n} line{'s' if n > 1 else ''} longer than {MAX_FRAME // 1024} KiB (no metric line "
                              f"is that long)")
    sink.close([(stream, reader)])


def _read_folder(folder: Path, sink: MetricSink, result: ParseResult, progress: Progress | None) -> None:
    """Every TensorBoard event file and CSV log under ``folder`` (sorted; symlinked folders not followed)."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            kind = log_kind(name)
            if kind is not None:
                found.append((os.path.abspath(os.path.join(root, name)), kind))
    if not found:
        result.notes.append(f"no TensorBoard event file (events.out.tfevents.*) and no CSV file under {folder}")
    _read_logs(found, sink, result, progress)


def _read_logs(found: list[tuple[str, str]], sink: MetricSink, result: ParseResult, progress: Progress | None) -> None:
    """Log files through the host's watcher of the files a script writes (one pass, read to their end)."""
    with tempfile.TemporaryDirectory(prefix="ddpgui-parse-log-") as listing:
        with open(os.path.join(listing, WRITTEN_FILES), "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"path": path, "kind": kind}) + "\n" for path, kind in found)
        LogFileWatcher(listing, sink).poll(final=True)
    if progress is not None:
        progress(len(found), len(found))
    sink.close()


def _finish(result: ParseResult, sink: MetricSink, collector: _Collector, events: list[tuple[str, dict]]) -> None:
    series_events = []
    for event, fields in events:
        if event == "series":
            series_events.append(dict(fields, event="series"))
        elif event == "log_file":
            result.files.append(fields)
            if not fields.get("reading"):
                result.skipped.append(f"{fields.get('path')}: not read ({fields.get('reason') or 'no reason given'})")
        elif event == "warning":
            result.skipped.append(str(fields.get("message")))
        elif event == "script_summary":
            result.summary = fields.get("values")
        elif event == "no_metrics":
            result.no_metrics = _no_metrics(result, fields)
    result.series = describe_series(collector.stats, series_events)
    result.records = collector.records
    result.loss_from = sink.loss_from
    for (name, source), count in sorted(sink.duplicates.items()):
        result.skipped.append(f"{count} value{'s' if count > 1 else ''} of {name} from {_source_name(source)}: the "
                              f"series is read from one source")
    if sink.chosen_loss and sink.loss_from is None and collector.records:
        result.notes.append(f"no series is named {sink.chosen_loss}: a run would have no loss")


def _source_name(source: str) -> str:
    kind, _, path = source.partition(":")
    return {"tensorboard": f"TensorBoard file {path}", "csv": f"CSV log {path}"}.get(kind, f"printed output ({kind})")


def _no_metrics(result: ParseResult, report: dict) -> dict:
    """The host's no-metric report (what was seen, the last lines), said of this log rather than of a run."""
    seen = report.get("seen") or {}
    if result.kind != "file":  # log files
        files = seen.get("files") or []
        said = (f"{len(files)} log file{'s' if len(files) != 1 else ''} "
                f"({', '.join(os.path.basename(f['path']) for f in files[:5])})") if files else "no log file"
        message = (f"no metric found under {result.path}: it holds {said}" if result.kind == "folder"
                   else f"no metric found in {Path(result.path).name}")
        hint = ("ddpgui reads the scalars of TensorBoard event files (events.out.tfevents.*) and CSV logs whose "
                "header has a step, epoch or loss column; point parse-log at the folder the script logs to, or at "
                "its printed output (a file)")
    else:
        lines = sum(v for k, v in seen.items() if k.endswith("_lines") and isinstance(v, int))
        frames = sum(v for k, v in seen.items() if k.endswith("_bar_frames") and isinstance(v, int))
        said = f"{lines} line{'s' if lines != 1 else ''}" + (
            f", {frames} progress-bar frame{'s' if frames != 1 else ''} without values" if frames else "")
        message = f"no metric found in {Path(result.path).name}" + (f" ({said})" if lines or frames else "")
        hint = ("ddpgui reads lines like 'step 10 loss 0.52' or {'loss': 0.52}, a progress bar's postfix "
                "(tqdm's set_postfix(loss=...)), TensorBoard event files and CSV logs; for other lines give "
                f"--metric-regex with named groups, e.g. --metric-regex '{REGEX_EXAMPLE}'")
    if result.notes:
        message += "; " + "; ".join(result.notes)
    last = [re.sub(r"^std(?:out|err): ", "", line) for line in report.get("last_lines") or []]
    return {"message": message, "hint": hint, "seen": seen, "last_lines": last}
