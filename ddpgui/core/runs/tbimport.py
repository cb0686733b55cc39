"""An existing TensorBoard log folder taken into the run store (``ddpgui import-tensorboard DIR``).

Each folder under DIR that holds event files is a run (DIR itself when it holds them directly), its records
read with TensorBoard's own ``event_file_loader`` and their values taken out as the host's tail reader takes
them; a folder that only adds hparams under a run's folder (PyTorch's ``SummaryWriter.add_hparams`` writes
them one level down) belongs to that run.  A run becomes a finished
run of host ``imported``: one metric record per step holding every tag at that step, ``t`` the events' wall
time, the series named, and the run's loss chosen, by the same :class:`~remote_runner.scriptread.sink.MetricSink`
that names a live script's TensorBoard tags (``train/loss`` → ``loss``, ``eval/x`` → ``eval_x``,
``learning_rate`` → ``lr``); its settings come from the folder's name (``lr=0.001,bs=32``) and its hparams.

The run's id is derived from the folder's path and its event files' names, so importing the same folder
again adds nothing.  A damaged event file does not stop the import: a last record cut short is left out, and
after a corrupt record (where TensorBoard's reader stops) the rest of the file is read past the damage;
both are said in ``warnings`` and in the run's events.
"""
from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.message import DecodeError
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto import event_pb2
from tensorboard.plugins.hparams import metadata as hparams_metadata

from remote_runner.scriptread.sink import RESERVED, MetricSink
from remote_runner.scriptread.tbevents import EventFileTail, Scalar, event_scalars, masked_crc32c
from remote_runner.spools import EVENTS, METRICS

from ..errors import HintedError
from ..store import RunNotFound, RunRecord, RunStore, StoreError
from .live import records_summary
from .protocol import Chunk

#: The host of an imported run (no profile: nothing of it lives on a host).
IMPORTED_HOST = "imported"
_SETTING = re.compile(r"^([A-Za-z_][\w.-]*)=([^=]+)$")
_PARTS = re.compile(r"[,\s/]+|_(?=[A-Za-z_][\w.-]*=)")


class TensorBoardImportError(HintedError, StoreError):
    """A folder that cannot be imported at all; ``hint`` says what to do."""


@dataclass
class ImportedRun:
    run: RunRecord
    folder: Path
    files: int
    series: int
    points: int
    settings: dict  # from the folder's name and its hparams


@dataclass
class TensorBoardImport:
    """What :func:`import_tensorboard` did: runs added, runs it had already (id, folder), folders left out
    (folder, why), and what was damaged in the files it read."""

    imported: list[ImportedRun] = field(default_factory=list)
    known: list[tuple[str, Path]] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class _CountedLoader(RawEventFileLoader):
    """TensorBoard's record loader (framing and both CRCs checked), counting the bytes of the whole records it
    gave, to see where it stopped."""

    def __init__(self, *args, **kwargs):
        self.consumed = 0
        super().__init__(*args, **kwargs)

    def Load(self):  # noqa: N802 (TensorBoard's name)
        for record in super().Load():
            self.consumed += len(record) + 16
            yield record


@dataclass
class _Folder:
    path: Path
    files: list[Path] = field(default_factory=list)
    values: dict[int, dict[str, tuple[float, float]]] = field(default_factory=dict)  # step → tag → (wall, value)
    hparams: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def add(self, step: int, wall: float, tag: str, value: float) -> None:
        at = self.values.setdefault(step, {})
        if tag not in at or wall >= at[tag][0]:  # the later write of a step wins (a resumed run)
            at[tag] = (wall, value)

    def merge(self, other: _Folder) -> None:
        self.files += other.files
        self.hparams = {**other.hparams, **self.hparams}
        self.warnings += other.warnings
        for step, tags in other.values.items():
            for tag, (wall, value) in tags.items():
                self.add(step, wall, tag, value)


def _hparam(value) -> object:
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        number = value.number_value
        return int(number) if number.is_integer() and abs(number) < 2 ** 53 else number
    if kind in ("string_value", "bool_value"):
        return getattr(value, kind)
    return None


