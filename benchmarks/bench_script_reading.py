"""Issue 21: what reading a script's output costs the script.

A chatty script (a CPU step of fixed work, 100 log lines a step: about 100,000 lines a second, 1 in 100 a
metric line, and a tqdm bar on stderr redrawing at 10 Hz) measures its own steps per second over a fixed
time. It runs, in turns, under ddpgui (``ddpgui launch local --script``: rank 0's output through the FIFOs,
copied to the logs and read for metrics by the supervisor) and under plain torchrun with its output sent to
/dev/null, with Python's own buffering (``PYTHONUNBUFFERED`` unset: the strictest baseline, a write per 8 KiB).
The ratio of the two rates, per pair of runs, is the cost; target ≥ 0.98 (no more than 2% slower).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import Row, median, percentile

REPO = Path(__file__).resolve().parents[1]
PAIRS = int(os.environ.get("DDPGUI_BENCH_READING_PAIRS", "4"))
SECONDS = float(os.environ.get("DDPGUI_BENCH_READING_SECONDS", "6"))
#: Items of a step's work: about 1 ms on a 2020s core, so that the script prints about 100,000 lines a second.
WORK = os.environ.get("DDPGUI_BENCH_READING_WORK", "12000")
CHATTY = '''import json, sys, time
from tqdm import tqdm

seconds, out = float(sys.argv[1]), sys.argv[2]
bar = tqdm(desc="work", mininterval=0.1, file=sys.stderr)  # redraws at most 10 times a second
work = list(range(int(sys.argv[3])))
steps = lines = 0
start = time.perf_counter()
while time.perf_counter() - start < seconds:
    sum(x * x for x in work)  # the step's work
    for i in range(99):
        print("worker 3: batch %d of shard %d decoded, %d samples in the queue" % (steps, i, 4096 - i))
    print("step %d loss %.4f lr 0.0003" % (steps, 1.0 / (1 + steps)))
    lines += 100
    steps += 1
    bar.set_postfix(loss=1.0 / (1 + steps), refresh=False)
    bar.update(1)
elapsed = time.perf_counter() - start
bar.close()
with open(out, "w") as fh:
    json.dump({"steps_per_s": steps / elapsed, "lines_per_s": lines / elapsed}, fh)
'''


def _plain(folder: Path, result: Path) -> dict:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
            str(folder / "chatty.py"), str(SECONDS), str(result), WORK]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    subprocess.run(argv, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, check=True,
                   env=env)
    return json.loads(result.read_text())


def _ddpgui(folder: Path, result: Path, env: dict) -> dict:
    argv = [sys.executable, "-m", "ddpgui", "launch", "local", "--script", str(folder), "--entry", "chatty.py",
            "--nproc", "1", "--", str(SECONDS), str(result), WORK]
    out = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=True).stdout
    run_dir = Path(json.loads(out)["run_dir"])
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        status = json.loads((run_dir / "status.json").read_text())
        if status.get("state") in ("finished", "failed", "stopped"):
            break
        time.sleep(0.5)
    assert status["state"] == "finished", status
    metrics = (run_dir / "metrics.jsonl").read_text().count("\n")
    return dict(json.loads(result.read_text()), records=metrics, log_bytes=(run_dir / "stdout.log").stat().st_size)


def _reports_scan() -> Row:
    """What reading the start-up's settings costs: SettingsReports over its 4 MiB of a stream (the chatty
    script's lines, Transformers' TrainingArguments among them), in the pump's 64 KiB chunks."""
    from remote_runner.scriptread.reports import SCAN_BYTES, SettingsReports

    line = b"worker 3: batch 17 of shard 4 decoded, 4092 samples in the queue\n"
    head = b"INFO - __main__ - Training/evaluation parameters TrainingArguments(bf16=True, fp16=False, " \
           b"per_device_train_batch_size=8, torch_compile=False)\n"
    data = head + line * (SCAN_BYTES // len(line))
    times = []
    for _ in range(20):
        reports = SettingsReports(lambda event, **fields: None)
        start = time.perf_counter()
        for i in range(0, len(data), 1 << 16):
            reports.feed("stdout", data[i:i + (1 << 16)])
        times.append((time.perf_counter() - start) * 1000)
        assert reports.reported == {"precision": "bf16", "compile": "off", "batch_size": 8}, reports.reported
    return Row("script reports: the start-up's 4 MiB scanned for settings", median(times), "ms", "< 100",
               median(times) < 100, f"p90 {percentile(times, 90):.1f} ms, min {min(times):.1f} ms over 20 scans; once "
               "per run, on the supervisor's thread; later output costs nothing")


def run() -> list[Row]:
    ratios, rates, read = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "chatty"
        folder.mkdir()
        (folder / "chatty.py").write_text(CHATTY)
        env = dict(os.environ, DDPGUI_DATA_DIR=f"{tmp}/data", DDPGUI_CONFIG_DIR=f"{tmp}/config")
        for i in range(PAIRS):
            order = (("plain", _plain), ("ddpgui", _ddpgui)) if i % 2 == 0 else (("ddpgui", _ddpgui), ("plain", _plain))
            got = {}
            for name, how in order:
                result = Path(tmp) / f"{name}-{i}.json"
                got[name] = how(folder, result, env) if name == "ddpgui" else how(folder, result)
            ratios.append(got["ddpgui"]["steps_per_s"] / got["plain"]["steps_per_s"])
            rates.append(got["plain"]["lines_per_s"])
            read.append(got["ddpgui"]["records"] / (got["ddpgui"]["steps_per_s"] * SECONDS))
    spread = f"pairs {min(ratios):.3f}–{max(ratios):.3f} over {PAIRS} interleaved pairs of {SECONDS:g} s"
    return [
        Row("script reading: steps/s under ddpgui ÷ output to /dev/null", median(ratios), "ratio", "≥ 0.98",
            median(ratios) >= 0.98, spread),
        Row("script reading: lines printed per second", median(rates), "lines/s", "≈ 100,000", None,
            "1 in 100 a metric line, a tqdm bar at 10 Hz on stderr"),
        Row("script reading: metric lines stored ÷ printed", median(read), "ratio", "1", None,
            "every step's metric line is a record"),
        _reports_scan(),
    ]


if __name__ == "__main__":
    from benchmarks.__main__ import report

    sys.exit(report(run()))
