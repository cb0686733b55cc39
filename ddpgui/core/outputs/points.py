"""The tidy points CSV of stored runs: one row per logged value (points.csv), telemetry in its own (telemetry.csv),
where each series came from in a third (series.csv)."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from remote_runner.spools import TELEMETRY

from ..runs.series import series_info
from ..store import RunStore
from .files import output_file, output_folder

#: Keys of a record that identify it rather than measure something.
ID_KEYS = {"seq", "t", "step", "epoch", "phase", "precision", "kind", "gpu", "name", "warmup", "world_size",
           "global_batch", "bar_total", "eta_s"}


def _points(series: dict[str, np.ndarray]):
    """(row, metric, value, seconds since the first row) for every value a record holds, metric by metric."""
    t = series.get("t")
    if t is None or not len(t):
        return
    elapsed = t - t[0]
    for key in sorted(k for k, v in series.items() if k not in ID_KEYS and v.dtype.kind == "f"):
        values = series[key]
        for i in np.flatnonzero(~np.isnan(values)):
            yield i, key, repr(float(values[i])), f"{elapsed[i]:.3f}"


def _cell(column: np.ndarray | None, i: int) -> object:
    """A string column's value, or "" where it has none."""
    return "" if column is None or column[i] is None else column[i]


def write_points_csv(store: RunStore, run_ids: list[str], out_dir: Path) -> list[Path]:
    """``points.csv`` (run, step, time, wall_time, metric, value), ``telemetry.csv`` per sample and GPU, and
    ``series.csv`` (:func:`write_series_csv`).

    ``time`` is seconds since the run's first record, ``wall_time`` Unix seconds. Missing values are not
    written (tidy data has no empty cells).
    """
    out_dir = output_folder(out_dir)
    points, telemetry = out_dir / "points.csv", out_dir / "telemetry.csv"
    runs = [store.get_run(run_id) for run_id in run_ids]
    with output_file(points, newline="") as fh:  # one file at a time: a failure names the file it was writing
        writer = csv.writer(fh)
        writer.writerow(["run", "name", "step", "time", "wall_time", "phase", "metric", "value"])
        for run in runs:
            metrics = store.series(run.id)
            steps = metrics.get("step")
            for i, key, value, elapsed in _points(metrics):
                step = "" if steps is None or math.isnan(steps[i]) else int(steps[i])
                writer.writerow([run.id, run.name, step, elapsed, f"{metrics['t'][i]:.3f}",
                                 _cell(metrics.get("phase"), i), key, value])
    with output_file(telemetry, newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["run", "node", "time", "wall_time", "kind", "gpu", "metric", "value"])
        for run in runs:
            for node in run.nodes:
                tel = store.series(run.id, TELEMETRY, node)
                gpus = tel.get("gpu")
                for i, key, value, elapsed in _points(tel):
                    gpu = "" if gpus is None or math.isnan(gpus[i]) else int(gpus[i])
                    writer.writerow([run.id, node, elapsed, f"{tel['t'][i]:.3f}", _cell(tel.get("kind"), i), gpu,
                                     key, value])
    return [points, telemetry, write_series_csv(store, run_ids, out_dir)]


def write_series_csv(store: RunStore, run_ids: list[str], out_dir: Path) -> Path:
    """``series.csv``: per run and series (``metric`` as in points.csv; ``loss`` is the run's loss) where it came
    from (``source``: "progress bar (stderr)", "TensorBoard tag train/loss"), the name the script gave it
    (``from``), the other sources that gave it too (``also``), its log file (``file``) and its ``points``."""
    path = out_dir / "series.csv"
    with output_file(path, newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["run", "metric", "source", "from", "also", "file", "points"])
        for run_id in run_ids:
            for info in series_info(store, run_id):
                if info.name not in ID_KEYS:
                    writer.writerow([run_id, info.name, info.source, info.from_ or "", "; ".join(info.also),
                                     info.file or "", info.points])
    return path
