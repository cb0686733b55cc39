"""Append-only JSONL spools: one record per line, a monotone ``seq`` and a wall-clock ``t``.

A record is one ``os.write`` of a complete line on a file opened with O_APPEND:
no fsync, no buffering that would hold a record back from a follower, and a
reader never sees half a record from us (it may see one from a crash, which the
follower skips and counts).
"""
import json
import os
import time
from typing import Optional

from .fsutil import NO_SPACE
from .status import FINAL_STATES, release_reserve

METRICS = "metrics.jsonl"
TELEMETRY = "telemetry.jsonl"
EVENTS = "events.jsonl"
STDOUT = "stdout.log"
STDERR = "stderr.log"
#: The spools a follower streams, in the order it reads them.
SPOOLS = (METRICS, TELEMETRY, EVENTS, STDOUT, STDERR)
#: The spools whose lines are JSON records (the others are plain text logs).
RECORD_SPOOLS = (METRICS, TELEMETRY, EVENTS)


def last_record(path: str, block: int = 65536) -> Optional[dict]:
    """The last complete record (a JSON object with an int ``seq``) in ``path``, or None when there is none.

    Reads backwards from the end, a block at a time, until a whole line that is
    a record is found: a line longer than a block, or a corrupt line, never
    hides the records before it (so the ``seq`` stays monotone).
    """
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return None
    with fh:
        pos = fh.seek(0, os.SEEK_END)
        tail = b""  # bytes from ``pos`` up to the start of the last line already tried
        while True:
            cut = tail.rfind(b"\n")
            while cut >= 0:  # tail[cut + 1:] is a whole line (or the unterminated end of the file)
                line, tail = tail[cut + 1:], tail[:cut]
                record = _record_of(line)
                if record is not None:
                    return record
                cut = tail.rfind(b"\n")
            if pos == 0:
                return _record_of(tail)
            step = min(block, pos)
            pos -= step
            fh.seek(pos)
            tail = fh.read(step) + tail
            block *= 2  # a very long line costs a few reads, not one per 64 KiB


def _record_of(line: bytes) -> Optional[dict]:
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and type(record.get("seq")) is int else None


def last_seq(path: str) -> int:
    """The ``seq`` of the last complete record in ``path``, or -1 when there is none."""
    record = last_record(path)
    return record["seq"] if record is not None else -1


class SpoolWriter:
    """Writes records to one spool; continues the ``seq`` of what the file already holds."""

    def __init__(self, path: str):
        self.path = path
        self._seq = last_seq(path) + 1
        self._fd: Optional[int] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def write(self, record: dict, t: Optional[float] = None) -> int:
        """Append one record (``seq`` and ``t`` are added: ``t`` now, unless the value's own wall time is
        given, as a TensorBoard event has it); returns its seq."""
        seq = self._seq
        os.write(self._fd, _encode(dict(record, seq=seq, t=round(time.time() if t is None else t, 6))))
        self._seq = seq + 1
        return seq

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "SpoolWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _encode(record: dict) -> bytes:
    """One JSONL line; NaN and infinities (a diverged loss) become null."""
    try:
        line = json.dumps(record, separators=(",", ":"), allow_nan=False, default=_jsonable)
    except ValueError:  # a NaN or infinity somewhere, at any depth, or behind a numpy/torch scalar
        line = json.dumps(_finite(record), separators=(",", ":"), allow_nan=False, default=_jsonable)
    return line.encode("utf-8") + b"\n"


def _finite(value: object) -> object:
    """``value`` with every NaN and infinity, at any depth, as None (numpy/torch scalars as plain values)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float):
        return clean_number(value)
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    item = getattr(value, "item", None)
    return _finite(item()) if callable(item) else value


def _jsonable(value: object) -> object:
    """Numbers that JSON cannot hold (NaN, inf) and numpy/torch scalars become plain values."""
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    return str(value)


def clean_number(value: Optional[float]) -> Optional[float]:
    """A float JSON can carry: NaN and infinities become None (null)."""
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return None
    return float(value)


#: Events that end a run: a run's events spool holds at most one, its last.
FINAL_EVENTS = FINAL_STATES


def append_event(run_dir: str, event: str, **fields: object) -> bool:
    """Append one record to the run's events spool; returns whether it was written.

    Rank 0 and the supervisor both append events; an exclusive lock on the file
    makes reading the last ``seq`` and writing the next one a single step.  A
    final event (``FINAL_EVENTS``) after one is already there is not written
    again: whoever records a run's end (the supervisor, ``stop``, a follower's
    reconcile that could not replace status.json) may try more than once.
    """
    import fcntl

    path = os.path.join(run_dir, EVENTS)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        last = last_record(path) or {}
        if event in FINAL_EVENTS and last.get("event") in FINAL_EVENTS:
            return False
        record = _encode(dict(fields, event=event, seq=last.get("seq", -1) + 1, t=round(time.time(), 6)))
        _write_all(fd, record, run_dir)
        return True
    finally:
        os.close(fd)  # closing releases the lock


def _write_all(fd: int, data: bytes, run_dir: str) -> None:
    """Write all of ``data``; on a full disk the run's reserve is freed once to make room for it."""
    view, freed = memoryview(data), False
    while view:
        try:
            view = view[os.write(fd, view):]
        except OSError as exc:
            if exc.errno not in NO_SPACE or freed or not release_reserve(run_dir):
                raise
            freed = True
