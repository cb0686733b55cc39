"""The run store on real SQLite files: exactly once, columnar blocks, compaction, runs, migrations, threads."""
from __future__ import annotations

import json
import math
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpgui.core.runs.protocol import Chunk
from ddpgui.core.store import (
    RunNotFound,
    RunStore,
    StoreCorruptError,
    StoreGapError,
    StoreVersionError,
    ingest,
    run_store,
    schema,
)
from ddpgui.core.store.ingest import COMPACT_AFTER

METRICS, TELEMETRY, EVENTS = "metrics.jsonl", "telemetry.jsonl", "events.jsonl"


def line(record: dict) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def spool_bytes(records: list[dict]) -> bytes:
    return b"".join(line(r) for r in records)


def chunks_of(spool: str, data: bytes, cuts: list[int]) -> list[Chunk]:
    """``data`` split at the line boundaries after lines ``cuts`` (sorted line indices)."""
    ends = [i + 1 for i, b in enumerate(data) if b == 0x0A]
    bounds = [0] + [ends[c] for c in cuts if c < len(ends) - 1] + [len(data)]
    return [Chunk(spool, a, b, data[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a]


def metric(seq: int) -> dict:
    return {"step": seq + 1, "loss": 1.0 / (seq + 1), "samples_per_s": 1000.0 + seq, "warmup": seq < 3,
            "seq": seq, "t": 1764500000.0 + seq / 10}


def canon(records: list[dict]) -> list[str]:
    """Type-strict comparison: 2 and 2.0, 1 and true differ."""
    return [json.dumps(r, sort_keys=True) for r in records]


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.sqlite3") as s:
        s.create_run("r1", name="mlp 2x fp32", hosts=["local"], tags=["baseline"])
        yield s


def test_chunks_and_offsets_commit_together_across_a_restart(tmp_path):
    path = tmp_path / "runs.sqlite3"
    data = spool_bytes([metric(i) for i in range(30)])
    chunks = chunks_of(METRICS, data, [4, 9, 19])
    logs = Chunk("stdout.log", 0, 12, b"step 1 done\n")
    with RunStore(path) as s:
        s.create_run("r1", hosts=["local"])
        assert s.store_chunks("r1", 0, chunks[:2] + [logs]).records == 10
    with RunStore(path) as s:  # no compaction, no final state: as if the app had died here
        assert s.offsets("r1") == {METRICS: chunks[1].end, "stdout.log": 12}
        replay = s.store_chunks("r1", 0, chunks + [logs])  # a follower that resent everything
        assert (replay.skipped, replay.records, replay.duplicates) == (3, 20, 0)
        assert s.records("r1") == [metric(i) for i in range(30)]
        assert s.store_chunk("r1", 0, chunks[-1]).skipped == 1
        assert s.records("r1") == [metric(i) for i in range(30)]
        assert s.log_tail("r1", "stdout.log") == b"step 1 done\n"
        assert s.offsets("r1")[METRICS] == len(data)


def test_a_killed_writer_leaves_records_and_offset_consistent(tmp_path):
    """SIGKILL the storing process mid-stream: what is stored is exactly the bytes before the stored offset."""
    path = tmp_path / "runs.sqlite3"
    records = [metric(i) for i in range(20_000)]
    spool = tmp_path / METRICS
    spool.write_bytes(spool_bytes(records))
    with RunStore(path) as s:
        s.create_run("r1")
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from ddpgui.core.runs.protocol import Chunk
        from ddpgui.core.store import RunStore
        data = open({str(spool)!r}, "rb").read()
        store, start = RunStore({str(path)!r}), 0
        while start < len(data):  # one record per chunk, as a slowly logging run sends them
            end = data.index(b"\\n", start) + 1
            store.store_chunk("r1", 0, Chunk("metrics.jsonl", start, end, data[start:end]))
            start = end
    """)])
    try:
        with RunStore(path) as s:
            deadline = time.monotonic() + 60
            while s.offsets("r1").get(METRICS, 0) < 200 * len(line(records[0])):
                assert writer.poll() is None and time.monotonic() < deadline, "the writer did not store anything"
                time.sleep(0.01)
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    data = spool.read_bytes()
    with RunStore(path) as s:
        offset = s.offsets("r1")[METRICS]
        stored = s.records("r1")
        assert stored == records[:len(stored)] and len(stored) < len(records)
        assert offset == len(spool_bytes(stored))
        rest = Chunk(METRICS, offset, len(data), data[offset:])
        assert s.store_chunk("r1", 0, rest).records == len(records) - len(stored)
        assert s.records("r1") == records


def test_a_gap_is_refused_and_nothing_of_the_call_is_stored(store):
    data = spool_bytes([metric(i) for i in range(6)])
    first, second, third = chunks_of(METRICS, data, [1, 3])
    with pytest.raises(StoreGapError) as err:
        store.store_chunks("r1", 0, [first, third])
    assert err.value.offset == 0 and err.value.start == third.start and "follow again" in str(err.value)
    assert store.offsets("r1") == {} and store.records("r1") == []
    store.store_chunks("r1", 0, [first, second, third])
    assert store.records("r1") == [metric(i) for i in range(6)]


def test_an_overlapping_chunk_stores_only_its_new_lines(store):
    data = spool_bytes([metric(i) for i in range(4)])
    first, _ = chunks_of(METRICS, data, [1])
    store.store_chunk("r1", 0, first)
    result = store.store_chunk("r1", 0, Chunk(METRICS, 0, len(data), data))
    assert (result.records, result.duplicates) == (2, 0)
    assert store.records("r1") == [metric(i) for i in range(4)]


def test_records_at_or_below_the_last_seq_are_dropped(store):
    data = spool_bytes([metric(0), metric(1), metric(1), metric(0), metric(2)])
    result = store.store_chunk("r1", 0, Chunk(METRICS, 0, len(data), data))
    assert (result.records, result.duplicates) == (3, 2)
    more = spool_bytes([metric(2), metric(3)])
    result = store.store_chunk("r1", 0, Chunk(METRICS, len(data), len(data) + len(more), more))
    assert (result.records, result.duplicates) == (1, 1)
    assert [r["seq"] for r in store.records("r1")] == [0, 1, 2, 3]


def test_corrupt_lines_are_skipped_counted_and_reported(store):
    good = line(metric(0))
    garbage = b"\x00\x17garbage{\n"
    body = good + garbage + b'[1, 2]\n{"step": 5}\n' + line(metric(1))
    first = Chunk(METRICS, 0, len(body), body)
    truncated = b'{"step": 3, "lo'  # a crash mid-write: the runner appends a newline after the run ended
    last = Chunk(METRICS, len(body), len(body) + len(truncated), truncated + b"\n")
    result = store.store_chunks("r1", 0, [first, last])
    assert (result.records, result.corrupt) == (2, 4)
    assert store.records("r1") == [metric(0), metric(1)]
    assert store.get_run("r1").corrupt_lines == 4
    warnings = [e for e in store.events("r1") if e["event"] == "warning"]
    assert [w["message"] for w in warnings] == [
        f"skipped 3 corrupt line(s) in metrics.jsonl at byte {len(good)}",
        f"skipped 1 corrupt line(s) in metrics.jsonl at byte {len(body)}"]
    assert all(w["source"] == "client" for w in warnings)
    assert store.offsets("r1")[METRICS] == last.end
    after = line(metric(2))
    store.store_chunk("r1", 0, Chunk(METRICS, last.end, last.end + len(after), after))  # the stream goes on
    assert [r["seq"] for r in store.records("r1")] == [0, 1, 2]


# Values as JSON can carry them; NaN is written as null by the runner, so floats here are finite.
json_values = st.one_of(
    st.integers(min_value=-2 ** 70, max_value=2 ** 70), st.integers(min_value=-5, max_value=5),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.0, -0.0, 2.0, 1e300]),
    st.booleans(), st.none(), st.text(max_size=5), st.sampled_from(["gpu", "cpu", "N/A"]),
    st.lists(st.integers(0, 3), max_size=2), st.dictionaries(st.sampled_from("ab"), st.integers(0, 3), max_size=2))
numeric_values = st.one_of(st.integers(-2 ** 40, 2 ** 40), st.floats(allow_nan=False, allow_infinity=False),
                           st.booleans(), st.none())
mixed_records = st.lists(st.one_of(
    st.dictionaries(st.sampled_from(["loss", "lr", "phase", "x", "y"]), json_values, max_size=4),
    st.dictionaries(st.sampled_from(["loss", "lr"]), numeric_values, min_size=2)), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mixed_records, st.lists(st.integers(0, 60), max_size=20), st.data())
def test_records_come_back_as_written_whatever_the_chunking(tmp_path_factory, bodies, cuts, data):
    records = [dict(body, seq=i, t=1764500000.0 + i, step=i + 1) for i, body in enumerate(bodies)]
    spool = spool_bytes(records)
    chunks = chunks_of(METRICS, spool, sorted(set(cuts)))
    with RunStore(tmp_path_factory.mktemp("h") / "runs.sqlite3") as s:
        s.create_run("r")
        for chunk in chunks:
            s.store_chunk("r", 0, chunk)
        assert canon(s.records("r")) == canon(records)
        before = s.series("r")
        assert s.offsets("r") == {METRICS: len(spool)}
        s.compact("r")
        assert len(s.block_counts("r")) == 1
        assert canon(s.records("r")) == canon(records)
        after = s.series("r")
        assert list(before) == list(after)
        for key in before:
            np.testing.assert_array_equal(before[key], after[key])
        since = data.draw(st.integers(-1, len(records)))
        assert canon(s.records("r", after_seq=since)) == canon(records[since + 1:])
        np.testing.assert_array_equal(s.series("r", keys=["seq"], after_seq=since)["seq"],
                                      np.arange(since + 1, len(records), dtype=float))
    for key, array in after.items():
        expected = [r.get(key) for r in records]
        if array.dtype == np.float64:
            assert [None if math.isnan(v) else v for v in array.tolist()] == [
                None if v is None else float(v) for v in expected]
        else:
            assert array.tolist() == expected


@pytest.mark.parametrize("values", [[-2 ** 63, 0.5], [2 ** 53 + 1, None, 1.5],
                                    [-2 ** 63, 2 ** 53 + 1, 0.5, 2 ** 64, True, 7, None]])
def test_numbers_a_float64_cannot_hold_stay_exact_through_compaction(store, values):
    records = [{"seq": i, "big": v} for i, v in enumerate(values)]
    data = spool_bytes(records)
    for chunk in chunks_of(METRICS, data, list(range(len(values)))):
        store.store_chunk("r1", 0, chunk)
    assert canon(store.records("r1")) == canon(records)
    store.compact("r1")
    assert store.block_counts("r1") == [len(values)]
    assert canon(store.records("r1")) == canon(records)
    assert store.series("r1")["big"].tolist() == values


def test_series_arrays_are_float64_with_nan_for_missing_and_null(store):
    records = [dict(metric(i), phase="train", mfu=None) for i in range(5)]
    records[2].pop("loss")
    records[3]["loss"] = None
    data = spool_bytes(records)
    store.store_chunk("r1", 0, Chunk(METRICS, 0, len(data), data))
    series = store.series("r1")
    for key in ("seq", "t", "step", "loss", "samples_per_s", "warmup", "mfu"):
        assert series[key].dtype == np.float64, key
    assert np.isnan(series["loss"][[2, 3]]).all() and series["loss"][4] == 0.2
    assert series["warmup"].tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert np.isnan(series["mfu"]).all()
    assert series["phase"].dtype == object and series["phase"].tolist() == ["train"] * 5
    assert list(store.series("r1", keys=["loss", "nothing"])) == ["loss", "nothing"]
    assert np.isnan(store.series("r1", keys=["nothing"])["nothing"]).all()
    assert store.get_run("r1").last_step == 5


def test_small_blocks_are_compacted_and_series_stay_identical(store):
    records = [metric(i) for i in range(3 * COMPACT_AFTER + 5)]
    data = spool_bytes(records)
    expected = None
    for i, chunk in enumerate(chunks_of(METRICS, data, list(range(len(records))))):
        store.store_chunk("r1", 0, chunk)
        if i == COMPACT_AFTER - 2:
            expected = store.series("r1")
    assert len(store.block_counts("r1")) < 2 * COMPACT_AFTER  # merged on the way
    early = store.series("r1")
    for key, array in expected.items():
        np.testing.assert_array_equal(early[key][:len(array)], array)
    store.update_run("r1", state="finished")  # a final state compacts the rest
    assert store.block_counts("r1") == [len(records)]
    late = line(metric(len(records)))  # a backfill after the end is merged at once
    store.store_chunk("r1", 0, Chunk(METRICS, len(data), len(data) + len(late), late))
    assert store.block_counts("r1") == [len(records) + 1]
    records.append(metric(len(records)))
    final = store.series("r1")
    for key in early:
        np.testing.assert_array_equal(final[key][:-1], early[key])
    np.testing.assert_array_equal(final["seq"], np.arange(len(records), dtype=float))
    assert store.records("r1") == records


def test_compaction_keeps_big_blocks_in_order(store, monkeypatch):
    monkeypatch.setattr(ingest, "SMALL_BLOCK", 10)
    records = [metric(i) for i in range(60)]
    data = spool_bytes(records)
    # small, small, big, small, small: merging may never reorder across the big block
    for chunk in chunks_of(METRICS, data, [2, 5, 30, 40]):
        store.store_chunk("r1", 0, chunk)
    assert store.block_counts("r1") == [3, 3, 25, 10, 19]
    store.compact("r1")
    assert store.block_counts("r1") == [6, 25, 10, 19]
    assert store.records("r1") == records


def test_gpu_and_cpu_telemetry_round_trip(store):
    samples = []
    for i in range(6):
        for gpu in range(2):
            samples.append({"kind": "gpu", "gpu": gpu, "name": "NVIDIA A100-SXM4-80GB", "util_pct": 90 + gpu,
                            "mem_used_gib": 20.5, "mem_total_gib": 80.0, "power_w": None if i == 2 else 310.25,
                            "temp_c": 61, "sm_clock_mhz": 1410})
        samples.append({"kind": "cpu", "cpu_pct": 12.5, "proc_cpu_pct": 180.0, "rss_gib": 3.2, "nprocs": 3})
    records = [dict(s, seq=i, t=1764500000.0 + i / 2) for i, s in enumerate(samples)]
    data = spool_bytes(records)
    for chunk in chunks_of(TELEMETRY, data, [0, 5, 11]):
        store.store_chunk("r1", 0, chunk)
    store.compact("r1")
    assert store.records("r1", TELEMETRY) == records
    series = store.series("r1", TELEMETRY)
    gpu1 = (series["kind"] == "gpu") & (series["gpu"] == 1)
    assert gpu1.sum() == 6 and (series["util_pct"][gpu1] == 91).all()
    assert np.isnan(series["util_pct"][series["kind"] == "cpu"]).all()
    assert series["name"][0] == "NVIDIA A100-SXM4-80GB" and series["name"][2] is None
    assert store.series("r1") == {}  # nothing in metrics.jsonl


@pytest.mark.parametrize("piece", [40, ingest.LOG_PIECE])
def test_events_keep_arrival_order_and_logs_keep_their_tail(tmp_path, monkeypatch, piece):
    monkeypatch.setattr(ingest, "LOG_PIECE", piece)
    with RunStore(tmp_path / "runs.sqlite3", log_tail_bytes=100) as s:
        s.create_run("r1")
        events = [{"event": "started", "seq": 0, "t": 1.0},
                  {"event": "compile_end", "duration_s": 17.5, "seq": 1, "t": 2.0},
                  {"event": "failed", "failure": "cuda_oom", "message": "out of memory", "rank": 1, "seq": 2, "t": 3.0}]
        data = spool_bytes(events)
        for chunk in chunks_of(EVENTS, data, [0]):
            s.store_chunk("r1", 0, chunk)
        assert s.events("r1") == events and s.records("r1", EVENTS) == events
        log, start = b"", 0
        for text in (b"a" * 30 + b"\n", b"b" * 60 + b"\n", b"c" * 25 + b"\n", b"d" * 150 + b"\n", b"e\n"):
            s.store_chunk("r1", 0, Chunk("stderr.log", start, start + len(text), text))
            log, start = log + text, start + len(text)
            assert s.log_tail("r1", "stderr.log") == log[-100:]
        assert s.log_tail("r1", "stdout.log") == b""
        sizes = [n for (n,) in s._conn().execute("SELECT length(data) FROM logs ORDER BY id")]
        assert sizes == ([98, 2] if piece == 40 else [100])  # trimmed on insert, not only when read


def test_list_runs_filters_and_active_runs(tmp_path):
    with RunStore(tmp_path / "runs.sqlite3") as s:
        s.create_run("20250101-000000-aaaaaa", name="mlp fp32", hosts=["gpu-box"], tags=["baseline"], created_at=1)
        s.create_run("20250102-000000-bbbbbb", name="transformer bf16", hosts=["node-a", "node-b"],
                     tags=["sweep", "bf16"], created_at=2, state="running")
        s.create_run("20250103-000000-cccccc", name="100%_done", hosts=["local"], created_at=3, state="finished")
        ids = lambda runs: [r.id[-6:] for r in runs]  # noqa: E731
        assert ids(s.list_runs()) == ["cccccc", "bbbbbb", "aaaaaa"]
        assert ids(s.list_runs(state="running")) == ["bbbbbb"]
        assert ids(s.list_runs(state=["created", "finished"])) == ["cccccc", "aaaaaa"]
        assert ids(s.list_runs(host="node-b")) == ["bbbbbb"] and s.get_run("20250102-000000-bbbbbb").host == "node-a"
        assert ids(s.list_runs(tag="bf16")) == ["bbbbbb"] and ids(s.list_runs(tag="bf")) == []
        assert ids(s.list_runs(text="TRANSFORMER")) == ["bbbbbb"]
        assert ids(s.list_runs(text="0%_")) == ["cccccc"] and ids(s.list_runs(text="%")) == ["cccccc"]
        assert ids(s.list_runs(text="aaaa", host="gpu-box", tag="baseline")) == ["aaaaaa"]
        assert ids(s.active_runs()) == ["bbbbbb", "aaaaaa"]


def test_runs_keep_config_environment_and_fields(store):
    from remote_runner.config import RunConfig

    cfg = RunConfig(run_id="r2", name="cnn 4x bf16", nproc_per_node=4, precision="bf16", steps=500, tags=["t"],
                    env={"NCCL_DEBUG": "INFO"})
    env = {"gpu": "NVIDIA H100 80GB HBM3", "driver": "550.54.15", "cuda": "12.4", "torch": "2.5.1",
           "nccl": "2.21.5", "hostname": "gpu-box"}
    made = store.create_run("r2", config=cfg, hosts=["gpu-box"], environment=env,
                            run_dirs={0: "/home/u/.ddpgui/runs/r2"})
    got = store.get_run("r2")
    assert got == made
    assert (got.name, got.tags, got.total_steps, got.config, got.environment) == (
        "cnn 4x bf16", ["t"], 500, cfg.to_dict(), env)
    assert got.run_dirs == {0: "/home/u/.ddpgui/runs/r2"}
    updated = store.update_run("r2", state="failed", failure="cuda_oom", message="out of memory", hint="smaller batch",
                               failed_rank=3, exit_code=1, ended_at=5.0, summary={"final_loss": 0.5})
    assert (updated.state, updated.failed_rank, updated.summary, updated.active) == (
        "failed", 3, {"final_loss": 0.5}, False)
    with pytest.raises(TypeError, match="not a run field: password"):
        store.update_run("r2", password="x")
    with pytest.raises(RunNotFound):
        store.update_run("nope", state="running")
    with pytest.raises(KeyError):
        store.get_run("nope")
    with pytest.raises(RunNotFound):
        store.store_chunk("nope", 0, Chunk(METRICS, 0, 1, b"\n"))


def test_delete_run_removes_everything_of_it(store):
    store.create_run("keep")
    for run in ("r1", "keep"):
        metrics = spool_bytes([metric(i) for i in range(3)])
        events = spool_bytes([{"event": "started", "seq": 0, "t": 1.0}])
        store.store_chunks(run, 0, [Chunk(METRICS, 0, len(metrics), metrics),
                                    Chunk(EVENTS, 0, len(events), events), Chunk("stdout.log", 0, 3, b"hi\n"),
                                    Chunk(METRICS, len(metrics), len(metrics) + 5, b"junk\n")])
    assert store.delete_run("r1") and not store.delete_run("r1")
    conn = store._conn()
    for table in ("blocks", "events", "logs", "offsets"):
        assert conn.execute(f"SELECT count(*) FROM {table} WHERE run_id = 'r1'").fetchone()[0] == 0, table
        assert conn.execute(f"SELECT count(*) FROM {table} WHERE run_id = 'keep'").fetchone()[0] > 0, table
    assert [r.id for r in store.list_runs()] == ["keep"]
    assert len(store.records("keep")) == 3 and store.log_tail("keep", "stdout.log") == b"hi\n"


def test_a_v1_file_is_migrated_with_its_data(tmp_path, monkeypatch):
    path = tmp_path / "runs.sqlite3"
    data = spool_bytes([metric(i) for i in range(10)])
    migrations = schema.MIGRATIONS
    monkeypatch.setattr(schema, "MIGRATIONS", migrations[:1])
    loss_choice = run_store.loss_choice
    monkeypatch.setattr(run_store, "loss_choice", lambda conn, run_id: None)  # a v1 ddpgui had no loss choice
    with RunStore(path) as s:
        assert s.schema_version == 1
        s._conn().execute("INSERT INTO runs (id, name, tags, created_at, updated_at) "  # as a v1 ddpgui wrote it
                          "VALUES ('r1', 'old run', '[\"x\"]', 0, 0)")
        s.store_chunk("r1", 0, Chunk(METRICS, 0, len(data), data))

    def v2(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE runs ADD COLUMN notes TEXT NOT NULL DEFAULT ''")

    monkeypatch.setattr(run_store, "loss_choice", loss_choice)
    monkeypatch.setattr(schema, "MIGRATIONS", [*migrations, v2])
    with RunStore(path) as s:
        assert s.schema_version == len(migrations) + 1
        assert s._conn().execute("SELECT name, notes FROM runs").fetchall() == [("old run", "")]
        assert s.get_run("r1").tags == ["x"]
        assert s.records("r1") == [metric(i) for i in range(10)] and s.offsets("r1") == {METRICS: len(data)}
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:1])
    with pytest.raises(StoreVersionError, match="newer ddpgui"):
        RunStore(path)


def test_a_garbage_file_gives_an_error_that_says_what_to_do(tmp_path):
    path = tmp_path / "runs.sqlite3"
    path.write_bytes(b"this is not a database at all, " * 200)
    with pytest.raises(StoreCorruptError) as err:
        RunStore(path)
    assert str(path) in str(err.value) and "move it aside" in str(err.value).lower()
    assert "ddpgui adopt HOST" in str(err.value)  # the command that takes the hosts' runs back
    other = tmp_path / "other.sqlite3"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE photos (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreCorruptError, match="not a ddpgui run store"):
        RunStore(other)


def test_wal_reader_thread_sees_consistent_data_while_the_writer_inserts(tmp_path):
    path = tmp_path / "runs.sqlite3"
    records = [metric(i) for i in range(4000)]
    data = spool_bytes(records)
    cuts = sorted(set(range(0, len(records), 7)) | set(range(0, 400)))  # many tiny chunks: compaction runs too
    chunks = chunks_of(METRICS, data, cuts)
    with RunStore(path) as s:
        s.create_run("r1")
        assert s._conn().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        done, problems, seen = threading.Event(), [], []

        def read() -> None:
            try:
                while not done.is_set():
                    series = s.series("r1", keys=["seq", "loss", "step"])
                    n = len(series["seq"])
                    if not (np.array_equal(series["seq"], np.arange(n)) and
                            np.array_equal(series["loss"], 1.0 / (np.arange(n) + 1)) and
                            (not seen or n >= seen[-1])):
                        problems.append(n)
                    seen.append(n)
            except Exception as exc:  # noqa: BLE001 - reported below
                problems.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        try:
            for i in range(0, len(chunks), 3):
                s.store_chunks("r1", 0, chunks[i:i + 3])
        finally:
            done.set()
            reader.join(30)
        assert problems == []
        assert len(set(seen)) > 2, "the reader never ran while the writer inserted"
        assert s.records("r1") == records


def test_client_events_are_kept_with_the_nodes_events(store):
    store.add_client_event("r1", 1, {"event": "stopped", "t": 5.0, "message": "stopped on request"})
    assert store.events("r1", 0) == []
    (event,) = store.events("r1", 1)
    assert event == {"event": "stopped", "t": 5.0, "message": "stopped on request", "source": "client", "node": 1}
