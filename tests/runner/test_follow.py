"""follow: every complete record exactly once, from any offsets, until the run has ended."""
import json
import os
import subprocess
import sys
import threading
import time

from ddpgui.core.runs.protocol import Chunk, End, FollowDecoder, Heartbeat, parse_records
from remote_runner.spools import SpoolWriter
from remote_runner.status import write_status

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _follow(run_dir, offsets=None, once=False, timeout=60):
    argv = [sys.executable, "-m", "remote_runner", "follow", str(run_dir), "--from", json.dumps(offsets or {})]
    if once:
        argv.append("--once")
    out = subprocess.run(argv, capture_output=True, timeout=timeout, cwd=REPO).stdout
    return FollowDecoder().feed(out)


def _records(messages, spool="metrics.jsonl"):
    recs = []
    for m in messages:
        if isinstance(m, Chunk) and m.spool == spool:
            recs += parse_records(m.data)[0]
    return recs


def test_live_run_streams_everything_then_ends(tmp_path):
    write_status(str(tmp_path), state="running", pid=os.getpid())
    writer = SpoolWriter(str(tmp_path / "metrics.jsonl"))

    def produce():
        for step in range(300):
            writer.write({"step": step, "loss": 1.0 / (step + 1)})
            if step % 50 == 0:
                time.sleep(0.05)
        writer.close()
        (tmp_path / "stdout.log").write_bytes(b"done\n")
        write_status(str(tmp_path), state="finished")

    thread = threading.Thread(target=produce)
    thread.start()
    messages = _follow(tmp_path)
    thread.join()
    recs = _records(messages)
    assert [r["seq"] for r in recs] == list(range(300))
    assert isinstance(messages[-1], End) and messages[-1].ended and messages[-1].status["state"] == "finished"
    assert b"done\n" in b"".join(m.data for m in messages if isinstance(m, Chunk) and m.spool == "stdout.log")


def test_resume_from_offsets_has_no_gap_and_no_duplicate(tmp_path):
    with SpoolWriter(str(tmp_path / "metrics.jsonl")) as writer:
        for step in range(100):
            writer.write({"step": step})
    write_status(str(tmp_path), state="finished")
    first = _follow(tmp_path)
    chunk = next(m for m in first if isinstance(m, Chunk))
    # Resume from the middle of the file, at a line boundary.
    cut = chunk.data.index(b"\n", len(chunk.data) // 2) + 1
    resumed = _follow(tmp_path, {"metrics.jsonl": cut})
    head = parse_records(chunk.data[:cut])[0]
    assert [r["seq"] for r in head + _records(resumed)] == list(range(100))
    assert resumed[-1].offsets["metrics.jsonl"] == os.path.getsize(tmp_path / "metrics.jsonl")


def test_partial_line_waits_while_live_and_is_shipped_once_ended(tmp_path):
    (tmp_path / "metrics.jsonl").write_bytes(b'{"seq":0,"step":1}\n{"seq":1,"st')
    write_status(str(tmp_path), state="running", pid=os.getpid())
    live = _follow(tmp_path, once=True)
    assert [m.data for m in live if isinstance(m, Chunk)] == [b'{"seq":0,"step":1}\n']
    assert live[-1].ended is False
    write_status(str(tmp_path), state="failed")
    final = _follow(tmp_path, {"metrics.jsonl": len(b'{"seq":0,"step":1}\n')})
    chunks = [m for m in final if isinstance(m, Chunk)]
    records, bad = parse_records(chunks[0].data)
    assert records == [] and bad == [b'{"seq":1,"st']
    assert chunks[0].end == os.path.getsize(tmp_path / "metrics.jsonl")


def test_heartbeats_while_nothing_happens(tmp_path):
    write_status(str(tmp_path), state="running", pid=os.getpid())
    proc = subprocess.Popen([sys.executable, "-m", "remote_runner", "follow", str(tmp_path)], cwd=REPO,
                            stdout=subprocess.PIPE)
    try:
        decoder, beats = FollowDecoder(), []
        while len(beats) < 2:
            beats += [m for m in decoder.feed(os.read(proc.stdout.fileno(), 4096)) if isinstance(m, Heartbeat)]
        assert beats[0].state == "running"
    finally:
        proc.kill()
        proc.wait()


def test_dead_supervisor_ends_the_stream_as_failed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_status(str(tmp_path), state="running", pid=dead.pid)
    messages = _follow(tmp_path)
    assert messages[-1].ended and messages[-1].status["state"] == "failed"
    assert "supervisor is gone" in messages[-1].status["message"]
