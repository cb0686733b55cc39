"""Storing the follow stream: chunks become blocks, events, log tails and offsets in one transaction; compaction.

Exactly once: a chunk of a spool is stored together with the spool's byte offset
after it in one transaction, so after any crash the store resumes from exactly
what it holds (docs/PROTOCOL.md, "The follow stream").

Every function here runs on a connection inside a write transaction the caller
(:class:`~ddpgui.core.store.run_store.RunStore`) holds.
"""
from __future__ import annotations

import json
import sqlite3
import sys
import time
from collections.abc import Iterable

from remote_runner.spools import EVENTS, METRICS, RECORD_SPOOLS, SPOOLS
from remote_runner.status import FINAL_STATES

from ..runs.protocol import Chunk, parse_records
from .blocks import decode_block, encode_block, merge_blocks, pack_block
from .records import CLIENT_SEQ, RunNotFound, StoreGapError, StoreResult, number_of, text_of

#: A block with fewer records than this is "small": it gets merged with its neighbours.
SMALL_BLOCK = 4096
#: Merge a spool's small blocks once this many have accumulated.
COMPACT_AFTER = 64
#: A log tail is stored in pieces of up to this many bytes.
LOG_PIECE = 64 << 10
#: What an SQLite INTEGER holds, and the largest float (an integer ``t`` beyond it has no REAL).
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
FLOAT_MAX = sys.float_info.max


def store_chunks(conn: sqlite3.Connection, run_id: str, node: int, chunks: Iterable[Chunk],
                 log_tail_bytes: int) -> StoreResult:
    """Store chunks (in stream order) and each spool's new offset (see :meth:`RunStore.store_chunks`)."""
    result = StoreResult()
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
            if not holdable(record):
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
            events += [(run_id, node, r["seq"], number_of(r.get("t")), text_of(r.get("event")), "host",
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
            compact_spool(conn, run_id, node, spool, force=ended)
    if events:
        conn.executemany("INSERT INTO events (run_id, node, seq, t, event, source, record) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?)", events)
    for spool, pieces in logs.items():
        append_log(conn, run_id, node, spool, b"".join(pieces), log_tail_bytes)
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


def append_log(conn: sqlite3.Connection, run_id: str, node: int, spool: str, data: bytes, limit: int) -> None:
    """Append to a log tail and trim it to the newest ``limit`` bytes (the store's ``log_tail_bytes``).

    The tail is kept in pieces of up to LOG_PIECE bytes, so an append rewrites at most one
    small piece and trimming drops whole pieces from the front.
    """
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


def compact_run(conn: sqlite3.Connection, run_id: str, force: bool) -> int:
    """Compact every spool of the run (see :func:`compact_spool`); returns how many blocks went away."""
    spools = conn.execute("SELECT DISTINCT node, spool FROM blocks WHERE run_id = ?", (run_id,)).fetchall()
    return sum(compact_spool(conn, run_id, node, spool, force) for node, spool in spools)


def compact_spool(conn: sqlite3.Connection, run_id: str, node: int, spool: str, force: bool) -> int:
    """Merge each run of small blocks of one spool into one block: always when ``force``, else once
    COMPACT_AFTER small ones have accumulated.  Returns how many blocks went away."""
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
        n, columns = merge_blocks([decode_block(p) for (p,) in payloads])
        seq = columns["seq"].data
        conn.execute(f"DELETE FROM blocks WHERE id IN ({marks})", ids)
        conn.execute("INSERT INTO blocks (run_id, node, spool, first_seq, last_seq, n, payload) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (run_id, node, spool, int(seq[0]), int(seq[-1]), n, pack_block(n, columns)))
        removed += len(ids) - 1
    return removed


def holdable(record: dict) -> bool:
    """Whether ``record`` is one the store can keep: an integer ``seq``, and the values it keeps in SQL columns
    (``seq``, a metric's integer ``step``, an event's ``t`` and name) within what SQLite holds.  One that is not
    (a script that printed ``step 99999999999999999999999``) is skipped and counted like a corrupt line: storing
    it would fail the whole chunk, every time, and with it the following of every run of the host."""
    seq, step, t, event = record.get("seq"), record.get("step"), record.get("t"), record.get("event")
    if type(seq) is not int or not INT64_MIN <= seq <= INT64_MAX:
        return False
    if type(step) is int and not INT64_MIN <= step <= INT64_MAX:
        return False
    if type(t) is int and not -FLOAT_MAX <= t <= FLOAT_MAX:
        return False
    return not isinstance(event, str) or event.isascii() or _utf8(event)


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate ("\ud800" in the JSON): SQLite cannot hold it as text
        return False
    return True


def _first_bad_line(data: bytes) -> int:
    """Byte position in ``data`` of the first line that is not a record the store can keep (see :func:`holdable`)."""
    position = 0
    for line in data.split(b"\n"):
        if line.strip():
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                return position
            if not isinstance(obj, dict) or not holdable(obj):
                return position
        position += len(line) + 1
    return 0
