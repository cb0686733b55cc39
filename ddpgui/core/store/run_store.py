"""RunStore: runs, sweeps and everything runs wrote, in one SQLite file (WAL), for any thread.

It holds the connections and transactions and reads; what a write of the follow stream does
inside its transaction is :mod:`.ingest`'s, the file's schema :mod:`.schema`'s.

Threads: every thread gets its own connection (WAL lets readers run while the
follower writes); writers in this process also take a lock so they queue here
instead of spinning in SQLite's busy handler.
"""
from __future__ import annotations

import functools
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from remote_runner.spools import EVENTS, METRICS, STDERR
from remote_runner.status import FINAL_STATES

from ..paths import data_dir
from ..runs.protocol import Chunk
from . import ingest, schema
from .blocks import decode_block, records_of, series_of
from .failures import translated
from .loss import loss_choice
from .records import (
    CELL_COLUMNS,
    CLIENT_SEQ,
    RUN_COLUMNS,
    RUN_UPDATABLE,
    SWEEP_COLUMNS,
    RunNotFound,
    RunRecord,
    StoreError,
    StoreResult,
    SweepCell,
    SweepNotFound,
    SweepRecord,
    decoded,
    number_of,
    quoted,
    run_of,
    run_sql,
    sweep_sql,
    text_of,
)

STORE_FILE = "runs.sqlite3"
#: Bytes of stdout/stderr kept per run, node and spool (the newest ones).
LOG_TAIL_BYTES = 1 << 20


