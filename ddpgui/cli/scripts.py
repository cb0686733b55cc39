"""The commands about a script's metrics: ``series`` (a run's series, where each came from, which is the loss)
and ``parse-log`` (what a log would give, read here by the host's own readers, before a launch)."""
from __future__ import annotations

import argparse
import json
import re
import sys

from ..core.runs.parselog import ParseResult, parse_log
from ..core.runs.series import (
    LossSeriesError,
    SeriesInfo,
    no_metrics,
    point_text,
    series_info,
    set_loss_series,
    source_text,
    summary_text,
)
from ..core.store import RunStore
from .common import EXIT_FAILED, EXIT_OK, CLIError, find_run, terminal_text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("series", help="a run's series: where each came from, which one is the loss",
                       description="List a run's series (points, first and last values, source); --loss makes "
                                   "another series the run's loss for every view, compare and export.")
    p.add_argument("run", help="run id, id prefix or name")
    choice = p.add_mutually_exclusive_group()
    choice.add_argument("--loss", metavar="NAME", help="make the series NAME the run's loss")
    choice.add_argument("--loss-default", action="store_true", help="the loss the host chose, again")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_series)
    p = sub.add_parser("parse-log", help="the series a log (or a folder of TensorBoard/CSV logs) would give",
                       description="Read a log file (a script's printed output, a TensorBoard event file, a CSV "
                                   "log) or every TensorBoard event file and CSV log under a folder, as a script "
                                   "run's output is read, and print the series found with their first and last "
                                   "values.")
    p.add_argument("path", metavar="FILE|DIR")
    p.add_argument("--metric-regex", default=None, help="regex with named groups step/loss/... (as launch takes it)")
    p.add_argument("--loss-series", default=None, metavar="NAME", help="the series to read as the loss")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_parse_log)


def cmd_series(args: argparse.Namespace) -> int:
    with RunStore() as store:
        record = find_run(store, args.run)
        said = None
        if args.loss is not None or args.loss_default:
            before = _loss_name(series_info(store, record.id))
            try:
                record = set_loss_series(store, record.id, None if args.loss_default else args.loss)
            except LossSeriesError as exc:
                raise CLIError(str(exc), exc.hint) from None
            said = f"run {record.id}: the loss is now {_loss_name(series_info(store, record.id))} (was {before})"
        infos = series_info(store, record.id)
        report = no_metrics(store, record.id)
    if args.json:
        print(json.dumps({"run": record.id, "loss_series": record.loss_series,
                          "series": [i.to_dict() for i in infos], "no_metrics": report}, indent=1))
        return EXIT_OK
    if said:
        print(terminal_text(said))
    if infos:
        _print_table(infos, chosen=record.loss_series is not None)
    elif not report:
        print(f"run {record.id} has no series" + (" yet" if record.active else ""))
    if report:
        _print_no_metrics(report)
    return EXIT_OK


def _loss_name(infos: list[SeriesInfo]) -> str:
    loss = next((i for i in infos if i.is_loss), None)
    return "none" if loss is None else terminal_text(loss.from_ or "loss")


def cmd_parse_log(args: argparse.Namespace) -> int:
    progress = _progress if sys.stderr.isatty() and not args.json else None
    try:
        result = parse_log(args.path, metric_regex=args.metric_regex, loss_series=args.loss_series,
                           progress=progress)
    except re.error as exc:
        raise CLIError(f"--metric-regex is not a valid regular expression: {exc}",
                       "name the groups, e.g. 'step (?P<step>\\d+).*loss (?P<loss>[0-9.e+-]+)'") from None
    except OSError as exc:
        raise CLIError(f"cannot read {args.path}: {exc.strerror or exc}",
                       "give a log file (a script's printed output, an event file, a CSV log) or a folder") from None
    finally:
        if progress is not None:
            print("\r\x1b[K", end="", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
        return EXIT_OK if result.series else EXIT_FAILED
    _print_result(result)
    return EXIT_OK if result.series else EXIT_FAILED


def _progress(done: int, total: int) -> None:
    if total > 1 << 24:  # only a big file takes long enough to want it
        print(f"\rreading {done / 1e6:.0f}/{total / 1e6:.0f} MB", end="", file=sys.stderr, flush=True)


def _print_result(result: ParseResult) -> None:
    what = {"folder": "log files under", "tensorboard": "TensorBoard event file", "csv": "CSV log"}.get(
        result.kind, "printed output in")
    if result.series:
        print(terminal_text(f"{what} {result.path}: {result.records} record{'s' if result.records != 1 else ''}, "
                            f"{len(result.series)} series"))
        _print_table(result.series)
        if result.loss_from is not None:
            how = "as you chose" if result.loss_series else "chosen as a run would choose it; --loss-series NAME " \
                "reads another"
            print(terminal_text(f"the loss: {result.loss_from} ({how})"))
    for file in result.files:
        if file.get("reading"):
            print(terminal_text(f"read {file['path']}"))
    if result.summary:
        print(terminal_text(f"script summary: {summary_text(result.summary)}"))
    for note in result.notes if result.series else ():  # without series they are in the message
        print(terminal_text(f"note: {note}"))
    for skipped in result.skipped:
        print(terminal_text(f"skipped: {skipped}"))
    if result.no_metrics:
        _print_no_metrics(result.no_metrics)


def _print_table(infos: list[SeriesInfo], chosen: bool = False) -> None:
    """series, points, first and last values (at their steps), source; the loss first, with its own name."""
    rows = []
    for info in infos:
        name = info.name
        if info.is_loss and info.from_ and info.from_ != "loss":
            name += f" (from {info.from_}{', your choice' if chosen else ''})"
        elif info.is_loss and chosen:
            name += " (your choice)"
        rows.append((terminal_text(name), str(info.points), point_text(info.first), point_text(info.last),
                     terminal_text(source_text(info) + (f" in {info.file}" if info.file else ""))))
    header = ("series", "points", "first", "last", "source")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        print(f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]:<{widths[3]}}  {row[4]}")


def _print_no_metrics(report: dict) -> None:
    print(terminal_text(report["message"], multiline=True))
    lines = report.get("last_lines") or []
    if lines:
        print("its last lines:")
        for line in lines[-5:]:
            print(f"  | {terminal_text(line)}")
    if report.get("hint"):
        print(terminal_text(f"hint: {report['hint']}", multiline=True))
