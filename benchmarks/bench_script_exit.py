"""Issue 11: a user's DDP script (gloo, 2 CPU processes) that finished its work must not abort at interpreter
exit.  Each script N times plainly under torchrun, then N times under the runner's script entry (what script mode
runs), counting the runs that failed (or aborted with SIGABRT) after printing their last iteration.

Two scripts: the nanoGPT-style fixture (tests/fixtures/scripts/gptlike) and the smallest script with the same
ending (a DDP model on gloo, destroy_process_group(), return), which aborts more often."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import Row

REPO = Path(__file__).resolve().parents[1]
GPTLIKE = REPO / "tests" / "fixtures" / "scripts" / "gptlike" / "train.py"
RUNS = int(os.environ.get("DDPGUI_BENCH_SCRIPT_RUNS", "20"))
ITERS = 10
ABORT = "terminate called without an active exception"
MINIMAL = f'''import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(8, 8))
for i in range({ITERS + 1}):
    model(torch.randn(4, 8)).sum().backward()
    if dist.get_rank() == 0:
        print(f"iter {{i}}: loss 1.0", flush=True)
dist.destroy_process_group()
'''


def _count(script: Path, entry: list[str]) -> tuple[int, int, int]:
    """(runs that printed every iteration, of those the runs that failed, of those the runs with the abort)."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *entry,
            str(script), f"--max_iters={ITERS}"]
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    done = failed = aborted = 0
    for _ in range(RUNS):
        proc = subprocess.run(argv, cwd=str(script.parent), env=env, capture_output=True, text=True, timeout=300)
        if f"iter {ITERS}: loss" not in proc.stdout:
            continue  # did not finish its work: not what is measured here
        done += 1
        failed += proc.returncode != 0
        aborted += ABORT in proc.stderr
    return done, failed, aborted


def run() -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        minimal = Path(tmp) / "train.py"
        minimal.write_text(MINIMAL)  # its arguments are ignored
        for name, script in (("nanoGPT-style", GPTLIKE), ("minimal DDP", minimal)):
            for label, entry in (("plain torchrun", []), ("runner script entry", ["-m", "remote_runner", "_script"])):
                done, failed, aborted = _count(script, entry)
                note = f"{done}/{RUNS} runs finished every iteration; {aborted} aborted with SIGABRT at exit"
                ok = None if not entry else (failed == 0 and done == RUNS)
                rows.append(Row(f"script exit, {name}, {label}: failed after finishing", failed, "runs",
                                "" if not entry else "0", ok, note))
    return rows