def _operation(method: Callable[..., Any]) -> Callable[..., Any]:
    """A public store method: a failure of the file leaves it as one StoreError saying what to do (.failures)."""
    @functools.wraps(method)
    def operation(self: RunStore, *args: Any, **kwargs: Any) -> Any:
        with translated(self.path):
            return method(self, *args, **kwargs)
    return operation


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
            with translated(self.path):
                schema.create(self.path)
                self._migrate()
        except BaseException:
            self.close()
            raise

    # -- connections ------------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"the run store {self.path} is closed")
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        conn = schema.connect(self.path, self._timeout_s)
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
        """One write transaction, taken up front (BEGIN IMMEDIATE) so it cannot fail half-way on a lock.

        A failed statement or COMMIT (a full disk) rolls back all of it; SQLite may have rolled back by itself
        already (then a ROLLBACK would fail with "no transaction is active" and hide the real error).
        """
        with self._write_lock:
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                self._roll_back(conn)
                raise

    def _roll_back(self, conn: sqlite3.Connection) -> None:
        """End a failed transaction; a connection that cannot even roll back is closed (the next use opens a
        new one) rather than left inside a transaction every later BEGIN would fail on."""
        if not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            self._local.conn = None
            with self._connections_lock:
                self._connections.remove(conn)
            conn.close()

    def _migrate(self) -> None:
        with self._write() as conn:
            schema.migrate(conn, self.path)

    @property
    @_operation
    def schema_version(self) -> int:
        return self._conn().execute("SELECT version FROM schema_version").fetchone()[0]

    # -- runs -------------------------------------------------------------------------------------

    @_operation
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
        values = [run_sql(c, getattr(record, c)) for c in RUN_COLUMNS]
        with self._write() as conn:
            try:
                conn.execute(f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES "
                             f"({', '.join('?' * len(RUN_COLUMNS))})", values)
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"a run {run_id!r} is already in the run store") from exc
        return record

    @_operation
    def get_run(self, run_id: str) -> RunRecord:
        row = self._conn().execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(run_id)
        return run_of(row)

    @_operation
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
        sql = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [run_of(row) for row in self._conn().execute(sql + " ORDER BY created_at DESC, id DESC", args)]

    @_operation
    def active_runs(self) -> list[RunRecord]:
        """Runs whose state is not final (to reattach after a restart)."""
        marks = ", ".join("?" * len(FINAL_STATES))
        rows = self._conn().execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE state NOT IN ({marks}) "
                                    "ORDER BY created_at DESC, id DESC", FINAL_STATES)
        return [run_of(row) for row in rows]

    @_operation
    def update_run(self, run_id: str, **changes: Any) -> RunRecord:
        """Set columns of a run.  A final ``state`` also compacts the run's blocks."""
        unknown = set(changes) - RUN_UPDATABLE
        if unknown:
            raise TypeError(f"update_run: not a run field: {', '.join(sorted(unknown))}")
        if "hosts" in changes and "host" not in changes:
            changes["host"] = changes["hosts"][0] if changes["hosts"] else ""
        changes["updated_at"] = time.time()
        with self._write() as conn:
            cur = conn.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in changes)} WHERE id = ?",
                               [run_sql(k, v) for k, v in changes.items()] + [run_id])
            if cur.rowcount == 0:
                raise RunNotFound(run_id)
            if changes.get("state") in FINAL_STATES:
                ingest.compact_run(conn, run_id, force=True)
        return self.get_run(run_id)

    @_operation
    def delete_run(self, run_id: str) -> bool:
        """Remove the run and all it stored; False when there was no such run."""
        with self._write() as conn:
            for table in schema.DATA_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            existed = conn.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount > 0
        with self._write_lock:
            self._conn().execute("PRAGMA incremental_vacuum").fetchall()
        return existed

    # -- sweeps -----------------------------------------------------------------------------------

    @_operation
    def create_sweep(self, sweep: SweepRecord, cells: Iterable[SweepCell]) -> SweepRecord:
        """Add a sweep and all its cells in one transaction."""
        now = time.time()
        sweep = replace(sweep, created_at=sweep.created_at or now, updated_at=now)
        rows = [[sweep_sql(c, getattr(replace(cell, sweep_id=sweep.id, updated_at=now), c)) for c in CELL_COLUMNS]
                for cell in cells]
        with self._write() as conn:
            try:
                conn.execute(f"INSERT INTO sweeps ({quoted(SWEEP_COLUMNS)}) VALUES "
                             f"({', '.join('?' * len(SWEEP_COLUMNS))})",
                             [sweep_sql(c, getattr(sweep, c)) for c in SWEEP_COLUMNS])
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"a sweep {sweep.id!r} is already in the run store") from exc
            conn.executemany(f"INSERT INTO sweep_cells ({quoted(CELL_COLUMNS)}) VALUES "
                             f"({', '.join('?' * len(CELL_COLUMNS))})", rows)
        return sweep

    @_operation
    def get_sweep(self, sweep_id: str) -> SweepRecord:
        row = self._conn().execute(f"SELECT {quoted(SWEEP_COLUMNS)} FROM sweeps WHERE id = ?",
                                   (sweep_id,)).fetchone()
        if row is None:
            raise SweepNotFound(sweep_id)
        return decoded(SweepRecord, SWEEP_COLUMNS, row)

    @_operation
    def list_sweeps(self) -> list[SweepRecord]:
        """Sweeps, newest first."""
        rows = self._conn().execute(f"SELECT {quoted(SWEEP_COLUMNS)} FROM sweeps ORDER BY created_at DESC, id DESC")
        return [decoded(SweepRecord, SWEEP_COLUMNS, row) for row in rows]

    @_operation
    def update_sweep(self, sweep_id: str, *, expect: str | Iterable[str] | None = None,
                     **changes: Any) -> SweepRecord | None:
        """Set columns of a sweep; with ``expect``, only while its state is one of those (else None)."""
        with self._write() as conn:
            if self._set(conn, "sweeps", SWEEP_COLUMNS, {"id": sweep_id}, expect, changes) == 0:
                if expect is None or conn.execute("SELECT 1 FROM sweeps WHERE id = ?", (sweep_id,)).fetchone() is None:
                    raise SweepNotFound(sweep_id)
                return None
        return self.get_sweep(sweep_id)

    @_operation
    def sweep_cells(self, sweep_id: str) -> list[SweepCell]:
        """The sweep's cells in index order."""
        rows = self._conn().execute(f"SELECT {quoted(CELL_COLUMNS)} FROM sweep_cells WHERE sweep_id = ? "
                                    f'ORDER BY "index"', (sweep_id,))
        return [decoded(SweepCell, CELL_COLUMNS, row) for row in rows]

    @_operation
    def update_cells(self, sweep_id: str, index: int | None = None, *, expect: str | Iterable[str] | None = None,
                     **changes: Any) -> int:
        """Set columns of cell ``index`` (of every cell when None) whose state is in ``expect`` (any when None).

        Returns how many cells changed: a compare-and-set, so two processes never both claim a cell.
        """
        where: dict[str, Any] = {"sweep_id": sweep_id} if index is None else {"sweep_id": sweep_id, "index": index}
        with self._write() as conn:
            return self._set(conn, "sweep_cells", CELL_COLUMNS, where, expect, changes)

    @_operation
    def sweep_runs(self, sweep_id: str) -> list[RunRecord]:
        """Every run a sweep created (a relaunched cell's earlier run too), oldest first."""
        rows = self._conn().execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE sweep_id = ? "
                                    "ORDER BY created_at, id", (sweep_id,))
        return [run_of(row) for row in rows]

    @staticmethod
    def _set(conn: sqlite3.Connection, table: str, columns: tuple[str, ...], where: dict[str, Any],
             expect: str | Iterable[str] | None, changes: dict[str, Any]) -> int:
        unknown = (set(changes) - set(columns)) | (set(changes) & {"id", "sweep_id", "index"})
        if unknown:
            raise TypeError(f"not an updatable column of {table}: {', '.join(sorted(unknown))}")
        changes = {**changes, "updated_at": time.time()}
        sql = f"UPDATE {table} SET {', '.join(f'{quoted([k])} = ?' for k in changes)} WHERE " + \
            " AND ".join(f"{quoted([k])} = ?" for k in where)
        args = [sweep_sql(k, v) for k, v in changes.items()] + list(where.values())
        if expect is not None:
            states = [expect] if isinstance(expect, str) else list(expect)
            sql += f" AND state IN ({', '.join('?' * len(states))})"
            args += states
        return conn.execute(sql, args).rowcount

    # -- storing the follow stream ---------------------------------------------------------------

    @_operation
    def store_chunk(self, run_id: str, node: int, chunk: Chunk) -> StoreResult:
        """Store one chunk and its end offset in one transaction (see :meth:`store_chunks`)."""
        return self.store_chunks(run_id, node, [chunk])

    @_operation
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
        with self._write() as conn:
            result = ingest.store_chunks(conn, run_id, node, chunks, self.log_tail_bytes)
            choice = loss_choice(conn, run_id) if node == 0 and result.new.get(METRICS) else None
        if choice is not None:  # the records as every reader sees them (the loss the user chose)
            result.new[METRICS] = [choice.record(r) for r in result.new[METRICS]]
        return result

    # -- compaction -------------------------------------------------------------------------------

    @_operation
    def compact(self, run_id: str) -> int:
        """Merge each spool's runs of small blocks into one block; returns how many blocks went away."""
        with self._write() as conn:
            return ingest.compact_run(conn, run_id, force=True)

    @_operation
    def block_counts(self, run_id: str, spool: str = METRICS, node: int = 0) -> list[int]:
        """Rows per stored block, in seq order (to see compaction at work)."""
        return [n for (n,) in self._conn().execute(
            "SELECT n FROM blocks WHERE run_id = ? AND spool = ? AND node = ? ORDER BY first_seq",
            (run_id, spool, node))]

    # -- reading ----------------------------------------------------------------------------------

    @_operation
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
            self._roll_back(conn)  # it wrote nothing: ending it either way is the same

    _BLOCKS_WHERE = "FROM blocks WHERE run_id = ? AND spool = ? AND node = ? AND last_seq > ?"

    @_operation
    def series(self, run_id: str, spool: str = METRICS, node: int = 0, keys: Iterable[str] | None = None,
               after_seq: int = -1, as_stored: bool = False) -> dict[str, np.ndarray]:
        """Key → array over the spool's records in seq order (row i of every array is one record).

        Numeric keys (``seq``, ``t``, ``step`` included) are float64 with NaN where
        a record lacks the key or holds null; bools are 0/1.  String keys are object
        arrays (None where absent).  ``keys`` limits the columns; ``after_seq`` the
        rows, for loading only what is new.  Metrics are read with the loss the user
        chose (:mod:`.loss`) unless ``as_stored``.
        """
        wanted = None if keys is None else list(dict.fromkeys(keys))
        where = (run_id, spool, node, after_seq)
        with self._snapshot() as conn:
            choice = None if as_stored or spool != METRICS or node != 0 else loss_choice(conn, run_id)
            stored = wanted if choice is None or wanted is None else [choice.stored_name(k) for k in wanted]
            load = stored if stored is None or after_seq < 0 or "seq" in stored else stored + ["seq"]
            total = conn.execute("SELECT coalesce(sum(n), 0) " + self._BLOCKS_WHERE, where).fetchone()[0]
            rows = conn.execute("SELECT payload " + self._BLOCKS_WHERE + " ORDER BY first_seq", where)
            out = series_of((decode_block(p) for (p,) in rows), total, load)
        if after_seq >= 0 and total:  # the first block may hold older records too
            skip = int(np.searchsorted(out["seq"], after_seq, side="right"))
            out = {k: v[skip:] for k, v in out.items()}
        if choice is None:
            return out if wanted is None else {k: out[k] for k in wanted}
        out = choice.columns(out)
        rows = len(next(iter(out.values()))) if out else 0
        return out if wanted is None else {k: out[k] if k in out else np.full(rows, np.nan) for k in wanted}

    @_operation
    def records(self, run_id: str, spool: str = METRICS, node: int = 0, after_seq: int = -1,
                as_stored: bool = False) -> list[dict]:
        """The spool's stored records as the host wrote them (ints stay ints, absent keys stay absent); metrics
        with the loss the user chose (:mod:`.loss`) unless ``as_stored``."""
        conn = self._conn()
        if spool == EVENTS:
            rows = conn.execute("SELECT record FROM events WHERE run_id = ? AND node = ? AND source = 'host' "
                                "AND seq > ? ORDER BY seq", (run_id, node, after_seq))
            return [json.loads(r) for (r,) in rows]
        choice = None if as_stored or spool != METRICS or node != 0 else loss_choice(conn, run_id)
        rows = conn.execute("SELECT payload " + self._BLOCKS_WHERE + " ORDER BY first_seq",
                            (run_id, spool, node, after_seq))
        out = [r for (payload,) in rows for r in records_of(*decode_block(payload))]
        if after_seq >= 0:
            out = [r for r in out if r["seq"] > after_seq]
        return out if choice is None else [choice.record(r) for r in out]

    @_operation
    def add_client_event(self, run_id: str, node: int, record: dict) -> dict:
        """Record an event ddpgui itself observed (``"source": "client"``, seq CLIENT_SEQ)."""
        record = dict(record, source="client", node=node)
        record.setdefault("t", time.time())
        with self._write() as conn:
            conn.execute("INSERT INTO events (run_id, node, seq, t, event, source, record) VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (run_id, node, CLIENT_SEQ, number_of(record.get("t")), text_of(record.get("event")), "client",
                          json.dumps(record)))
        return record

    @_operation
    def events(self, run_id: str, node: int | None = None) -> list[dict]:
        """The run's events in arrival order, the client's own (``"source": "client"``) among them."""
        sql, args = "SELECT record FROM events WHERE run_id = ?", [run_id]
        if node is not None:
            sql, args = sql + " AND node = ?", args + [node]
        return [json.loads(r) for (r,) in self._conn().execute(sql + " ORDER BY id", args)]

    @_operation
    def log_tail(self, run_id: str, spool: str = STDERR, node: int = 0) -> bytes:
        """The newest bytes (at most ``log_tail_bytes``) of a run's stdout.log or stderr.log."""
        rows = self._conn().execute("SELECT data FROM logs WHERE run_id = ? AND node = ? AND spool = ? ORDER BY id",
                                    (run_id, node, spool))
        return b"".join(bytes(d) for (d,) in rows)

