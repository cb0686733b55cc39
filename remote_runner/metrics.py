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

METRICS = "metrics.jsonl"
TELEMETRY = "telemetry.jsonl"
EVENTS = "events.jsonl"
STDOUT = "stdout.log"
STDERR = "stderr.log"
#: The spools a follower streams, in the order it reads them.
SPOOLS = (METRICS, TELEMETRY, EVENTS, STDOUT, STDERR)
#: The spools whose lines are JSON records (the others are plain text logs).
RECORD_SPOOLS = (METRICS, TELEMETRY, EVENTS)


def last_seq(path: str) -> int:
    """The ``seq`` of the last complete record in ``path``, or -1 when there is none."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            start = max(0, size - 65536)
            fh.seek(start)
            tail = fh.read()
    except FileNotFoundError:
        return -1
    for line in reversed(tail.split(b"\n")):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("seq"), int):
            return record["seq"]
    return -1


class SpoolWriter:
    """Writes records to one spool; continues the ``seq`` of what the file already holds."""

    def __init__(self, path: str):
        self.path = path
        self._seq = last_seq(path) + 1
        self._fd: Optional[int] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def write(self, record: dict) -> int:
        """Append one record (``seq`` and ``t`` are added); returns its seq."""
        seq = self._seq
        os.write(self._fd, _encode(dict(record, seq=seq, t=round(time.time(), 6))))
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
    except ValueError:
        record = {k: clean_number(v) if isinstance(v, float) else v for k, v in record.items()}
        line = json.dumps(record, separators=(",", ":"), allow_nan=False, default=_jsonable)
    return line.encode("utf-8") + b"\n"


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


def append_event(run_dir: str, event: str, **fields: object) -> None:
    """Append one record to the run's events spool.

    Rank 0 and the supervisor both append events; an exclusive lock on the file
    makes reading the last ``seq`` and writing the next one a single step.
    """
    import fcntl

    path = os.path.join(run_dir, EVENTS)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        record = dict(fields, event=event, seq=last_seq(path) + 1, t=round(time.time(), 6))
        os.write(fd, _encode(record))
    finally:
        os.close(fd)  # closing releases the lock
