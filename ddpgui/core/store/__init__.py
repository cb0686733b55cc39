"""The run store: one SQLite file (WAL) holding runs, their records, events, log tails and spool offsets.

Exactly once: a chunk of a spool is stored together with the spool's byte offset
after it in one transaction, so after any crash the store resumes from exactly
what it holds (docs/PROTOCOL.md, "The follow stream").

Metric and telemetry records are stored in columnar *blocks*: the records of a
stored chunk become one row whose payload holds one numpy array per key (see
:func:`encode_block`).  A row per (step, metric) would cap inserts at a few
thousand records per second in Python's sqlite3 and make loading 10^7 points take
seconds; a block is one INSERT and loads with ``np.frombuffer``.  A run that logs
slowly leaves many tiny blocks, so they are merged into big ones (*compaction*)
once :data:`COMPACT_AFTER` accumulate and when the run ends.

Threads: every thread gets its own connection (WAL lets readers run while the
follower writes); writers in this process also take a lock so they queue here
instead of spinning in SQLite's busy handler.
"""
from __future__ import annotations

import json
import math
import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from remote_runner.spools import EVENTS, METRICS, RECORD_SPOOLS, SPOOLS
from remote_runner.status import FINAL_STATES

from ..paths import data_dir
from ..runs.protocol import Chunk, parse_records

STORE_FILE = "runs.sqlite3"
#: A block with fewer records than this is "small": it gets merged with its neighbours.
SMALL_BLOCK = 4096
#: Merge a spool's small blocks once this many have accumulated.
COMPACT_AFTER = 64
#: Bytes of stdout/stderr kept per run, node and spool (the newest ones).
LOG_TAIL_BYTES = 1 << 20
#: A log tail is stored in pieces of up to this many bytes.
LOG_PIECE = 64 << 10
#: Pages of 16 KiB: big blocks span fewer overflow pages (faster loads) while a
#: small commit still writes little to the WAL.  Only applies to a new file.
PAGE_SIZE = 16384
#: ``seq`` of the events the client adds itself (warnings about skipped lines).
CLIENT_SEQ = -1


class StoreError(Exception):
    """The run store cannot do what was asked; the message says why and what to do."""


class StoreCorruptError(StoreError):
    """The store file is not a readable ddpgui run store."""


class StoreVersionError(StoreError):
    """The store file was written by a newer ddpgui."""


class StoreGapError(StoreError):
    """A chunk starts after the end of the data before it: bytes in between would be lost.

    Nothing of the call that raised it is stored; follow again from ``offset`` (what the store holds).
    """

    def __init__(self, run_id: str, node: int, spool: str, offset: int, start: int):
        super().__init__(f"run {run_id} node {node} {spool}: a chunk starts at byte {start}, after the end of the data "
                         f"before it; nothing was stored, follow again from the stored offset {offset}")
        self.run_id, self.node, self.spool, self.offset, self.start = run_id, node, spool, offset, start


class SweepNotFound(StoreError, KeyError):
    def __init__(self, sweep_id: str):
        super().__init__(f"no sweep {sweep_id!r} in the run store")
        self.sweep_id = sweep_id

    def __str__(self) -> str:
        return self.args[0]


class RunNotFound(StoreError, KeyError):
    def __init__(self, run_id: str):
        super().__init__(f"no run {run_id!r} in the run store")
        self.run_id = run_id

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return self.args[0]


@dataclass
class StoreResult:
    """What storing chunks did.

    ``records``: records stored; ``corrupt``: lines skipped because they are not
    records (not JSON objects, or without an integer ``seq``); ``skipped``: chunks
    that were already stored (a replay); ``duplicates``: records dropped because
    their ``seq`` was not above the last stored one; ``new``: spool → the records
    stored, in order (what a live view appends; log spools are not listed).
    """

    records: int = 0
    corrupt: int = 0
    skipped: int = 0
    duplicates: int = 0
    new: dict[str, list[dict]] = field(default_factory=dict)


@dataclass
class RunRecord:
    """One row of ``runs``; JSON columns decoded (``run_dirs`` keyed by node index)."""

    id: str
    name: str = ""
    tags: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    host: str = ""
    config: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    run_dirs: dict[int, str] = field(default_factory=dict)
    state: str = "created"
    message: str = ""
    hint: str = ""
    failure: str | None = None
    failed_rank: int | None = None
    exit_code: int | None = None
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    summary: dict = field(default_factory=dict)
    sweep_id: str | None = None
    total_steps: int | None = None
    last_step: int | None = None
    corrupt_lines: int = 0
    updated_at: float = 0.0

    @property
    def active(self) -> bool:
        return self.state not in FINAL_STATES

    @property
    def nodes(self) -> list[int]:
        """Its node indexes: 0 always (a run not launched yet has no run dir), then every node with a run dir."""
        return sorted({0, *map(int, self.run_dirs)})


_RUN_COLUMNS = tuple(f.name for f in fields(RunRecord))
_JSON_COLUMNS = frozenset({"tags", "hosts", "config", "environment", "run_dirs", "summary"})
_UPDATABLE = frozenset(_RUN_COLUMNS) - {"id", "created_at", "updated_at"}


#: A sweep's states; ``stopping`` only while a stop is ending its running cells.
SWEEP_FINAL_STATES = ("done", "failed", "stopped", "cancelled")
#: A sweep cell's states.
CELL_FINAL_STATES = ("done", "failed", "skipped", "cancelled")


@dataclass
class SweepRecord:
    """One row of ``sweeps``: the matrix and how it is run (its cells are :class:`SweepCell` rows)."""

    id: str
    name: str = ""
    hosts: list[str] = field(default_factory=list)
    base: dict = field(default_factory=dict)
    matrix: dict[str, list] = field(default_factory=dict)
    repeats: int = 1
    parallel: bool = False
    seeds: str = ""
    state: str = "queued"
    message: str = ""
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    updated_at: float = 0.0

    @property
    def active(self) -> bool:
        return self.state not in SWEEP_FINAL_STATES


@dataclass
class SweepCell:
    """One run of a sweep: its settings (for make_config), its host, and the run it got (the latest)."""

    sweep_id: str
    index: int
    label: str = ""
    host: str = ""
    settings: dict = field(default_factory=dict)
    repeat: int = 0
    run_id: str | None = None
    state: str = "pending"
    reason: str = ""
    hint: str = ""
    started_at: float | None = None
    ended_at: float | None = None
    updated_at: float = 0.0