def _read_file(folder: _Folder, path: Path) -> None:
    """Every scalar and the hparams of one event file, into ``folder``.

    The records come from TensorBoard's loader; the values are taken out as the host's tail reader takes
    them (TensorBoard's own compat layers cost four times the reading, for scalars the same)."""
    loader = _CountedLoader(str(path))
    plugins: dict[str, str] = {}
    scalars: list[Scalar] = []
    unreadable = 0
    for record in loader.Load():
        try:
            event = event_pb2.Event.FromString(record)
        except DecodeError:  # whole and its CRCs right, yet no Event: written by something else
            unreadable += 1
            continue
        found = len(scalars)
        event_scalars(event, plugins, scalars)
        if len(scalars) == found:  # hparams come in an event of their own
            for value in event.summary.value:
                if value.tag == hparams_metadata.SESSION_START_INFO_TAG and \
                        value.metadata.plugin_data.plugin_name == hparams_metadata.PLUGIN_NAME:
                    info = hparams_metadata.parse_session_start_info_plugin_data(value.metadata.plugin_data.content)
                    folder.hparams.update({k: v for k, v in ((k, _hparam(v)) for k, v in info.hparams.items())
                                           if v is not None})
    for s in scalars:
        folder.add(s.step, s.wall_time, s.tag, s.value)
    if unreadable:
        folder.warnings.append(f"{path}: {unreadable} record(s) that are no TensorBoard event were left out")
    _past_the_end(folder, path, loader.consumed)


def _past_the_end(folder: _Folder, path: Path, consumed: int) -> None:
    """TensorBoard's reader stopped at ``consumed``: before the end of the file, say why, and read past the
    damage with the host's tail reader (which resyncs to the next whole record)."""
    with path.open("rb") as fh:
        fh.seek(consumed)
        head = fh.read(12)
        size = fh.seek(0, 2)
    if size <= consumed:
        return
    framed = len(head) == 12 and masked_crc32c(head[:8]) == struct.unpack_from("<I", head, 8)[0]
    length = struct.unpack_from("<Q", head)[0] if framed else 0
    if len(head) < 12 or framed and consumed + 16 + length > size:
        folder.warnings.append(f"{path}: its last {size - consumed} bytes are a record cut short (the writer "
                               "stopped in the middle of it); the values before it are imported")
        return
    # a valid header: TensorBoard found the record's data damaged (its CRC); else the header itself is
    tail = EventFileTail(str(path), offset=consumed + 16 + length if framed else consumed)
    scalars = tail.finish()
    for s in scalars:
        folder.add(s.step, s.wall_time, s.tag, s.value)
    skipped = tail.corrupt + framed
    cut = "; its last record is cut short" if tail.truncated else ""
    folder.warnings.append(f"{path}: damaged at byte {consumed} ({skipped} damaged record(s) or stretch(es) "
                           f"skipped); {len(scalars)} value(s) after the damage were read{cut}")


def _event_folders(log_dir: Path) -> dict[Path, list[Path]]:
    found: dict[Path, list[Path]] = {}
    for path in sorted(log_dir.rglob("*tfevents*")):
        if path.is_file() and not path.name.endswith(".profile-empty"):
            found.setdefault(path.parent, []).append(path)
    return found


def _runs_of(found: dict[Path, list[Path]]) -> list[_Folder]:
    """Read every folder; fold one that only adds hparams (and their metrics) into the run folder above it."""
    folders = {}
    for path, files in found.items():
        folder = folders[path] = _Folder(path, list(files))
        for file in files:
            try:
                _read_file(folder, file)
            except OSError as exc:
                folder.warnings.append(f"{file}: cannot be read ({exc.strerror or exc}); left out")
    for path in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        folder = folders[path]
        above = next((p for p in path.parents if p in folders), None)
        if above is not None and folder.hparams:
            folders[above].merge(folders.pop(path))
    return [folders[p] for p in sorted(folders)]


def settings_from_name(name: str) -> dict:
    """``key=value`` parts of a folder name (``lr=0.001,bs=32``, ``lr=0.1_bs=64``, nested ``lr=0.1/seed=2``),
    numbers as numbers."""
    out: dict = {}
    for part in _PARTS.split(name):
        match = _SETTING.match(part)
        if match:
            text = match.group(2)
            try:
                value: object = int(text)
            except ValueError:
                try:
                    value = float(text)
                except ValueError:
                    value = text
            out[match.group(1)] = value
    return out


