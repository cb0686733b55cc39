"""The run store's SQLite file: opening a connection, the schema and its migrations."""
from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from .failures import empty_error
from .records import StoreCorruptError, StoreVersionError

#: Pages of 16 KiB: big blocks span fewer overflow pages (faster loads) while a
#: small commit still writes little to the WAL.  Only applies to a new file.
PAGE_SIZE = 16384


def connect(path: Path, timeout_s: float) -> sqlite3.Connection:
    """A new connection to the store file (created if absent) in WAL mode, as every thread of a RunStore opens."""
    conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
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
        conn.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
    except BaseException:
        conn.close()
        raise
    return conn


def create(path: Path) -> None:
    """Make the store file at ``path`` when there is none, whole: it is built beside it and linked into place, so
    no process ever finds a store half made (another process that made one first keeps its own).

    A file of 0 bytes is therefore a store that lost its contents: :class:`StoreCorruptError` saying how to take
    the runs back, rather than an empty store made over it in silence.
    """
    try:
        if path.stat().st_size == 0:
            raise empty_error(path)
        return
    except FileNotFoundError:
        pass
    aside = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    try:
        conn = connect(aside, 30.0)
        try:
            conn.execute("BEGIN IMMEDIATE")
            migrate(conn, path)
            conn.execute("COMMIT")
        finally:
            conn.close()
        try:
            os.link(aside, path)
        except FileExistsError:
            pass  # another process made it first
        except OSError:  # a file system without hard links
            if not path.exists():
                os.rename(aside, path)
    finally:
        for leftover in (aside, aside.with_name(aside.name + "-wal"), aside.with_name(aside.name + "-shm")):
            leftover.unlink(missing_ok=True)


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring the store at ``path`` (``conn``, inside a write transaction) to the newest schema version."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "schema_version" in tables:
        version = conn.execute("SELECT version FROM schema_version").fetchone()[0]
    elif tables - {"sqlite_sequence"}:
        raise StoreCorruptError(
            f"{path} is an SQLite file but not a ddpgui run store (it has tables "
            f"{', '.join(sorted(tables))}). Move it aside or point DDPGUI_DATA_DIR elsewhere.")
    else:
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (0)")
        version = 0
    if version > len(MIGRATIONS):
        raise StoreVersionError(
            f"the run store {path} has schema version {version}, written by a newer ddpgui; this "
            f"one reads up to version {len(MIGRATIONS)}. Update ddpgui, or set DDPGUI_DATA_DIR to "
            f"another folder to use a separate store.")
    for migration in MIGRATIONS[version:]:
        migration(conn)
    if version != len(MIGRATIONS):  # opening an up-to-date store writes nothing (a full disk can still be read)
        conn.execute("UPDATE schema_version SET version = ?", (len(MIGRATIONS),))


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


def _v3(conn: sqlite3.Connection) -> None:
    """The series the user chose as a run's loss after the fact (NULL: the one the host chose; see .loss)."""
    conn.execute("ALTER TABLE runs ADD COLUMN loss_series TEXT")


#: Migration i brings a store from schema version i to i + 1.  Append, never edit or reorder.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1, _v2, _v3]

#: The tables holding what runs wrote (each has a ``run_id`` column).
DATA_TABLES = ("blocks", "events", "logs", "offsets")
