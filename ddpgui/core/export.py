"""Exports of stored runs: tidy CSV (one row per point)."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from .store import RunStore

#: Keys of a record that identify it rather than measure something.
ID_KEYS = {"seq", "t", "step", "epoch", "phase", "precision", "kind", "gpu", "name", "warmup", "world_size",
           "global_batch"}


def _numeric_columns(series: dict[str, np.ndarray]) -> list[str]:
    return sorted(k for k, v in series.items() if k not in ID_KEYS and v.dtype.kind == "f")


def export_csv(store: RunStore, run_ids: list[str], out_dir: Path) -> list[Path]:
    """``points.csv`` (run, step, time, wall_time, metric, value) and ``telemetry.csv`` per sample and GPU.

    ``time`` is seconds since the run's first record, ``wall_time`` Unix seconds. Missing values are not
    written (tidy data has no empty cells).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    points, telemetry = out_dir / "points.csv", out_dir / "telemetry.csv"
    with points.open("w", newline="") as pf, telemetry.open("w", newline="") as tf:
        pw, tw = csv.writer(pf), csv.writer(tf)
        pw.writerow(["run", "name", "step", "time", "wall_time", "phase", "metric", "value"])
        tw.writerow(["run", "node", "time", "wall_time", "kind", "gpu", "metric", "value"])
        for run_id in run_ids:
            run = store.get_run(run_id)
            metrics = store.series(run_id)
            if metrics.get("t") is not None and len(metrics["t"]):
                t0 = float(metrics["t"][0])
                phases = metrics.get("phase")
                for key in _numeric_columns(metrics):
                    values = metrics[key]
                    for i in np.flatnonzero(~np.isnan(values)):
                        step = metrics["step"][i] if "step" in metrics else math.nan
                        pw.writerow([run_id, run.name, "" if math.isnan(step) else int(step),
                                     f"{metrics['t'][i] - t0:.3f}", f"{metrics['t'][i]:.3f}",
                                     phases[i] if phases is not None and phases[i] is not None else "",
                                     key, repr(float(values[i]))])
            for node in sorted({0, *map(int, run.run_dirs)}):
                tel = store.series(run_id, "telemetry.jsonl", node)
                if tel.get("t") is None or not len(tel["t"]):
                    continue
                t0 = float(tel["t"][0])
                kinds, gpus = tel.get("kind"), tel.get("gpu")
                for key in _numeric_columns(tel):
                    values = tel[key]
                    for i in np.flatnonzero(~np.isnan(values)):
                        gpu = "" if gpus is None or math.isnan(gpus[i]) else int(gpus[i])
                        tw.writerow([run_id, node, f"{tel['t'][i] - t0:.3f}", f"{tel['t'][i]:.3f}",
                                     kinds[i] if kinds is not None else "", gpu, key, repr(float(values[i]))])
    return [points, telemetry]