_SWEEP_COLUMNS = tuple(f.name for f in fields(SweepRecord))
_CELL_COLUMNS = tuple(f.name for f in fields(SweepCell))
_SWEEP_JSON = frozenset({"hosts", "base", "matrix"})


# --------------------------------------------------------------------------------------------------
# Schema and migrations


def _v1(conn: sqlite3.Connection) -> None:
    for sql in (
        """CREATE TABLE runs (
            id TEXT PRIMARY KEY, name TEXT NOT NULL DEFAULT '', tags TEXT NOT NULL DEFAULT '[]',
            hosts TEXT NOT NULL DEFAULT '[]', host TEXT NOT NULL DEFAULT '', config TEXT NOT NULL DEFAULT '{}',
            environment TEXT NOT NULL DEFAULT '{}', run_dirs TEXT NOT NULL DEFAULT '{}',
            state TEXT NOT NULL DEFAULT 'created', message TEXT NOT NULL DEFAULT '', hint TEXT NOT NULL DEFAULT '',
            failure TEXT, failed_rank INTEGER, exit_code INTEGER,
            created_at REAL NOT NULL, started_at REAL, ended_at REAL, summary TEXT NOT NULL DEFAULT '{}',
            sweep_id TEXT, total_steps INTEGER, last_step INTEGER, corrupt_lines INTEGER NOT NULL DEFAULT 0,
            updated_at REAL NOT NULL)""",
        "CREATE INDEX runs_by_created ON runs(created_at)",
        "CREATE INDEX runs_by_state ON runs(state)",
        "CREATE INDEX runs_by_sweep ON runs(sweep_id)",
        # One row per stored chunk (or merged chunks) of a record spool: see encode_block.
        """CREATE TABLE blocks (
            id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, node INTEGER NOT NULL, spool TEXT NOT NULL,
            first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, n INTEGER NOT NULL, payload BLOB NOT NULL)""",
        "CREATE INDEX blocks_by_seq ON blocks(run_id, spool, node, first_seq)",
        # source 'host': a record of events.jsonl; 'client': added by ddpgui (seq -1).
        """CREATE TABLE events (
            id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, node INTEGER NOT NULL, seq INTEGER NOT NULL,
            t REAL, event TEXT, source TEXT NOT NULL DEFAULT 'host', record TEXT NOT NULL)""",
        "CREATE INDEX events_by_run ON events(run_id, node, seq)",
        "CREATE TABLE logs (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, node INTEGER NOT NULL, "
        "spool TEXT NOT NULL, data BLOB NOT NULL)",
        "CREATE INDEX logs_by_run ON logs(run_id, node, spool, id)",
        # The byte offset stored so far per spool, and the last stored seq (record spools; -1 before any).
        """CREATE TABLE offsets (
            run_id TEXT NOT NULL, node INTEGER NOT NULL, spool TEXT NOT NULL, offset INTEGER NOT NULL,
            last_seq INTEGER NOT NULL DEFAULT -1, PRIMARY KEY (run_id, node, spool)) WITHOUT ROWID""",
    ):
        conn.execute(sql)


def _v2(conn: sqlite3.Connection) -> None:
    """Sweeps: the matrix and its state, and one row per cell (``runs.sweep_id`` points back)."""
    conn.execute("""CREATE TABLE sweeps (
        id TEXT PRIMARY KEY, name TEXT NOT NULL DEFAULT '', hosts TEXT NOT NULL DEFAULT '[]',
        base TEXT NOT NULL DEFAULT '{}', matrix TEXT NOT NULL DEFAULT '{}', repeats INTEGER NOT NULL DEFAULT 1,
        parallel INTEGER NOT NULL DEFAULT 0, seeds TEXT NOT NULL DEFAULT '', state TEXT NOT NULL DEFAULT 'queued',
        message TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL, started_at REAL, ended_at REAL,
        updated_at REAL NOT NULL)""")
    conn.execute("""CREATE TABLE sweep_cells (
        sweep_id TEXT NOT NULL, "index" INTEGER NOT NULL, label TEXT NOT NULL DEFAULT '',
        host TEXT NOT NULL DEFAULT '', settings TEXT NOT NULL DEFAULT '{}', repeat INTEGER NOT NULL DEFAULT 0,
        run_id TEXT, state TEXT NOT NULL DEFAULT 'pending', reason TEXT NOT NULL DEFAULT '',
        hint TEXT NOT NULL DEFAULT '', started_at REAL, ended_at REAL, updated_at REAL NOT NULL,
        PRIMARY KEY (sweep_id, "index")) WITHOUT ROWID""")


#: Migration i brings a store from schema version i to i + 1.  Append, never edit or reorder.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1, _v2]

_DATA_TABLES = ("blocks", "events", "logs", "offsets")


# --------------------------------------------------------------------------------------------------
# Columnar blocks

