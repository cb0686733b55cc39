"""Issue 11: a user's DDP script (nanoGPT-style, gloo, 2 CPU processes) that finished its work must not
abort at interpreter exit.  The same script N times plainly under torchrun, then N times under the runner's
script entry (what script mode runs), counting the runs that aborted or failed after their last iteration."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.common import Row

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "fixtures" / "scripts" / "gptlike" / "train.py"
RUNS = int(os.environ.get("DDPGUI_BENCH_SCRIPT_RUNS", "20"))
ITERS = 10
ABORT = "terminate called without an active exception"


def _torchrun(entry: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *entry,
            str(SCRIPT), f"--max_iters={ITERS}"]


def _count(entry: list[str]) -> tuple[int, int, int]:
    """(runs that printed every iteration, of those the runs that failed, of those the runs with the abort)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    done = failed = aborted = 0
    for _ in range(RUNS):
        proc = subprocess.run(_torchrun(entry), cwd=str(SCRIPT.parent), env=env, capture_output=True, text=True,
                              timeout=300)
        if f"iter {ITERS}: loss" not in proc.stdout:
            continue  # did not finish its work: not what is measured here
        done += 1
        failed += proc.returncode != 0
        aborted += ABORT in proc.stderr
    return done, failed, aborted


def run() -> list[Row]:
    rows = []
    for label, entry in (("plain torchrun", []), ("runner script entry", ["-m", "remote_runner", "_script"])):
        done, failed, aborted = _count(entry)
        note = f"{done}/{RUNS} runs finished every iteration; {aborted} aborted with SIGABRT at exit"
        ok = None if not entry else (failed == 0 and done == RUNS)
        rows.append(Row(f"script exit, {label}: failed after finishing", failed, "runs",
                        "" if not entry else "0", ok, note))
    return rows
