"""Stored runs as a TensorBoard log folder that TensorBoard itself opens (``ddpgui export --format tensorboard``).

One subfolder per run, named ``<run name>-<run id>`` (readable, and unique by the id); in it one event file,
written with TensorBoard's own record writer (under a temp name, then renamed: a failed export leaves no part),
that holds every metric series of the run as scalars at the record's ``step`` and wall time ``t`` (new-style,
double precision: the stored value exactly), and the run's simple settings as TensorBoard hparams (the HParams
dashboard lists the runs with them)::

    written = export_tensorboard(store, run_ids, "tb_out")    # then: tensorboard --logdir tb_out
"""
from __future__ import annotations

import math
import os
import re
import socket
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
from tensorboard.plugins.hparams import summary_v2 as hparams_summary
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.summary.writer.record_writer import RecordWriter

from remote_runner.scriptread.sink import RESERVED

from ..store import RunRecord, RunStore
from .files import output_file, output_folder

#: Keys of a metric record that are its bookkeeping, not a series (the sink's, and the built-in workloads').
NOT_SERIES = frozenset(RESERVED) | {"global_batch", "warmup"}
#: Config keys that name the run rather than set it: not hparams.
NOT_HPARAMS = frozenset({"schema", "run_id", "name", "tags"})
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]+")


def run_folder_name(run: RunRecord) -> str:
    """``<name>-<id>``: the run's name with anything but letters, digits and ``._=,+-`` made ``_``."""
    name = _UNSAFE.sub("_", run.name).strip("_.")[:80]
    return f"{name}-{run.id}" if name else run.id


def hparams_of(config: dict) -> dict:
    """The run's settings TensorBoard's hparams can hold: numbers, strings and bools, a nested dict's one level
    down as ``key.sub`` (a script's ``script.entry``); lists and None are left out."""
    out: dict = {}
    for key, value in config.items():
        if key in NOT_HPARAMS:
            continue
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, v in items:
            if isinstance(v, (bool, int, float, str)) and not (isinstance(v, float) and not math.isfinite(v)):
                out[key if sub is None else f"{key}.{sub}"] = v
    return out


def _scalar_value(tag: str, value: float, first: bool) -> summary_pb2.Summary.Value:
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, double_val=[value])
    metadata = scalar_metadata.create_summary_metadata(display_name=tag, description="") if first else None
    return summary_pb2.Summary.Value(tag=tag, tensor=tensor, metadata=metadata)


def write_run(store: RunStore, run: RunRecord, folder: Path) -> int:
    """Write one run's event file into ``folder`` (replacing an earlier export's); returns the scalars written."""
    folder = output_folder(folder)
    metrics = store.series(run.id)
    steps, times = metrics.get("step"), metrics.get("t")
    series = sorted(k for k, v in metrics.items() if k not in NOT_SERIES and v.dtype.kind == "f")
    # named as TensorBoard's EventFileWriter names its files
    path = folder / f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.ddpgui"
    written = 0
    with output_file(path, "wb") as fh:
        writer = RecordWriter(fh)
        writer.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
        hparams = hparams_of(run.config)
        if hparams:
            start = float(times[0]) if times is not None and len(times) else run.created_at
            writer.write(event_pb2.Event(wall_time=start, step=0, summary=hparams_summary.hparams_pb(
                hparams, trial_id=run.id, start_time_secs=int(start))).SerializeToString())
        if steps is not None and series:
            columns = np.column_stack([metrics[k] for k in series])
            seen: set[str] = set()
            for i in np.flatnonzero(np.isfinite(steps)):
                values = []
                for tag, value in zip(series, columns[i]):
                    if not math.isnan(value):
                        values.append(_scalar_value(tag, float(value), tag not in seen))
                        seen.add(tag)
                if values:
                    writer.write(event_pb2.Event(wall_time=float(times[i]), step=int(steps[i]),
                                                 summary=summary_pb2.Summary(value=values)).SerializeToString())
                    written += len(values)
    for old in folder.glob("events.out.tfevents.*"):
        if old != path:
            old.unlink()
    return written


def export_tensorboard(store: RunStore, run_ids: Sequence[str], out_dir: str | Path) -> dict[Path, int]:
    """Write each run's subfolder of the TensorBoard log folder ``out_dir``; returns subfolder → scalars written."""
    out = Path(out_dir)
    written = {}
    for run_id in run_ids:
        run = store.get_run(run_id)
        folder = out / run_folder_name(run)
        written[folder] = write_run(store, run, folder)
    return written
