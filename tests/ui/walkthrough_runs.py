"""A sweep's runs as the walk-through of issue 24 left them, built from synthetic records in a real RunStore:
long sweep run names, finished runs with metrics, a failed run that never reached its first step, a running one."""
from helpers.stored_runs import put_spool, store_run

from ddpgui.core.store import SweepCell, SweepRecord

T0 = 1_764_500_000.0
SWEEP_NAME = "compile×precision sweep 2025-11-30 14:22"
#: (compile, precision, repeat, state) of each cell, in the sweep's order.
CELLS = [(c, p, r, "finished") for r in (1, 2) for c in ("off", "default") for p in ("fp32", "bf16")]
CELLS[-1] = ("default", "bf16", 2, "failed")
GLOBAL_BATCH = 64


def run_name(compile_mode: str, precision: str, repeat: int) -> str:
    """A sweep run's name as the sweep runner gives it: ``SWEEP: compile=off precision=fp32 #1``."""
    return f"{SWEEP_NAME}: compile={compile_mode} precision={precision} #{repeat}"


def metrics(n: int = 50, scale: float = 1.0, rate: float = 6400.0, t0: float = T0) -> list[dict]:
    """Training records every 0.01 s of host time at ``rate`` samples/s (global batch 64), the first two warm-up."""
    dt = GLOBAL_BATCH / rate
    return [{"t": t0 + 1 + dt * i, "phase": "train", "step": i + 1, "loss": scale / (i + 1) + 0.01,
             "samples_per_s": rate, "global_batch": GLOBAL_BATCH, "warmup": i < 2} for i in range(n)]


def store_sweep(store, running: bool = True) -> tuple[SweepRecord, list[str]]:
    """The sweep's record, its cells and their runs (the last cell failed before its first step; with
    ``running`` one more cell is running); returns the sweep and its run ids in order."""
    sweep = SweepRecord(id="sw1", name=SWEEP_NAME, hosts=["local"], base={"workload": "mlp", "steps": 200},
                        matrix={"compile": ["off", "default"], "precision": ["fp32", "bf16"]}, repeats=2,
                        state="running" if running else "done")
    cells, ids = [], []
    for index, (compile_mode, precision, repeat, state) in enumerate(CELLS):
        run_id = f"r{index}"
        config = {"name": run_name(compile_mode, precision, repeat), "workload": "mlp", "compile": compile_mode,
                  "precision": precision, "nproc_per_node": 2, "batch_size": 32, "steps": 200}
        t0 = T0 + 100 * index
        if state == "failed":
            events = [{"event": "started", "t": t0}, {"event": "failed", "t": t0 + 3,
                                                      "message": "RuntimeError: mat1 and mat2 shapes cannot be "
                                                                 "multiplied (32x100 and 128x64)"}]
            store_run(store, run_id, config, events=events, state="failed")
            store.update_run(run_id, message="RuntimeError: mat1 and mat2 shapes cannot be multiplied",
                             hint="see the log")
            put_spool(store, run_id, "stderr.log", b"Traceback (most recent call last):\n  File \"train.py\", "
                      b"line 88, in <module>\n" + b"    loss = model(x)  # " + b"x" * 300 + b"\nRuntimeError: mat1 "
                      b"and mat2 shapes cannot be multiplied (32x100 and 128x64)\n")
        else:
            events = [{"event": "started", "t": t0}, {"event": "train_start", "t": t0 + 0.5},
                      {"event": "finished", "t": t0 + 6}]
            store_run(store, run_id, config, metrics(scale=1.0 + 0.2 * index, rate=6400 + 40 * index, t0=t0),
                      events=events)
            store.update_run(run_id, summary={"steady_samples_per_s": 6400.0 + 40 * index + 0.123,
                                              "mem_peak_gib": 0.78, "final_loss": 0.03})
        ids.append(run_id)
        cells.append(SweepCell(sweep_id=sweep.id, index=index, label=f"compile={compile_mode} precision={precision} "
                               f"#{repeat}", host="local", settings=config, repeat=repeat - 1, run_id=run_id,
                               state="done" if state == "finished" else "failed"))
    store.create_sweep(sweep, cells)
    return sweep, ids
