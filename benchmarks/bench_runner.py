"""Issue 2: the spool's cost (per record and on a real DDP run) and the runner package."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import Row, median, percentile

REPO = Path(__file__).resolve().parents[1]
N_RECORDS = 20_000
#: The values a training step logs (what rank 0 writes every step).
STEP_VALUES = {"loss": 2.3456, "lr": 1e-3, "samples_per_s": 12345.6, "step_time_ms": 12.3, "mem_peak_gib": 1.25,
               "world_size": 2, "global_batch": 64}


def _time_calls(fn, n: int) -> list[float]:
    """Per-call wall time in microseconds."""
    out = []
    clock = time.perf_counter_ns
    for i in range(n):
        t0 = clock()
        fn(i)
        out.append((clock() - t0) / 1000)
    return out


def record_cost() -> list[Row]:
    from remote_runner.spools import METRICS, SpoolWriter

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        writer = SpoolWriter(os.path.join(tmp, METRICS))
        ours = _time_calls(lambda i: writer.write(dict(STEP_VALUES, step=i)), N_RECORDS)
        writer.close()
        rows += [Row("spool record write p50", percentile(ours, 50), "us", "cheapest"),
                 Row("spool record write p99", percentile(ours, 99), "us")]
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            rows.append(Row("tensorboard add_scalar", float("nan"), "us", note=f"not installed: {exc}"))
            return rows
        tb = SummaryWriter(os.path.join(tmp, "tb"))

        def tb_step(i: int) -> None:
            for key, value in STEP_VALUES.items():
                tb.add_scalar(key, value, i)

        theirs = _time_calls(tb_step, N_RECORDS)
        tb.close()
        rows += [Row("tensorboard add_scalar x7 p50", percentile(theirs, 50), "us"),
                 Row("tensorboard add_scalar x7 p99", percentile(theirs, 99), "us"),
                 Row("spool vs tensorboard (p50 ratio)", percentile(ours, 50) / percentile(theirs, 50), "x", "< 1",
                     percentile(ours, 50) < percentile(theirs, 50))]
        try:
            import wandb  # noqa: F401
        except ImportError:
            rows.append(Row("wandb offline log", float("nan"), "us", note="wandb not installed"))
    return rows


def package_cost() -> list[Row]:
    from ddpgui.core.targets.zipapp import build_bytes

    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        data = build_bytes()
        times.append((time.perf_counter() - t0) * 1000)
    return [Row("runner zipapp build", median(times), "ms"), Row("runner zipapp size", len(data) / 1024, "KiB")]


def _steady_steps_per_s(no_spool: bool, steps: int) -> float:
    """Median steps/s after warm-up of a 2-process gloo mlp run, timed by rank 0's own clock."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = {"workload": "mlp", "nproc_per_node": 2, "steps": steps, "log_every": 1, "warmup_steps": 20,
               "batch_size": 32, "run_id": "bench"}
        Path(tmp, "config.json").write_text(json.dumps(cfg))
        env = dict(os.environ, PYTHONPATH=str(REPO), DDPGUI_BENCH_TIMINGS=os.path.join(tmp, "timings.json"))
        if no_spool:
            env["DDPGUI_BENCH_NO_SPOOL"] = "1"
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        "-m", "remote_runner.train", tmp], env=env, check=True, capture_output=True, timeout=600)
        timings = json.loads(Path(tmp, "timings.json").read_text())
        return timings["steady_steps_per_s"]


def spool_overhead(pairs: int = 4, steps: int = 300) -> list[Row]:
    """Interleaved A/B runs (spool, no spool) so drift on a shared machine hits both alike."""
    with_spool, without = [], []
    for _ in range(pairs):
        with_spool.append(_steady_steps_per_s(False, steps))
        without.append(_steady_steps_per_s(True, steps))
    ratio = median(with_spool) / median(without)
    return [Row("mlp 2x gloo steps/s, spool every step", median(with_spool), "steps/s"),
            Row("mlp 2x gloo steps/s, no spool", median(without), "steps/s"),
            Row("spool overhead (steps/s ratio)", ratio, "x", ">= 0.99", ratio >= 0.99,
                f"median of {pairs} interleaved pairs")]


def run() -> list[Row]:
    return record_cost() + package_cost() + spool_overhead()
