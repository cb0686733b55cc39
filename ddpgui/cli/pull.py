"""``ddpgui pull RUN [PATTERN...] --out DIR``: the files a run wrote on its host, listed with sizes and downloaded
(resumable, sha256-checked: ddpgui.core.runs.pull)."""
from __future__ import annotations

import argparse
import sys
import time

from ..core.runs.pull import (
    Listing,
    PullError,
    RateMeter,
    list_outputs,
    pull,
    run_location,
    select,
    shown_name,
    size_text,
)
from .common import EXIT_OK, CLIError, find_run, open_manager, terminal_text

#: Seconds between progress lines when stderr is not a terminal (a log file gets a few lines, not thousands).
LOG_EVERY_S = 5.0


def _name(text: str) -> str:
    return terminal_text(shown_name(text))


def print_listing(listing: Listing, chosen: set[str], header: str) -> None:
    print(header)
    width = max([len(size_text(f.size)) for f in listing.files] + [4])
    for f in listing.files:
        mark = "*" if f.name in chosen else " "
        print(f" {mark} {size_text(f.size):>{width}}  {_name(f.name)}")
    for name, why in listing.skipped:
        print(f"skipped {_name(name)}: {terminal_text(why)}", file=sys.stderr)
    for folder in listing.missing:
        print(f"warning: the outputs folder {_name(folder)} is not on the host", file=sys.stderr)


class ProgressLine:
    """Bytes, rate and ETA on stderr: redrawn in place on a terminal, a line every few seconds otherwise."""

    def __init__(self) -> None:
        self.meter = RateMeter()
        self.tty = sys.stderr.isatty()
        self.shown = 0.0
        self.name = ""

    def __call__(self, done: int, total: int, name: str, index: int, count: int) -> None:
        self.meter.add(done)
        now = time.monotonic()
        if name == self.name and now - self.shown < (0.1 if self.tty else LOG_EVERY_S):
            return
        self.name, self.shown = name, now
        text = f"{self.meter.text(done, total)}" + (f" · file {index + 1} of {count}: {_name(name)}" if name else "")
        if self.tty:
            print("\r\033[K" + text, end="", file=sys.stderr, flush=True)
        else:
            print(text, file=sys.stderr, flush=True)

    def end(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def cmd_pull(args: argparse.Namespace) -> int:
    if args.out is None and not args.list:
        raise CLIError("give --out DIR, the folder the files go to (or --list to only list them)",
                       "e.g. ddpgui pull RUN '*.pt' --out results")
    with open_manager(args) as manager:
        record = find_run(manager.store, args.run)
        try:
            host, run_dir = run_location(record, args.node)
        except PullError as exc:
            raise CLIError(str(exc.args[0]), exc.hint) from None
        target = manager.targets.target(host)
        listing = list_outputs(target, run_dir)
        try:
            chosen = select(listing.files, args.patterns)
        except PullError as exc:
            raise CLIError(str(exc.args[0]), exc.hint) from None
        header = (f"run {record.id} on {terminal_text(host)}: {len(listing.files)} files, "
                  f"{size_text(listing.total)}" + (f"; {len(chosen)} chosen, {size_text(sum(f.size for f in chosen))}"
                                                   if args.patterns else ""))
        print_listing(listing, {f.name for f in chosen}, header)
        if args.patterns and not chosen:
            raise CLIError(f"no file of run {record.id} matches {' '.join(map(repr, args.patterns))}",
                           "patterns are globs on the names listed above, e.g. '*.pt' or 'checkpoints/*'")
        if args.list:
            return EXIT_OK
        line = ProgressLine()
        try:
            result = pull(target, run_dir, chosen, args.out, listing=listing, progress=line, via=args.via)
        finally:
            line.end()
    rate = f" ({size_text(result.bytes / result.seconds)}/s)" if result.seconds > 0 and result.bytes else ""
    print(f"downloaded {len(result.downloaded)} file(s), {size_text(result.bytes)} in {result.seconds:.1f} s{rate} "
          f"to {terminal_text(args.out)}, each checked against its sha256 on the host")
    if result.resumed_bytes:
        print(f"resumed: {size_text(result.resumed_bytes)} were already there from an earlier pull (.part)")
    if result.unchanged:
        print(f"{len(result.unchanged)} file(s) already there with the same sha256: not downloaded again")
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pull", help="list the files a run wrote on its host and download them (resumable, "
                                    "checked by sha256)")
    p.add_argument("run", metavar="RUN", help="run id, id prefix or name")
    p.add_argument("patterns", nargs="*", metavar="PATTERN",
                   help="globs on the listed names ('*.pt', 'checkpoints/*'); default: every file")
    p.add_argument("--out", default=None, metavar="DIR", help="the folder to download into (made when missing)")
    p.add_argument("--list", action="store_true", help="only list the files and their sizes")
    p.add_argument("--node", type=int, default=0, help="a multi-node run's node (default 0)")
    p.add_argument("--via", choices=("auto", "exec", "sftp"), default="auto",
                   help="how the bytes travel from an SSH host: auto or exec (the runner's stream over an exec "
                        "channel: the fastest measured, and there without SFTP), or sftp; This computer copies")
    p.add_argument("--accept-new-host-key", action="store_true")
    p.set_defaults(func=cmd_pull)