class _Missing:
    """The key is absent from the record (unlike JSON null, which is ``None``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()
TAG_MISSING, TAG_NULL, TAG_FLOAT, TAG_INT, TAG_BOOL = range(5)
_TAG_OF_TYPE = {_Missing: TAG_MISSING, type(None): TAG_NULL, float: TAG_FLOAT, int: TAG_INT, bool: TAG_BOOL}
_FROM_TAG: tuple[Callable[[Any], Any], ...] = (lambda v: MISSING, lambda v: None, float, int, bool)
_NUM_TYPES = frozenset(_TAG_OF_TYPE)
_EXACT_INT = 2 ** 53
_F8, _I8, _U1, _I4 = np.dtype("<f8"), np.dtype("<i8"), np.dtype("u1"), np.dtype("<i4")
_MAGIC = b"DDPB"
_FORMAT = 1
_PREAMBLE = struct.Struct("<4sII")  # magic, format version, header length


@dataclass
class _Column:
    """One key of a block.

    ``num``: ``data`` holds the values (float64, int64 or uint8 for bools) and
    ``tag`` the JSON type of every row (an int when all rows share it, else a
    uint8 array: TAG_MISSING, TAG_NULL, TAG_FLOAT, TAG_INT, TAG_BOOL).
    ``str``: ``data`` holds int32 codes into ``items`` (-1 absent, -2 null).
    ``json``: ``data`` is a uint8 presence mask and ``items`` the present values.
    """

    enc: str
    data: np.ndarray
    tag: int | np.ndarray = TAG_FLOAT
    items: list | None = None

    def tags(self, n: int) -> np.ndarray:
        return np.full(n, self.tag, _U1) if isinstance(self.tag, int) else self.tag

    def to_list(self) -> list:
        """Python values per row, MISSING where the record lacks the key."""
        if self.enc == "num":
            values = self.data.tolist()
            if isinstance(self.tag, int):
                if self.tag == TAG_FLOAT or (self.tag == TAG_INT and self.data.dtype == _I8):
                    return values
                convert = _FROM_TAG[self.tag]
                return [convert(v) for v in values]
            return [_FROM_TAG[t](v) for t, v in zip(self.tag.tolist(), values)]
        if self.enc == "str":
            table = self.items + [None, MISSING]  # code -2 → None, -1 → MISSING
            return [table[c] for c in self.data.tolist()]
        present = iter(self.items)
        return [next(present) if p else MISSING for p in self.data.tolist()]

    def to_array(self, out: np.ndarray) -> None:
        """Write the rows into ``out``: float64 (NaN for absent and null) or object (None for absent and null)."""
        if out.dtype == _F8:
            out[:] = self.data
            if not isinstance(self.tag, int):
                out[self.tag <= TAG_NULL] = np.nan
            elif self.tag <= TAG_NULL:
                out[:] = np.nan
        elif self.enc == "str":
            out[:] = np.array(self.items + [None, None], dtype=object)[self.data]
        else:
            out[:] = np.fromiter((None if v is MISSING else v for v in self.to_list()), object, len(out))


def _encode_values(col: Sequence) -> _Column:
    """The column for one key's values (MISSING where a record lacks it)."""
    n = len(col)
    types = set(map(type, col))
    if types <= _NUM_TYPES:
        if len(types) == 1:
            (only,) = types
            if only is float:
                return _Column("num", np.fromiter(col, _F8, n), TAG_FLOAT)
            if only is int:
                try:
                    return _Column("num", np.fromiter(col, _I8, n), TAG_INT)
                except OverflowError:
                    return _json_column(col)
            if only is bool:
                return _Column("num", np.fromiter(col, _U1, n), TAG_BOOL)
            return _Column("num", np.full(n, np.nan), _TAG_OF_TYPE[only])  # all null
        tags = np.array([_TAG_OF_TYPE[type(v)] for v in col], _U1)
        if types <= {int, type(None), _Missing}:
            try:
                values = np.fromiter((v if type(v) is int else 0 for v in col), _I8, n)
            except OverflowError:
                return _json_column(col)
            return _Column("num", values, tags)
        if int in types and any(type(v) is int and not -_EXACT_INT <= v <= _EXACT_INT for v in col):
            return _json_column(col)  # a float64 cannot hold it exactly
        nan = math.nan
        values = np.fromiter((nan if v is None or v is MISSING else v for v in col), _F8, n)
        return _Column("num", values, tags)
    if types <= {str, type(None), _Missing}:
        index: dict[str, int] = {}
        codes = [-1 if v is MISSING else -2 if v is None else index.setdefault(v, len(index)) for v in col]
        return _Column("str", np.array(codes, _I4), items=list(index))
    return _json_column(col)


def _json_column(col: Sequence) -> _Column:
    present = np.array([v is not MISSING for v in col], _U1)
    return _Column("json", present, items=[v for v in col if v is not MISSING])


def _columns_of(records: list[dict]) -> dict[str, _Column]:
    keys = list(records[0]) if records else []  # the first record's order first
    union = set().union(*records)
    if len(union) == len(keys) and sum(map(len, records)) == len(keys) * len(records):
        # Every record has the same keys (the usual case): transpose in C.
        values = zip(*map(itemgetter(*keys), records)) if len(keys) > 1 else ([r[k] for r in records] for k in keys)
        return {k: _encode_values(col) for k, col in zip(keys, values)}
    keys += [k for k in union if k not in keys]
    return {k: _encode_values([r.get(k, MISSING) for r in records]) for k in keys}


def encode_block(records: list[dict]) -> bytes:
    """The payload of a block: a small header, then one raw little-endian array per key.

    Layout: ``b"DDPB"``, uint32 format version, uint32 header length, the header
    (JSON: ``{"n": rows, "c": [[key, enc, dtype, offset, tag, tag_offset, items], ...]}``),
    then the arrays, each at an 8-byte aligned offset from the data start.
    """
    return _pack(len(records), _columns_of(records))


def _pack(n: int, columns: dict[str, _Column]) -> bytes:
    sections: list[bytes] = []
    size = 0

    def add(array: np.ndarray) -> int:
        nonlocal size
        offset = size
        raw = array.tobytes()
        sections.append(raw)
        size += len(raw)
        if size % 8:
            sections.append(b"\0" * (8 - size % 8))
            size += 8 - size % 8
        return offset

    entries = []
    for key, col in columns.items():
        offset = add(col.data)
        tag, tag_offset = (col.tag, -1) if isinstance(col.tag, int) else (-1, add(col.tag))
        entries.append([key, col.enc, col.data.dtype.str, offset, tag, tag_offset, col.items])
    header = json.dumps({"n": n, "c": entries}, separators=(",", ":")).encode()
    header += b" " * (-(_PREAMBLE.size + len(header)) % 8)
    return b"".join([_PREAMBLE.pack(_MAGIC, _FORMAT, len(header)), header, *sections])


def decode_block(payload: bytes) -> tuple[int, dict[str, _Column]]:
    """Rows and columns of a block payload; the arrays are read-only views of ``payload``."""
    magic, version, header_len = _PREAMBLE.unpack_from(payload)
    if magic != _MAGIC or version != _FORMAT:
        raise StoreError(f"a block in the run store has an unknown format ({magic!r} v{version})")
    base = _PREAMBLE.size + header_len
    header = json.loads(payload[_PREAMBLE.size:base])
    n = header["n"]
    columns = {}
    for key, enc, dtype, offset, tag, tag_offset, items in header["c"]:
        data = np.frombuffer(payload, np.dtype(dtype), n, base + offset)
        tags = tag if tag >= 0 else np.frombuffer(payload, _U1, n, base + tag_offset)
        columns[key] = _Column(enc, data, tags, items)
    return n, columns


def _records_of(n: int, columns: dict[str, _Column]) -> list[dict]:
    keys = list(columns)
    rows = zip(*(columns[k].to_list() for k in keys)) if keys else ([] for _ in range(n))
    return [{k: v for k, v in zip(keys, row) if v is not MISSING} for row in rows]


