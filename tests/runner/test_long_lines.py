"""Spool lines of any length: the seq stays monotone, nothing after a long or bad line is lost.

Real files, the real runner ``follow`` process, the real decoder and the real SQLite store.
"""
import json
import os
import subprocess
import sys

from ddpgui.core.runs.protocol import Chunk, End, FollowDecoder
from ddpgui.core.store import RunStore
from remote_runner.follow import MAX_CHUNK
from remote_runner.spools import EVENTS, METRICS, SpoolWriter, append_event, last_seq
from remote_runner.status import write_status

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _big_record(seq, size):
    return json.dumps({"seq": seq, "t": 1.0, "event": "note", "blob": "x" * size}).encode() + b"\n"


def test_last_seq_reads_back_past_a_line_longer_than_64_kib(tmp_path):
    path = tmp_path / EVENTS
    path.write_bytes(_big_record(0, 10) + _big_record(1, 200_000))
    assert last_seq(str(path)) == 1  # the long line itself is the last record
    with open(path, "ab") as fh:
        fh.write(b"not json at all " * 10_000 + b"\n")  # a 160 KB corrupt line at the end
    assert last_seq(str(path)) == 1
    with open(path, "ab") as fh:
        fh.write(b'{"seq": 2, "partial')  # a crash mid-write: no newline
    assert last_seq(str(path)) == 1


def test_events_appended_after_long_lines_continue_the_seq(tmp_path):
    run_dir = str(tmp_path)
    append_event(run_dir, "started")
    with open(tmp_path / EVENTS, "ab") as fh:
        fh.write(_big_record(1, 100_000))  # a legitimate big record
        fh.write(b"z" * (10 << 20) + b"\n")  # a 10 MB line that is no record
    for _ in range(3):
        append_event(run_dir, "warning", message="after the long lines")
    seqs = [json.loads(line)["seq"] for line in (tmp_path / EVENTS).read_bytes().splitlines()
            if line.startswith(b"{")]
    assert seqs == [0, 1, 2, 3, 4]
    writer = SpoolWriter(str(tmp_path / EVENTS))  # a writer opened now continues too
    assert writer.write({"event": "note"}) == 5
    writer.close()


def test_a_final_event_is_written_once(tmp_path):
    run_dir = str(tmp_path)
    assert append_event(run_dir, "started")
    assert append_event(run_dir, "failed", message="disk full")
    assert not append_event(run_dir, "failed", message="disk full")
    assert not append_event(run_dir, "stopped")
    events = [json.loads(line)["event"] for line in (tmp_path / EVENTS).read_bytes().splitlines()]
    assert events == ["started", "failed"]


def _follow_into_store(run_dir, store, run_id):
    out = subprocess.run([sys.executable, "-m", "remote_runner", "follow", str(run_dir)], capture_output=True,
                         timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    messages = FollowDecoder().feed(out.stdout)
    chunks = [m for m in messages if isinstance(m, Chunk)]
    assert isinstance(messages[-1], End) and messages[-1].ended
    store.store_chunks(run_id, 0, chunks)
    return chunks


def test_follow_of_a_run_dir_with_huge_lines_keeps_everything_after_them(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with SpoolWriter(str(run_dir / METRICS)) as writer:
        for step in range(1, 51):
            writer.write({"step": step, "loss": 1.0})
    with open(run_dir / METRICS, "ab") as fh:
        fh.write(_big_record(50, 300_000))  # a record over 64 KiB: kept
        fh.write(b'{"seq": 51, "junk": "' + b"y" * (10 << 20) + b'"\n')  # 10 MB, never closed: one corrupt line
    with SpoolWriter(str(run_dir / METRICS)) as writer:  # continues at 51 past both lines
        for step in range(51, 101):
            writer.write({"step": step, "loss": 0.5})
    append_event(str(run_dir), "started")
    with open(run_dir / EVENTS, "ab") as fh:
        fh.write(b"e" * (MAX_CHUNK + 123) + b"\n")  # an events line longer than a chunk
    append_event(str(run_dir), "finished", exit_code=0)
    write_status(str(run_dir), state="finished", exit_code=0)

    with RunStore(tmp_path / "runs.sqlite3") as store:
        store.create_run("r1", hosts=["local"], run_dirs={0: str(run_dir)}, state="running")
        chunks = _follow_into_store(run_dir, store, "r1")
        oversize = [c for c in chunks if c.oversize]
        assert [(c.spool, c.data) for c in oversize] == [(METRICS, b""), (EVENTS, b"")]
        steps = [r.get("step") for r in store.records("r1", METRICS)]
        assert steps == list(range(1, 51)) + [None] + list(range(51, 101))
        assert [r["seq"] for r in store.records("r1", METRICS)] == list(range(0, 101))
        assert [e["event"] for e in store.records("r1", EVENTS)] == ["started", "finished"]
        record = store.get_run("r1")
        assert record.corrupt_lines == 2  # each huge line counted once, not once per piece
        warnings = [e for e in store.events("r1") if e.get("event") == "warning"]
        assert len(warnings) == 2 and all("oversize line" in w["message"] for w in warnings)
        assert store.offsets("r1")[METRICS] == os.path.getsize(run_dir / METRICS)
        assert store.offsets("r1")[EVENTS] == os.path.getsize(run_dir / EVENTS)


def test_a_record_with_nan_or_infinity_at_any_depth_is_written_with_null_there(tmp_path):
    """A diverged value in a nested list or dict, or behind a torch or numpy scalar, is null in the spool: the
    writer never raises on a value (the hypothesis test of tests/core/test_ingest_bad_values.py drew one)."""
    import numpy as np
    import torch

    path = tmp_path / "metrics.jsonl"
    with SpoolWriter(str(path)) as writer:
        writer.write({"step": 1, "hist": [1.0, float("nan"), {"x": float("-inf")}], "loss": torch.tensor(float("inf")),
                      "lr": np.float32("nan"), "ok": torch.tensor(2.5)})
    (line,) = path.read_text().splitlines()
    record = json.loads(line)
    assert record["hist"] == [1.0, None, {"x": None}] and record["loss"] is None and record["lr"] is None
    assert record["ok"] == 2.5 and record["step"] == 1
