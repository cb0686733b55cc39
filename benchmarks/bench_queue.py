"""Issue 25: the host-side queue's own cost while a run goes on, and the gap between one cell's end and the next
cell's start, with the client-driven sweep's gap (today's path, This computer) measured beside it.

The queue is run on this machine as an SSH host runs it (the runner's commands, one process each).  Gaps are read
from the runs' own status.json (``ended_at`` of one, ``started_at`` of the next: the host's clock).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import Row, cpu_seconds, median, wait_until

REPO = Path(__file__).resolve().parents[1]
SHORT_CELLS = 4
IDLE_WINDOW_S = 20.0


def _runner(*args: str, stdin: object = None) -> dict:
    proc = subprocess.run([sys.executable, "-m", "remote_runner", *args], cwd=REPO, capture_output=True, text=True,
                          input=None if stdin is None else json.dumps(stdin), timeout=300, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _status(root: Path, run_id: str) -> dict:
    try:
        return json.loads((root / "runs" / run_id / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _gaps(runs: list[dict]) -> list[float]:
    return [b["started_at"] - a["ended_at"] for a, b in zip(runs, runs[1:])]


def host_queue() -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ids = ["long"] + [f"short{i}" for i in range(SHORT_CELLS)]
        cells = [{"run_id": rid, "index": i, "sweep_id": "bench",
                  "config": json.dumps({"workload": "linear", "steps": 10 ** 7 if rid == "long" else 5,
                                        "run_id": rid})} for i, rid in enumerate(ids)]
        pid = _runner("queue-add", str(root), stdin={"cells": cells})["queue_pid"]
        wait_until(lambda: _status(root, "long").get("state") == "running", 120)
        time.sleep(1.0)
        before, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(IDLE_WINDOW_S)
        idle = (cpu_seconds(pid) - before) / (time.monotonic() - t0) * 100
        _runner("stop", str(root / "runs" / "long"))
        wait_until(lambda: not _runner("queue-status", str(root))["running"], 300)
        runs = [_status(root, rid) for rid in ids[1:]]
        if any(r.get("state") != "finished" for r in runs):
            raise RuntimeError(f"a queued benchmark run did not finish: {runs}")
    gaps = _gaps(runs)
    return [Row("host queue CPU while a run goes on", idle, "% of core", "<= 0.5", idle <= 0.5,
                f"its own CPU over {IDLE_WINDOW_S:.0f} s (it reads the run's status.json every 0.5 s)"),
            Row("host queue gap, one cell's end to the next's start", median(gaps), "s", "<= 2", max(gaps) <= 2,
                f"median of {len(gaps)}, max {max(gaps):.2f} s")]


def client_driven() -> list[Row]:
    from ddpgui.core.hosts import HostStore
    from ddpgui.core.runs.manager import RunManager
    from ddpgui.core.store import RunStore
    from ddpgui.core.sweeps import SweepRunner, SweepSpec
    from ddpgui.core.targets.local import LocalTarget

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hosts = HostStore(root / "hosts.json")
        with RunStore(root / "runs.sqlite3") as store, \
                RunManager(store, hosts, lambda name: LocalTarget(run_root=str(root / "local"))) as manager, \
                SweepRunner(manager) as runner:
            sweep = runner.start(SweepSpec(hosts=["local"], base={"workload": "linear", "steps": 5},
                                           repeats=SHORT_CELLS, name="bench"))
            final = runner.wait(sweep.id, timeout=600)
            if final.state != "done":
                raise RuntimeError(f"the client-driven benchmark sweep {final.state}: {final.message}")
            runs = [_status(Path(store.get_run(c.run_id).run_dirs[0]).parent.parent, c.run_id)
                    for c in store.sweep_cells(sweep.id)]
    gaps = _gaps(runs)
    return [Row("client-driven gap (today, This computer)", median(gaps), "s", "",
                note=f"median of {len(gaps)}, max {max(gaps):.2f} s: the client's follow and launch in between")]


def run() -> list[Row]:
    return host_queue() + client_driven()


if __name__ == "__main__":
    from benchmarks.__main__ import report

    sys.exit(report(run()))