def _merge(blocks: list[tuple[int, dict[str, _Column]]]) -> tuple[int, dict[str, _Column]]:
    """One block holding the rows of ``blocks`` in order, merged column by column with numpy."""
    total = sum(n for n, _ in blocks)
    keys = list(dict.fromkeys(k for _, cols in blocks for k in cols))
    merged = {}
    for key in keys:
        parts = [(n, cols.get(key)) for n, cols in blocks]
        present = [c for _, c in parts if c is not None]
        encs = {c.enc for c in present}
        column = None
        if encs == {"num"}:
            column = _merge_numbers(parts)
        elif encs == {"str"}:
            column = _merge_strings(parts)
        if column is None:
            column = _encode_values([v for n, c in parts for v in (c.to_list() if c is not None else [MISSING] * n)])
        merged[key] = column
    return total, merged


def _merge_numbers(parts: list[tuple[int, _Column | None]]) -> _Column | None:
    dtypes = {c.data.dtype for _, c in parts if c is not None}
    dtype = dtypes.pop() if len(dtypes) == 1 else _F8
    values, tags = [], []
    for n, c in parts:
        if c is None:
            values.append(np.full(n, np.nan) if dtype == _F8 else np.zeros(n, dtype))
            tags.append(np.full(n, TAG_MISSING, _U1))
            continue
        if dtype == _F8 and c.data.dtype == _I8 and ((c.data > _EXACT_INT) | (c.data < -_EXACT_INT)).any():
            return None  # a float64 cannot hold these ints exactly: fall back to JSON values
        values.append(c.data.astype(dtype, copy=False))
        tags.append(c.tags(n))
    tag = np.concatenate(tags)
    return _Column("num", np.concatenate(values), int(tag[0]) if tag.size and (tag == tag[0]).all() else tag)


def _merge_strings(parts: list[tuple[int, _Column | None]]) -> _Column:
    index: dict[str, int] = {}
    codes = []
    for n, c in parts:
        if c is None:
            codes.append(np.full(n, -1, _I4))
            continue
        remap = np.array([index.setdefault(s, len(index)) for s in c.items] + [-2, -1], _I4)
        codes.append(remap[c.data])  # -2 and -1 index the last two entries: null and absent stay
    return _Column("str", np.concatenate(codes), items=list(index))


def _series_of(blocks: Iterable[tuple[int, dict[str, _Column]]], total: int,
               keys: list[str] | None) -> dict[str, np.ndarray]:
    """Concatenate blocks (in seq order, ``total`` rows in all) into one array per key.

    Each block is copied into the output as it arrives, so only one block's payload
    is in memory at a time: the output is the only large allocation.
    """
    out: dict[str, np.ndarray] = {}
    start = 0
    for n, columns in blocks:
        stop = start + n
        for key, column in columns.items():
            if keys is not None and key not in keys:
                continue
            array = out.get(key)
            if array is None:
                array = out[key] = np.empty(total, _F8 if column.enc == "num" else object)
                array[:start] = np.nan if array.dtype == _F8 else None
            elif column.enc != "num" and array.dtype == _F8:  # a key that is a number in some records only
                numbers = array
                array = out[key] = numbers.astype(object)
                array[np.isnan(numbers)] = None
            column.to_array(array[start:stop])
        for key, array in out.items():
            if key not in columns:
                array[start:stop] = np.nan if array.dtype == _F8 else None
        start = stop
    if keys is None:
        return out
    return {key: out[key] if key in out else np.full(total, np.nan) for key in keys}


# --------------------------------------------------------------------------------------------------
# The store


