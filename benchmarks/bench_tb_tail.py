"""Issue 21: reading the TensorBoard event files a script writes, while they grow.

1. Host cost: a writer process (torch.utils.tensorboard.SummaryWriter, 10 tags × 100 steps a second =
   1,000 scalars/s, flushed every 0.1 s) grows an event file for SECONDS; in this process the supervisor's own
   LogFileWatcher (polling every 0.25 s) tails it into a MetricSink and a metrics spool. This process does
   nothing else, so its CPU time over the wall time is the host's cost; target ≤ 1% of one core. The
   protobuf import the first event file costs (once per run, about 0.1 s) is done before the clock starts.
2. Latency: a real run on This computer (``RunManager.launch`` of a script that logs 50 scalars a step, 20
   steps a second, flushing after each step and noting when), followed by the client as the app follows it:
   the time from a step's flush to its record committed in the client's store (a manager listener), p50 and
   p99; target ≤ 1 s.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.common import Row, percentile

REPO = Path(__file__).resolve().parents[1]
SECONDS = float(os.environ.get("DDPGUI_BENCH_TB_SECONDS", "10"))
ROUNDS = int(os.environ.get("DDPGUI_BENCH_TB_ROUNDS", "3"))
WRITER = '''import sys, time
from torch.utils.tensorboard import SummaryWriter

logdir, seconds = sys.argv[1], float(sys.argv[2])
writer = SummaryWriter(logdir, flush_secs=1)
start, step = time.monotonic(), 0
while time.monotonic() - start < seconds:
    step += 1
    for tag in range(10):
        writer.add_scalar("train/metric_%d" % tag, step * 0.001 + tag, step)
    if step % 10 == 0:
        writer.flush()
    time.sleep(max(0.0, start + step * 0.01 - time.monotonic()))  # 100 steps a second
writer.close()
print(step * 10)
'''
LOGGING_SCRIPT = '''import json, sys, time
from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter("tb")
flushed = open("flushed.jsonl", "w")
for step in range(1, int(sys.argv[1]) + 1):
    for tag in range(50):
        writer.add_scalar("m/%d" % tag, step + tag * 0.01, step)
    writer.flush()
    flushed.write(json.dumps({"step": step, "t": time.time()}) + "\\n")
    flushed.flush()
    time.sleep(0.05)
writer.close()
'''


def _host_cost(tmp: Path) -> tuple[float, int]:
    """(share of one core, scalars read) for one writer run of SECONDS."""
    from remote_runner.scriptread.files import WRITTEN_FILES, LogFileWatcher
    from remote_runner.scriptread.sink import MetricSink
    from remote_runner.scriptread.tbevents import EventFileTail
    from remote_runner.spools import SpoolWriter

    run_dir, logdir = tmp / "run", tmp / "tb"
    run_dir.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(logdir), str(SECONDS)], stdout=subprocess.PIPE,
                              text=True)
    deadline = time.monotonic() + 30
    while not list(logdir.glob("events.out.tfevents.*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    (event_file,) = logdir.glob("events.out.tfevents.*")
    (run_dir / WRITTEN_FILES).write_text(json.dumps({"path": str(event_file), "kind": "tensorboard"}) + "\n")
    EventFileTail(str(event_file)).read()  # imports the host's TensorBoard protobufs: once per run, not per scalar
    spool = SpoolWriter(str(run_dir / "metrics.jsonl"))
    sink = MetricSink(spool, lambda event, /, **fields: None)
    watcher = LogFileWatcher(str(run_dir), sink)
    cpu0, wall0 = time.process_time(), time.monotonic()
    watcher.start()
    writer.wait(timeout=SECONDS + 60)
    watcher.stop()
    sink.close()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    spool.close()
    written = int(writer.stdout.read().strip() or 0)
    read = sum(len(json.loads(line)) - 5 for line in (run_dir / "metrics.jsonl").read_text().splitlines())
    assert read == written, (read, written)  # every scalar, once (5 keys of a record are bookkeeping)
    return cpu / wall, read


def _latency(tmp: Path) -> list[float]:
    """Seconds from each step's flush to its record committed at the client, one run of about 4 s."""
    from ddpgui.core.hosts import HostStore
    from ddpgui.core.runs.manager import RunManager
    from ddpgui.core.store import RunStore
    from ddpgui.core.targets.factory import open_target

    folder = tmp / "script"
    folder.mkdir()
    (folder / "train.py").write_text(LOGGING_SCRIPT)
    hosts, store = HostStore(tmp / "hosts.json"), RunStore(tmp / "runs.sqlite3")
    manager = RunManager(store, hosts, lambda name: open_target(name, hosts))
    arrived: dict[int, float] = {}
    lock = threading.Lock()

    def stamp(update) -> None:
        now = time.time()
        with lock:
            for record in update.records.get("metrics.jsonl", ()):
                arrived.setdefault(int(record["step"]), now)

    unsubscribe = manager.subscribe(stamp)
    try:
        record = manager.launch("local", {"mode": "script", "nproc_per_node": 1,
                                          "script": {"dir": str(folder), "entry": "train.py", "args": ["80"]}})
        final = manager.wait(record.id, timeout=300)
        assert final.state == "finished", (final.message, final.hint)
    finally:
        unsubscribe()
        manager.close()
        store.close()
    flushed = {r["step"]: r["t"] for r in map(json.loads, (folder / "flushed.jsonl").read_text().splitlines())}
    # the first step waits FILE_GRACE_S by design (a printed source may claim its names): the rest is the stream
    return [arrived[s] - t for s, t in flushed.items() if s in arrived and s > 1]


def run() -> list[Row]:
    os.environ.setdefault("DDPGUI_DATA_DIR", tempfile.mkdtemp(prefix="ddpgui-bench-data-"))
    shares, latencies, scalars = [], [], 0
    for _ in range(ROUNDS):
        with tempfile.TemporaryDirectory() as tmp:
            share, read = _host_cost(Path(tmp))
            shares.append(share)
            scalars += read
    with tempfile.TemporaryDirectory() as tmp:
        latencies = _latency(Path(tmp))
    worst = max(shares)
    return [
        Row("TensorBoard tailing: host CPU at 1,000 scalars/s", 100 * worst, "% of a core", "≤ 1%", worst <= 0.01,
            f"worst of {ROUNDS} rounds of {SECONDS:g} s ({', '.join(f'{100 * s:.2f}' for s in shares)}); "
            f"{scalars} scalars, each read once"),
        Row("TensorBoard tailing: flush → client store, p50", percentile(latencies, 50), "s", "≤ 1 s",
            percentile(latencies, 50) <= 1.0, f"{len(latencies)} steps of 50 scalars"),
        Row("TensorBoard tailing: flush → client store, p99", percentile(latencies, 99), "s", "≤ 1 s",
            percentile(latencies, 99) <= 1.0, f"max {max(latencies):.3f} s"),
    ]


if __name__ == "__main__":
    from benchmarks.__main__ import report

    sys.exit(report(run()))
