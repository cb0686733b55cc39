"""Issue 25: from the last run's end to the release action (target: the idle time chosen + at most 30 s), and the
release watcher's own CPU while it waits on a run root holding many ended runs.

Run on this machine as an SSH host runs it: the runner's own commands, one process each, real runs (``launch
--new``, the linear workload), the watcher at the poll it has for users (5 s).  The release action writes the time
it ran; the run's end is its status.json's ``ended_at`` (both the host's clock).
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
TRIALS = 6
IDLE_S = 10.0
WATCH_WINDOW_S = 20.0
ENDED_RUNS = 300


def _runner(*args: str, stdin: object = None) -> dict:
    proc = subprocess.run([sys.executable, "-m", "remote_runner", *args], cwd=REPO, capture_output=True, text=True,
                          input=None if stdin is None else (stdin if isinstance(stdin, str) else json.dumps(stdin)),
                          timeout=300, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def end_to_release() -> list[Row]:
    delays = []
    with tempfile.TemporaryDirectory() as tmp:
        trials = []
        for i in range(TRIALS):
            root = Path(tmp) / f"root{i}"
            run_dir = root / "runs" / f"r{i}"
            run_dir.parent.mkdir(parents=True)
            marker = Path(tmp) / f"released{i}"
            _runner("launch", str(run_dir), "--new",
                    stdin=json.dumps({"workload": "linear", "steps": 3, "batch_size": 8, "run_id": f"r{i}"}))
            _runner("release-set", str(root), stdin={"policy": {
                "command": f"date +%s.%N > '{marker}.new'; mv '{marker}.new' '{marker}'", "on": "host",
                "kind": "stop", "after_s": IDLE_S}})
            trials.append((root, run_dir, marker))
        try:
            for _root, run_dir, marker in trials:
                wait_until(marker.exists, 180)
                delays.append(float(marker.read_text()) - float(_status(run_dir)["ended_at"]) - IDLE_S)
        finally:
            for root, _run_dir, _marker in trials:
                _runner("release-set", str(root), stdin={"policy": None})
    return [Row("release: last run's end to the action, beyond the idle time", median(delays), "s", "<= 30",
                max(delays) <= 30, f"median of {len(delays)} real runs, max {max(delays):.1f} s, min "
                                   f"{min(delays):.1f} s (idle time {IDLE_S:.0f} s, the watcher looks every 5 s)")]


def watcher_cost() -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        now = time.time()
        for i in range(ENDED_RUNS):
            run_dir = root / "runs" / f"old{i:04d}"
            run_dir.mkdir(parents=True)
            (run_dir / "status.json").write_text(json.dumps({"state": "finished", "ended_at": now - 3600}))
            (run_dir / "config.json").write_text("{}")
            (run_dir / "metrics.jsonl").write_text('{"seq": 1}\n')  # never collected: looked at on every look
        state = _runner("release-set", str(root), stdin={"policy": {
            "command": "true", "on": "host", "kind": "terminate", "after_s": 3600}})
        pid = int(state["watcher"])
        try:
            time.sleep(6.0)  # its first look at every run
            before, t0 = cpu_seconds(pid), time.monotonic()
            time.sleep(WATCH_WINDOW_S)
            cost = (cpu_seconds(pid) - before) / (time.monotonic() - t0) * 100
        finally:
            _runner("release-set", str(root), stdin={"policy": None})
    return [Row("release watcher CPU while it waits", cost, "% of core", "<= 0.5", cost <= 0.5,
                f"its own CPU over {WATCH_WINDOW_S:.0f} s, {ENDED_RUNS} ended runs in the run root, a terminate "
                "waiting for their records: each looked at on every look")]


def run() -> list[Row]:
    return end_to_release() + watcher_cost()


if __name__ == "__main__":
    from benchmarks.__main__ import report

    sys.exit(report(run()))