class RunStore:
    """Runs and everything they wrote, in ``data_dir()/runs.sqlite3`` (or ``path``).

    Use it from any thread (each gets its own connection on first use); ``close()``
    (or ``with``) once no thread uses it any more.
    """

    def __init__(self, path: str | Path | None = None, *, log_tail_bytes: int = LOG_TAIL_BYTES,
                 timeout_s: float = 30.0):
        self.path = Path(path) if path is not None else data_dir() / STORE_FILE
        self.log_tail_bytes = log_tail_bytes
        self._timeout_s = timeout_s
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed = False
        try:
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self.close()
            if "not a database" in str(exc) or "malformed" in str(exc):
                raise self._corrupt(exc) from exc
            raise StoreError(f"cannot open the run store {self.path}: {exc}") from exc
        except BaseException:
            self.close()
            raise

    # -- connections ------------------------------------------------------------------------------

    def _corrupt(self, exc: Exception) -> StoreCorruptError:
        return StoreCorruptError(
            f"the run store {self.path} cannot be read ({exc}). Move it aside (for example rename it to "
            f"{self.path.name}.broken) and start ddpgui again: a new, empty store is created; the runs on "
            f"your hosts are still there: take them back, every point, with `ddpgui adopt HOST`.")

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"the run store {self.path} is closed")
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        conn = sqlite3.connect(self.path, timeout=self._timeout_s, isolation_level=None, check_same_thread=False)
        try:
            fresh = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
            if fresh:  # only a new file takes these; set before WAL and the first table
                conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
                conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # lets delete_run give space back
            conn.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL: a commit survives an app crash (it is in the WAL, the OS writes it out); a
            # power loss may drop the last commits, but the offsets commit with their data, so those
            # records are simply fetched again on the next follow.  FULL would fsync every commit.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self._timeout_s * 1000)}")
        except BaseException:
            conn.close()
            raise
        with self._connections_lock:
            self._connections.append(conn)
        self._local.conn = conn
        return conn

    def close(self) -> None:
        """Close every thread's connection."""
        self._closed = True
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken up front (BEGIN IMMEDIATE) so it cannot fail half-way on a lock."""
        with self._write_lock:
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _migrate(self) -> None:
        with self._write() as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "schema_version" in tables:
                version = conn.execute("SELECT version FROM schema_version").fetchone()[0]
            elif tables - {"sqlite_sequence"}:
                raise StoreCorruptError(
                    f"{self.path} is an SQLite file but not a ddpgui run store (it has tables "
                    f"{', '.join(sorted(tables))}). Move it aside or point DDPGUI_DATA_DIR elsewhere.")
            else:
                conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
                conn.execute("INSERT INTO schema_version VALUES (0)")
                version = 0
            if version > len(MIGRATIONS):
                raise StoreVersionError(
                    f"the run store {self.path} has schema version {version}, written by a newer ddpgui; this "
                    f"one reads up to version {len(MIGRATIONS)}. Update ddpgui, or set DDPGUI_DATA_DIR to "
                    f"another folder to use a separate store.")
            for migration in MIGRATIONS[version:]:
                migration(conn)
            conn.execute("UPDATE schema_version SET version = ?", (len(MIGRATIONS),))

    @property
    def schema_version(self) -> int:
        return self._conn().execute("SELECT version FROM schema_version").fetchone()[0]

    # -- runs -------------------------------------------------------------------------------------

    def create_run(self, run_id: str, *, name: str = "", tags: Iterable[str] = (), hosts: Iterable[str] = (),
                   config: Any = None, environment: dict | None = None, run_dirs: dict[int, str] | None = None,
                   state: str = "created", total_steps: int | None = None, sweep_id: str | None = None,
                   created_at: float | None = None) -> RunRecord:
        """Add a run.  ``config`` is a RunConfig or its dict; ``hosts`` are profile names, node 0 first."""
        if config is not None and hasattr(config, "to_dict"):
            config = config.to_dict()
        config = dict(config or {})
        hosts = list(hosts)
        now = time.time()
        record = RunRecord(
            id=run_id, name=name or config.get("name", ""), tags=list(tags or config.get("tags", [])),
            hosts=hosts, host=hosts[0] if hosts else "", config=config, environment=dict(environment or {}),
            run_dirs=dict(run_dirs or {}), state=state,
            total_steps=total_steps if total_steps is not None else config.get("steps"), sweep_id=sweep_id,
            created_at=created_at if created_at is not None else now, updated_at=now)
        values = [_to_sql(c, getattr(record, c)) for c in _RUN_COLUMNS]
        with self._write() as conn:
            try:
                conn.execute(f"INSERT INTO runs ({', '.join(_RUN_COLUMNS)}) VALUES "
                             f"({', '.join('?' * len(_RUN_COLUMNS))})", values)
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"a run {run_id!r} is already in the run store") from exc
        return record

    def get_run(self, run_id: str) -> RunRecord:
        row = self._conn().execute(f"SELECT {', '.join(_RUN_COLUMNS)} FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(run_id)
        return _run_of(row)

    def list_runs(self, state: str | Iterable[str] | None = None, host: str | None = None, tag: str | None = None,
                  text: str | None = None) -> list[RunRecord]:
        """Runs, newest first.  ``host`` matches any node's profile; ``text`` is a case-insensitive
        substring of the name, id or tags."""
        where, args = [], []
        if state is not None:
            states = [state] if isinstance(state, str) else list(state)
            where.append(f"state IN ({', '.join('?' * len(states))})")
            args += states
        if host is not None:
            where.append("EXISTS (SELECT 1 FROM json_each(runs.hosts) WHERE value = ?)")
            args.append(host)
        if tag is not None:
            where.append("EXISTS (SELECT 1 FROM json_each(runs.tags) WHERE value = ?)")
            args.append(tag)
        if text:
            pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            where.append("(name LIKE ? ESCAPE '\\' OR id LIKE ? ESCAPE '\\' OR tags LIKE ? ESCAPE '\\')")
            args += [pattern] * 3
        sql = f"SELECT {', '.join(_RUN_COLUMNS)} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [_run_of(row) for row in self._conn().execute(sql + " ORDER BY created_at DESC, id DESC", args)]

    def active_runs(self) -> list[RunRecord]:
        """Runs whose state is not final (to reattach after a restart)."""
        marks = ", ".join("?" * len(FINAL_STATES))
        rows = self._conn().execute(f"SELECT {', '.join(_RUN_COLUMNS)} FROM runs WHERE state NOT IN ({marks}) "
                                    "ORDER BY created_at DESC, id DESC", FINAL_STATES)
        return [_run_of(row) for row in rows]

    def update_run(self, run_id: str, **changes: Any) -> RunRecord:
        """Set columns of a run.  A final ``state`` also compacts the run's blocks."""
        unknown = set(changes) - _UPDATABLE
        if unknown:
            raise TypeError(f"update_run: not a run field: {', '.join(sorted(unknown))}")
        if "hosts" in changes and "host" not in changes:
            changes["host"] = changes["hosts"][0] if changes["hosts"] else ""
        changes["updated_at"] = time.time()
        with self._write() as conn:
            cur = conn.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in changes)} WHERE id = ?",
                               [_to_sql(k, v) for k, v in changes.items()] + [run_id])
            if cur.rowcount == 0:
                raise RunNotFound(run_id)
            if changes.get("state") in FINAL_STATES:
                self._compact_run(conn, run_id, force=True)
        return self.get_run(run_id)

    def delete_run(self, run_id: str) -> bool:
        """Remove the run and all it stored; False when there was no such run."""
        with self._write() as conn:
            for table in _DATA_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            existed = conn.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount > 0
        with self._write_lock:
            self._conn().execute("PRAGMA incremental_vacuum").fetchall()
        return existed

    # -- sweeps -----------------------------------------------------------------------------------

    def create_sweep(self, sweep: SweepRecord, cells: Iterable[SweepCell]) -> SweepRecord:
        """Add a sweep and all its cells in one transaction."""
        now = time.time()
        sweep = replace(sweep, created_at=sweep.created_at or now, updated_at=now)
        rows = [[_sweep_sql(c, getattr(replace(cell, sweep_id=sweep.id, updated_at=now), c)) for c in _CELL_COLUMNS]
                for cell in cells]
        with self._write() as conn:
            try:
                conn.execute(f"INSERT INTO sweeps ({_quoted(_SWEEP_COLUMNS)}) VALUES "
                             f"({', '.join('?' * len(_SWEEP_COLUMNS))})",
                             [_sweep_sql(c, getattr(sweep, c)) for c in _SWEEP_COLUMNS])
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"a sweep {sweep.id!r} is already in the run store") from exc
            conn.executemany(f"INSERT INTO sweep_cells ({_quoted(_CELL_COLUMNS)}) VALUES "
                             f"({', '.join('?' * len(_CELL_COLUMNS))})", rows)
        return sweep

    def get_sweep(self, sweep_id: str) -> SweepRecord:
        row = self._conn().execute(f"SELECT {_quoted(_SWEEP_COLUMNS)} FROM sweeps WHERE id = ?",
                                   (sweep_id,)).fetchone()
        if row is None:
            raise SweepNotFound(sweep_id)
        return _decoded(SweepRecord, _SWEEP_COLUMNS, row)

    def list_sweeps(self) -> list[SweepRecord]:
        """Sweeps, newest first."""
        rows = self._conn().execute(f"SELECT {_quoted(_SWEEP_COLUMNS)} FROM sweeps ORDER BY created_at DESC, id DESC")
        return [_decoded(SweepRecord, _SWEEP_COLUMNS, row) for row in rows]

    def update_sweep(self, sweep_id: str, *, expect: str | Iterable[str] | None = None,
                     **changes: Any) -> SweepRecord | None:
        """Set columns of a sweep; with ``expect``, only while its state is one of those (else None)."""
        with self._write() as conn:
            if self._set(conn, "sweeps", _SWEEP_COLUMNS, {"id": sweep_id}, expect, changes) == 0:
                if expect is None or conn.execute("SELECT 1 FROM sweeps WHERE id = ?", (sweep_id,)).fetchone() is None:
                    raise SweepNotFound(sweep_id)
                return None
        return self.get_sweep(sweep_id)

    def sweep_cells(self, sweep_id: str) -> list[SweepCell]:
        """The sweep's cells in index order."""
        rows = self._conn().execute(f"SELECT {_quoted(_CELL_COLUMNS)} FROM sweep_cells WHERE sweep_id = ? "
                                    f'ORDER BY "index"', (sweep_id,))
        return [_decoded(SweepCell, _CELL_COLUMNS, row) for row in rows]

    def update_cells(self, sweep_id: str, index: int | None = None, *, expect: str | Iterable[str] | None = None,
                     **changes: Any) -> int:
        """Set columns of cell ``index`` (of every cell when None) whose state is in ``expect`` (any when None).

        Returns how many cells changed: a compare-and-set, so two processes never both claim a cell.
        """
        where: dict[str, Any] = {"sweep_id": sweep_id} if index is None else {"sweep_id": sweep_id, "index": index}
        with self._write() as conn:
            return self._set(conn, "sweep_cells", _CELL_COLUMNS, where, expect, changes)

    def sweep_runs(self, sweep_id: str) -> list[RunRecord]:
        """Every run a sweep created (a relaunched cell's earlier run too), oldest first."""
        rows = self._conn().execute(f"SELECT {', '.join(_RUN_COLUMNS)} FROM runs WHERE sweep_id = ? "
                                    "ORDER BY created_at, id", (sweep_id,))
        return [_run_of(row) for row in rows]

    @staticmethod
    def _set(conn: sqlite3.Connection, table: str, columns: tuple[str, ...], where: dict[str, Any],
             expect: str | Iterable[str] | None, changes: dict[str, Any]) -> int:
        unknown = (set(changes) - set(columns)) | (set(changes) & {"id", "sweep_id", "index"})
        if unknown:
            raise TypeError(f"not an updatable column of {table}: {', '.join(sorted(unknown))}")
        changes = {**changes, "updated_at": time.time()}
        sql = f"UPDATE {table} SET {', '.join(f'{_quoted([k])} = ?' for k in changes)} WHERE " + \
            " AND ".join(f"{_quoted([k])} = ?" for k in where)
        args = [_sweep_sql(k, v) for k, v in changes.items()] + list(where.values())
        if expect is not None:
            states = [expect] if isinstance(expect, str) else list(expect)
            sql += f" AND state IN ({', '.join('?' * len(states))})"
            args += states
        return conn.execute(sql, args).rowcount

    # -- storing the follow stream ---------------------------------------------------------------

    def store_chunk(self, run_id: str, node: int, chunk: Chunk) -> StoreResult:
        """Store one chunk and its end offset in one transaction (see :meth:`store_chunks`)."""
        return self.store_chunks(run_id, node, [chunk])

    def store_chunks(self, run_id: str, node: int, chunks: Iterable[Chunk]) -> StoreResult:
        """Store chunks (in stream order) and each spool's new offset in ONE transaction.

        A chunk that ends at or before the stored offset was stored before: skipped.
        One that starts after it would leave a hole: :class:`StoreGapError`, and
        nothing of this call is stored.  Records whose ``seq`` is not above the last
        stored one are dropped as duplicates; lines that are not records are counted
        in ``runs.corrupt_lines`` and reported by a client ``warning`` event.
        Small blocks are merged once COMPACT_AFTER of them accumulate, at once when
        the run's state is final.
        """
        result = StoreResult()
        with self._write() as conn:
            run = conn.execute("SELECT state FROM runs WHERE id = ?", (run_id,)).fetchone()
            if run is None:
                raise RunNotFound(run_id)
            ended = run[0] in FINAL_STATES  # records that arrive after the end (a backfill): compact at once
            cursors: dict[str, list[int]] = {}  # spool → [offset, last_seq]
            pending: dict[str, list[dict]] = {}  # record spool → new records
            logs: dict[str, list[bytes]] = {}
            events: list[tuple] = []
            for chunk in chunks:
                if chunk.spool not in SPOOLS:
                    raise ValueError(f"not a spool of the protocol: {chunk.spool!r}")
                if chunk.oversize and chunk.data:
                    raise ValueError(f"{chunk.spool}: an oversize chunk carries no bytes")
                if not chunk.oversize and len(chunk.data) not in (chunk.end - chunk.start,
                                                                  chunk.end - chunk.start + 1):
                    raise ValueError(f"{chunk.spool}: chunk [{chunk.start}, {chunk.end}) holds {len(chunk.data)} bytes")
                cursor = cursors.get(chunk.spool)
                if cursor is None:
                    row = conn.execute("SELECT offset, last_seq FROM offsets WHERE run_id = ? AND node = ? "
                                       "AND spool = ?", (run_id, node, chunk.spool)).fetchone()
                    cursor = cursors[chunk.spool] = list(row) if row else [0, -1]
                offset, data = cursor[0], chunk.data
                if chunk.start != offset:
                    if chunk.end <= offset:
                        result.skipped += 1
                        continue
                    if chunk.start > offset:  # the whole call rolls back: report what the store holds
                        stored = conn.execute("SELECT offset FROM offsets WHERE run_id = ? AND node = ? AND spool = ?",
                                              (run_id, node, chunk.spool)).fetchone()
                        raise StoreGapError(run_id, node, chunk.spool, stored[0] if stored else 0, chunk.start)
                    data = data[offset - chunk.start:]  # overlaps what is stored: keep only the new lines
                cursor[0] = chunk.end
                if chunk.oversize:  # one record line too long to ship: counted once, the offset moves past it
                    result.corrupt += 1
                    message = (f"skipped an oversize line ({chunk.end - chunk.start} bytes) in {chunk.spool} "
                               f"at byte {chunk.start}")
                    warning = {"event": "warning", "message": message, "source": "client", "spool": chunk.spool,
                               "offset": chunk.start, "lines": 1, "oversize": True, "node": node, "t": time.time()}
                    events.append((run_id, node, CLIENT_SEQ, warning["t"], "warning", "client", json.dumps(warning)))
                    continue
                if chunk.spool not in RECORD_SPOOLS:
                    logs.setdefault(chunk.spool, []).append(data)
                    continue
                records, bad = parse_records(data)
                kept, last = [], cursor[1]
                for record in records:
                    seq = record.get("seq")
                    if type(seq) is not int:
                        bad.append(b"")
                    elif seq <= last:
                        result.duplicates += 1
                    else:
                        last = seq
                        kept.append(record)
                cursor[1] = last
                if bad:
                    result.corrupt += len(bad)
                    at = max(chunk.start, offset) + _first_bad_line(data)
                    message = f"skipped {len(bad)} corrupt line(s) in {chunk.spool} at byte {at}"
                    warning = {"event": "warning", "message": message, "source": "client", "spool": chunk.spool,
                               "offset": at, "lines": len(bad), "node": node, "t": time.time()}
                    events.append((run_id, node, CLIENT_SEQ, warning["t"], "warning", "client", json.dumps(warning)))
                if chunk.spool == EVENTS:
                    events += [(run_id, node, r["seq"], _number(r.get("t")), _text(r.get("event")), "host",
                                json.dumps(r)) for r in kept]
                pending.setdefault(chunk.spool, []).extend(kept)
                result.records += len(kept)
            for spool, records in pending.items():
                result.new[spool] = records
                if spool != EVENTS and records:
                    conn.execute("INSERT INTO blocks (run_id, node, spool, first_seq, last_seq, n, payload) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?)", (run_id, node, spool, records[0]["seq"],
                                                                  records[-1]["seq"], len(records),
                                                                  encode_block(records)))
                    self._compact_spool(conn, run_id, node, spool, force=ended)
            if events:
                conn.executemany("INSERT INTO events (run_id, node, seq, t, event, source, record) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?)", events)
            for spool, pieces in logs.items():
                self._append_log(conn, run_id, node, spool, b"".join(pieces))
            conn.executemany(
                "INSERT INTO offsets (run_id, node, spool, offset, last_seq) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id, node, spool) "
                "DO UPDATE SET offset = excluded.offset, last_seq = excluded.last_seq",
                [(run_id, node, spool, offset, last) for spool, (offset, last) in cursors.items()])
            if result.corrupt:
                conn.execute("UPDATE runs SET corrupt_lines = corrupt_lines + ?, updated_at = ? WHERE id = ?",
                             (result.corrupt, time.time(), run_id))
            steps = [s for r in pending.get(METRICS, ()) if type(s := r.get("step")) is int]
            if steps:  # for a run list's progress column, without loading the series
                conn.execute("UPDATE runs SET last_step = max(coalesce(last_step, ?), ?), updated_at = ? WHERE id = ?",
                             (max(steps), max(steps), time.time(), run_id))
        return result

    def _append_log(self, conn: sqlite3.Connection, run_id: str, node: int, spool: str, data: bytes) -> None:
        """Append to a log tail and trim it to the newest ``log_tail_bytes``.

        The tail is kept in pieces of up to LOG_PIECE bytes, so an append rewrites at most one
        small piece and trimming drops whole pieces from the front.
        """
        limit = self.log_tail_bytes
        if not data or limit <= 0:
            return
        data = data[-limit:]
        where = (run_id, node, spool)
        last = conn.execute("SELECT id, data FROM logs WHERE run_id = ? AND node = ? AND spool = ? "
                            "ORDER BY id DESC LIMIT 1", where).fetchone()
        if last is not None and len(last[1]) + len(data) <= LOG_PIECE:
            conn.execute("UPDATE logs SET data = ? WHERE id = ?", (last[1] + data, last[0]))
        else:
            conn.execute("INSERT INTO logs (run_id, node, spool, data) VALUES (?, ?, ?, ?)", (*where, data))
        pieces = conn.execute("SELECT id, length(data) FROM logs WHERE run_id = ? AND node = ? AND spool = ? "
                              "ORDER BY id", where).fetchall()
        excess = sum(size for _, size in pieces) - limit
        for piece_id, size in pieces:
            if excess <= 0:
                break
            if size <= excess:
                conn.execute("DELETE FROM logs WHERE id = ?", (piece_id,))
            else:  # on a BLOB, substr counts bytes
                conn.execute("UPDATE logs SET data = substr(data, ?) WHERE id = ?", (excess + 1, piece_id))
            excess -= size

    # -- compaction -------------------------------------------------------------------------------

    def compact(self, run_id: str) -> int:
        """Merge each spool's runs of small blocks into one block; returns how many blocks went away."""
        with self._write() as conn:
            return self._compact_run(conn, run_id, force=True)

    def _compact_run(self, conn: sqlite3.Connection, run_id: str, force: bool) -> int:
        spools = conn.execute("SELECT DISTINCT node, spool FROM blocks WHERE run_id = ?", (run_id,)).fetchall()
        return sum(self._compact_spool(conn, run_id, node, spool, force) for node, spool in spools)

    def _compact_spool(self, conn: sqlite3.Connection, run_id: str, node: int, spool: str, force: bool) -> int:
        blocks = conn.execute("SELECT id, n FROM blocks WHERE run_id = ? AND spool = ? AND node = ? ORDER BY first_seq",
                              (run_id, spool, node)).fetchall()
        if not force and sum(n < SMALL_BLOCK for _, n in blocks) < COMPACT_AFTER:
            return 0
        groups, group = [], []
        for block_id, n in blocks + [(None, SMALL_BLOCK)]:  # a big sentinel closes the last group
            if n < SMALL_BLOCK:
                group.append(block_id)
                continue
            if len(group) > 1:
                groups.append(group)
            group = []
        removed = 0
        for ids in groups:
            marks = ", ".join("?" * len(ids))
            payloads = conn.execute(f"SELECT payload FROM blocks WHERE id IN ({marks}) ORDER BY first_seq", ids)
            n, columns = _merge([decode_block(p) for (p,) in payloads])
            seq = columns["seq"].data
            conn.execute(f"DELETE FROM blocks WHERE id IN ({marks})", ids)
            conn.execute("INSERT INTO blocks (run_id, node, spool, first_seq, last_seq, n, payload) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (run_id, node, spool, int(seq[0]), int(seq[-1]), n, _pack(n, columns)))
            removed += len(ids) - 1
        return removed

    def block_counts(self, run_id: str, spool: str = METRICS, node: int = 0) -> list[int]:
        """Rows per stored block, in seq order (to see compaction at work)."""
        return [n for (n,) in self._conn().execute(
            "SELECT n FROM blocks WHERE run_id = ? AND spool = ? AND node = ? ORDER BY first_seq",
            (run_id, spool, node))]

    # -- reading ----------------------------------------------------------------------------------

    def offsets(self, run_id: str, node: int = 0) -> dict[str, int]:
        """Spool → byte offset stored so far: what ``follow --from`` resumes at."""
        return dict(self._conn().execute("SELECT spool, offset FROM offsets WHERE run_id = ? AND node = ?",
                                         (run_id, node)))

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every statement in it sees the same state, whatever the follower commits meanwhile."""
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    _BLOCKS_WHERE = "FROM blocks WHERE run_id = ? AND spool = ? AND node = ? AND last_seq > ?"

    def series(self, run_id: str, spool: str = METRICS, node: int = 0, keys: Iterable[str] | None = None,
               after_seq: int = -1) -> dict[str, np.ndarray]:
        """Key → array over the spool's records in seq order (row i of every array is one record).

        Numeric keys (``seq``, ``t``, ``step`` included) are float64 with NaN where
        a record lacks the key or holds null; bools are 0/1.  String keys are object
        arrays (None where absent).  ``keys`` limits the columns; ``after_seq`` the
        rows, for loading only what is new.
        """
        wanted = None if keys is None else list(dict.fromkeys(keys))
        load = wanted if wanted is None or after_seq < 0 or "seq" in wanted else wanted + ["seq"]
        where = (run_id, spool, node, after_seq)
        with self._snapshot() as conn:
            total = conn.execute("SELECT coalesce(sum(n), 0) " + self._BLOCKS_WHERE, where).fetchone()[0]
            rows = conn.execute("SELECT payload " + self._BLOCKS_WHERE + " ORDER BY first_seq", where)
            out = _series_of((decode_block(p) for (p,) in rows), total, load)
        if after_seq >= 0 and total:  # the first block may hold older records too
            skip = int(np.searchsorted(out["seq"], after_seq, side="right"))
            out = {k: v[skip:] for k, v in out.items()}
        return out if wanted is None else {k: out[k] for k in wanted}

    def records(self, run_id: str, spool: str = METRICS, node: int = 0, after_seq: int = -1) -> list[dict]:
        """The spool's stored records as the host wrote them (ints stay ints, absent keys stay absent)."""
        if spool == EVENTS:
            rows = self._conn().execute("SELECT record FROM events WHERE run_id = ? AND node = ? AND source = 'host' "
                                        "AND seq > ? ORDER BY seq", (run_id, node, after_seq))
            return [json.loads(r) for (r,) in rows]
        rows = self._conn().execute("SELECT payload " + self._BLOCKS_WHERE + " ORDER BY first_seq",
                                    (run_id, spool, node, after_seq))
        out = [r for (payload,) in rows for r in _records_of(*decode_block(payload))]
        return [r for r in out if r["seq"] > after_seq] if after_seq >= 0 else out

    def add_client_event(self, run_id: str, node: int, record: dict) -> dict:
        """Record an event ddpgui itself observed (``"source": "client"``, seq CLIENT_SEQ)."""
        record = dict(record, source="client", node=node)
        record.setdefault("t", time.time())
        with self._write() as conn:
            conn.execute("INSERT INTO events (run_id, node, seq, t, event, source, record) VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (run_id, node, CLIENT_SEQ, _number(record.get("t")), _text(record.get("event")), "client",
                          json.dumps(record)))
        return record

    def events(self, run_id: str, node: int | None = None) -> list[dict]:
        """The run's events in arrival order, the client's own (``"source": "client"``) among them."""
        sql, args = "SELECT record FROM events WHERE run_id = ?", [run_id]
        if node is not None:
            sql, args = sql + " AND node = ?", args + [node]
        return [json.loads(r) for (r,) in self._conn().execute(sql + " ORDER BY id", args)]

    def log_tail(self, run_id: str, spool: str = "stderr.log", node: int = 0) -> bytes:
        """The newest bytes (at most ``log_tail_bytes``) of a run's stdout.log or stderr.log."""
        rows = self._conn().execute("SELECT data FROM logs WHERE run_id = ? AND node = ? AND spool = ? ORDER BY id",
                                    (run_id, node, spool))
        return b"".join(bytes(d) for (d,) in rows)