def run_id_of(folder: Path, files: list[Path]) -> str:
    """The stable id of an imported folder: its absolute path and its event files' names."""
    key = "\0".join([str(folder), *sorted(str(f.relative_to(folder)) for f in files)])
    return "tb-" + hashlib.sha256(key.encode()).hexdigest()[:12]


class _Records:
    """The sink's writer and event callback: the records and events of one imported run, numbered."""

    def __init__(self, t0: float):
        self.metrics: list[dict] = []
        self.events: list[dict] = []
        self.t0 = t0

    def write(self, record: dict, t: float | None = None) -> None:
        self.metrics.append({"seq": len(self.metrics), "t": self.t0 if t is None else t, **record})

    def event(self, event: str, /, **fields) -> None:  # positional: a series event has a field "name"
        self.events.append({"seq": len(self.events), "t": self.t0, "event": event, **fields})


def _jsonl(records: list[dict]) -> bytes:
    return b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records)


def _store(store: RunStore, log_dir: Path, folder: _Folder, run_id: str) -> ImportedRun:
    walls = [wall for tags in folder.values.values() for wall, _ in tags.values()]
    t0, t1 = min(walls), max(walls)
    records = _Records(t0)
    sink = MetricSink(records, records.event)
    for file in folder.files:
        sink.file_found(str(file), "tensorboard", True)
    for step in sorted(folder.values):
        tags = folder.values[step]
        sink.logged("tensorboard", str(folder.path), step, {tag: value for tag, (_, value) in tags.items()},
                    t=min(wall for wall, _ in tags.values()))
    sink.release(everything=True)  # the file's first values wait for a printed source: there is none here
    for message in folder.warnings:
        records.event("warning", message=message, source="import")
    name = folder.path.relative_to(log_dir).as_posix() if folder.path != log_dir else log_dir.name
    settings = {**settings_from_name(name), **folder.hparams}
    config = {**settings, "name": name, "mode": "imported"}
    environment = {"imported_from": str(folder.path), "format": "tensorboard",
                   "event_files": [str(f.relative_to(folder.path)) for f in folder.files]}
    store.create_run(run_id, name=name, hosts=[IMPORTED_HOST], config=config, environment=environment,
                     state="importing", created_at=t0)
    try:
        metrics, events = _jsonl(records.metrics), _jsonl(records.events)
        store.store_chunks(run_id, 0, [Chunk(METRICS, 0, len(metrics), metrics), Chunk(EVENTS, 0, len(events), events)])
        message = f"imported from {folder.path}" + (f" ({len(folder.warnings)} damaged file(s))"
                                                    if folder.warnings else "")
        run = store.update_run(run_id, state="finished", started_at=t0, ended_at=t1, message=message,
                               summary=records_summary(store, run_id))
    except BaseException:
        store.delete_run(run_id)
        raise
    series = sum(1 for e in records.events if e["event"] == "series" and "also" not in e)
    points = sum(1 for r in records.metrics for k, v in r.items() if k not in RESERVED and v is not None)
    return ImportedRun(run, folder.path, len(folder.files), series, points, settings)


def import_tensorboard(store: RunStore, log_dir: str | Path) -> TensorBoardImport:
    """Add the runs of the TensorBoard log folder ``log_dir`` that the store lacks (see the module's docstring)."""
    log_dir = Path(log_dir).expanduser().resolve()
    if not log_dir.is_dir():
        raise TensorBoardImportError(f"{log_dir} is not a folder", "give the folder TensorBoard's --logdir names "
                                                                   "(the one SummaryWriter wrote its runs under)")
    found = _event_folders(log_dir)
    if not found:
        raise TensorBoardImportError(f"no TensorBoard event files (events.out.tfevents.*) under {log_dir}",
                                     "give the folder TensorBoard's --logdir names (the one SummaryWriter wrote "
                                     "its runs under)")
    result = TensorBoardImport()
    for folder in _runs_of(found):
        result.warnings += folder.warnings
        run_id = run_id_of(folder.path, folder.files)
        try:
            store.get_run(run_id)
            result.known.append((run_id, folder.path))
            continue
        except RunNotFound:
            pass
        if not folder.values:
            result.skipped.append((folder.path, "its event files hold no scalar values"))
            continue
        result.imported.append(_store(store, log_dir, folder, run_id))
    return result
