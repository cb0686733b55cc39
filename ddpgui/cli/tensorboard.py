"""``ddpgui import-tensorboard DIR``: an existing TensorBoard log folder's runs into the store, to compare and
export them beside new ones (the export is ``ddpgui export RUN... --format tensorboard``)."""
from __future__ import annotations

import argparse
import json
import sys

from ..core.store import RunStore
from .common import EXIT_OK, CLIError, terminal_text


def cmd_import_tensorboard(args: argparse.Namespace) -> int:
    from ..core.runs.tbimport import TensorBoardImportError, import_tensorboard

    with RunStore() as store:
        try:
            result = import_tensorboard(store, args.dir)
        except TensorBoardImportError as exc:
            raise CLIError(str(exc), exc.hint) from exc
    if not result.imported and not result.known:
        why = "; ".join(f"{folder}: {reason}" for folder, reason in result.skipped[:5])
        raise CLIError(f"nothing imported from {args.dir}: {why}",
                       "point at a folder whose event files hold scalars (add_scalar), or at the folder above them")
    if args.json:
        print(json.dumps({
            "imported": [{"id": r.run.id, "name": r.run.name, "folder": str(r.folder), "files": r.files,
                          "series": r.series, "points": r.points, "settings": r.settings}
                         for r in result.imported],
            "known": [{"id": run_id, "folder": str(folder)} for run_id, folder in result.known],
            "skipped": [{"folder": str(folder), "why": why} for folder, why in result.skipped],
            "warnings": result.warnings}, indent=1))
        return EXIT_OK
    for r in result.imported:
        settings = " ".join(f"{k}={v}" for k, v in r.settings.items())
        print(f"imported {r.run.id} {terminal_text(r.run.name)!r}: {r.series} series, {r.points} points"
              + (f"; settings {terminal_text(settings)}" if settings else ""))
    for run_id, folder in result.known:
        print(f"already in the store: {run_id} ({terminal_text(folder)})")
    for folder, why in result.skipped:
        print(f"skipped {terminal_text(folder)}: {why}", file=sys.stderr)
    for warning in result.warnings:
        print(f"warning: {terminal_text(warning)}", file=sys.stderr)
    series = sum(r.series for r in result.imported)
    points = sum(r.points for r in result.imported)
    known = f"; {len(result.known)} already in the store" if result.known else ""
    print(f"{len(result.imported)} run(s) imported: {series} series, {points} points{known}")
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import-tensorboard", help="import the runs of a TensorBoard log folder (one run per "
                                                  "subfolder; settings from folder names like lr=0.001,bs=32 "
                                                  "or hparams)")
    p.add_argument("dir", metavar="DIR", help="the log folder (what tensorboard --logdir names)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_import_tensorboard)
