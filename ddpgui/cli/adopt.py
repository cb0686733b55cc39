"""``ddpgui adopt HOST [HOST ...]``: take back into the store the runs on hosts that it does not hold
(after a lost or moved-aside store, or from another computer); every point is fetched again."""
from __future__ import annotations

import argparse
import json
import sys

from ..core.runs.adopt import adopt_runs
from ..core.sweeps.hostqueue import adopt_sweeps
from .common import EXIT_OK, CLIError, open_manager, terminal_text

#: How long ``adopt`` waits for the points of the runs that had ended already.
WAIT_S = 600.0


def cmd_adopt(args: argparse.Namespace) -> int:
    with open_manager(args) as manager:
        result = adopt_runs(manager, args.hosts)
        for run_id in result.ended:  # their points are stored by the followers; a live run is followed later
            try:
                manager.wait(run_id, timeout=WAIT_S)
            except TimeoutError:
                raise CLIError(f"run {run_id} was adopted but its points are still arriving after {WAIT_S:.0f} s",
                               f"store the rest with: ddpgui follow {run_id}") from None
        sweeps = adopt_sweeps(manager, args.hosts)  # after the waits: an ended run's cell gets its outcome
        adopted = [manager.store.get_run(r.id) for r in result.adopted]
    if args.json:
        print(json.dumps({"adopted": [r.id for r in adopted], "known": result.known, "sweeps": [s.id for s in sweeps],
                          "skipped": [{"where": w, "why": why} for w, why in result.skipped]}, indent=1))
        return EXIT_OK
    for record in adopted:
        live = "" if not record.active else \
            f"; still {record.state}: watch it with ddpgui follow {record.id}"
        print(f"adopted {record.id} {terminal_text(record.name)!r} from {', '.join(record.hosts)}: {record.state}, "
              f"{record.last_step or 0} steps{live}")
    for where, why in result.skipped:
        print(f"skipped {terminal_text(where)}: {why}", file=sys.stderr)
    for sweep in sweeps:
        more = f"; follow the rest with ddpgui sweep-resume {sweep.id}" if sweep.active else ""
        print(f"adopted sweep {sweep.id} {terminal_text(sweep.name)!r}: {sweep.message}{more}")
    known = f"; {len(result.known)} already in the store" if result.known else ""
    print(f"{len(adopted)} run(s) adopted from {', '.join(args.hosts)}{known}")
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("adopt", help="take back the runs on hosts that the run store does not hold "
                                     "(after a lost store); every point is fetched again")
    p.add_argument("hosts", nargs="+", metavar="HOST",
                   help="host profiles to list runs on; for a multi-node run name all its hosts, node 0 first")
    p.add_argument("--json", action="store_true")
    p.add_argument("--accept-new-host-key", action="store_true")
    p.set_defaults(func=cmd_adopt)