def _first_bad_line(data: bytes) -> int:
    """Byte position in ``data`` of the first line that is not a record (a JSON object with an integer seq)."""
    position = 0
    for line in data.split(b"\n"):
        if line.strip():
            try:
                obj = json.loads(line)
            except ValueError:
                return position
            if not isinstance(obj, dict) or type(obj.get("seq")) is not int:
                return position
        position += len(line) + 1
    return 0


def _number(value: Any) -> float | None:
    return float(value) if type(value) in (int, float) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _to_sql(column: str, value: Any) -> Any:
    if column in _JSON_COLUMNS:
        if column == "run_dirs":
            value = {str(k): v for k, v in (value or {}).items()}
        return json.dumps(value if value is not None else ({} if column not in ("tags", "hosts") else []))
    return value


def _quoted(columns: Iterable[str]) -> str:
    return ", ".join(f'"{c}"' for c in columns)  # "index" is an SQL keyword


def _sweep_sql(column: str, value: Any) -> Any:
    """A sweep or cell value as stored: JSON text for the JSON columns, 0/1 for the flag."""
    if column in _SWEEP_JSON or column == "settings":
        return json.dumps(value)
    return int(value) if column == "parallel" else value


def _decoded(cls: type, columns: tuple[str, ...], row: tuple) -> Any:
    values = dict(zip(columns, row))
    for column in _SWEEP_JSON | {"settings"}:
        if column in values:
            values[column] = json.loads(values[column])
    if "parallel" in values:
        values["parallel"] = bool(values["parallel"])
    return cls(**values)


def _run_of(row: tuple) -> RunRecord:
    values = dict(zip(_RUN_COLUMNS, row))
    for column in _JSON_COLUMNS:
        values[column] = json.loads(values[column])
    values["run_dirs"] = {int(k): v for k, v in values["run_dirs"].items()}
    return RunRecord(**values)
