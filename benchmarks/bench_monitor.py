"""Issue 15: what the host monitor (``python -m remote_runner monitor``) costs the host it watches.

For each source it can use on a machine like the users' -- ``none`` (a CPU host: load, memory and the top
processes from /proc) and ``nvidia-smi`` (two long-lived ``-lms`` streams; here the fixture's fake nvidia-smi
replaying the real 8x TITAN X capture, since this machine has no GPU) -- the sampler runs at a short interval
for a warm-up and then ``SNAPSHOTS`` snapshots, in ``ROUNDS`` rounds interleaved between the sources.  Measured:

* the sampler's own CPU time per snapshot (utime + stime from /proc/PID/stat over the steady part, so the
  interpreter's start is left out), and what that is at the app's 2 s interval as a share of one core;
  target: at most 1 % of a core (20 ms per snapshot).  The fake nvidia-smi's own CPU is not counted (a real
  nvidia-smi's is the driver's work, which NVML would do as well); it is printed apart;
* processes started per snapshot after the first: nvidia-smi is started once per stream (2), never per sample;
  target: 0;
* the same on a crowded host: a shared lab machine runs hundreds of processes, and the sampler reads /proc for
  the top processes and the owners of GPU processes, so the CPU host is measured again with ``CROWD`` extra
  (sleeping) processes;
* the client's cost of reading one snapshot line (``parse_snapshot_line``, 8 GPUs), p50 in µs.

The spread (min..max over the rounds) is printed beside each verdict.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import Row, median, percentile

REPO = Path(__file__).resolve().parents[1]
FAKE_SMI = REPO / "tests" / "fixtures" / "gpu" / "fake_nvidia_smi.py"
INTERVAL_S = 0.2
WARMUP = 5
SNAPSHOTS = int(os.environ.get("DDPGUI_BENCH_MONITOR_SNAPSHOTS", "40"))
ROUNDS = 3
APP_INTERVAL_S = 2.0
CROWD = 500
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """utime + stime of a live process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _fake_smi_path(tmp: Path) -> str:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_SMI} \"$@\"\n")
    smi.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def _measure(source: str, tmp: Path) -> dict:
    """One sampler run: CPU per steady snapshot (sampler, fake nvidia-smi), starts after the first snapshot,
    and the last line it printed."""
    log = tmp / f"smi-{source}-{time.monotonic_ns()}.log"
    env = dict(os.environ, PYTHONPATH=str(REPO), FAKE_SMI_LOG=str(log), PATH=_fake_smi_path(tmp))
    proc = subprocess.Popen([sys.executable, "-m", "remote_runner", "monitor", "--interval", str(INTERVAL_S),
                             "--source", source], cwd=str(REPO), env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = ""
        for _ in range(WARMUP):
            line = proc.stdout.readline()
        starts_after_first = len(log.read_text().splitlines()) if log.exists() else 0
        smi_pids = [int(row.split()[0]) for row in log.read_text().splitlines()] if log.exists() else []
        cpu0, smi0 = _cpu_s(proc.pid), sum(_cpu_s(pid) for pid in smi_pids)
        for _ in range(SNAPSHOTS):
            line = proc.stdout.readline()
        cpu1, smi1 = _cpu_s(proc.pid), sum(_cpu_s(pid) for pid in smi_pids)
        starts_end = len(log.read_text().splitlines()) if log.exists() else 0
    finally:
        proc.stdin.close()
        proc.wait(30)
    return {"cpu_ms": (cpu1 - cpu0) / SNAPSHOTS * 1e3, "smi_ms": (smi1 - smi0) / SNAPSHOTS * 1e3,
            "starts": starts_end, "new_starts": starts_end - starts_after_first, "line": line}


def _parse_us(line: str, calls: int = 2000) -> list[float]:
    from ddpgui.core.gpus.snapshot import parse_snapshot_line

    times = []
    for _ in range(calls):
        start = time.perf_counter()
        parse_snapshot_line(line)
        times.append((time.perf_counter() - start) * 1e6)
    return times


def run() -> list[Row]:
    runs: dict[str, list[dict]] = {"none": [], "nvidia-smi": [], "crowded": []}
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(ROUNDS):  # interleaved: a busy moment of the machine falls on every configuration
            for name in runs:
                crowd = [subprocess.Popen(["sleep", "600"]) for _ in range(CROWD if name == "crowded" else 0)]
                try:
                    counts[name] = sum(1 for entry in os.listdir("/proc") if entry.isdigit())
                    runs[name].append(_measure("none" if name == "crowded" else name, Path(tmp)))
                finally:
                    for proc in crowd:
                        proc.kill()
                        proc.wait()
    rows = []
    budget_ms = APP_INTERVAL_S * 1e3 * 0.01
    labels = {"none": "CPU host (/proc)", "nvidia-smi": "GPU host (2 nvidia-smi streams)",
              "crowded": f"CPU host with {CROWD} more processes"}
    for source, results in runs.items():
        cpu = [r["cpu_ms"] for r in results]
        share = median(cpu) / (APP_INTERVAL_S * 1e3) * 100
        label, processes = labels[source], counts[source]
        rows.append(Row(f"host monitor, {label}: sampler CPU per snapshot", median(cpu), "ms",
                        f"<= {budget_ms:g} ms", max(cpu) <= budget_ms,
                        f"{share:.2f}% of a core at {APP_INTERVAL_S:g} s; spread {min(cpu):.2f}..{max(cpu):.2f} ms "
                        f"over {ROUNDS} rounds of {SNAPSHOTS}; {processes} processes on this host"))
        if source == "nvidia-smi":
            new = max(r["new_starts"] for r in results)
            smi = [r["smi_ms"] for r in results]
            rows.append(Row("host monitor, GPU host: processes started after the first snapshot", new, "starts",
                            "0", new == 0, f"nvidia-smi started {results[0]['starts']} times in all (one per "
                            f"stream); the fake nvidia-smi itself used {median(smi):.2f} ms per snapshot"))
    parse = _parse_us(runs["nvidia-smi"][-1]["line"])
    rows.append(Row("host monitor, client: read one 8-GPU snapshot line (p50)", percentile(parse, 50), "µs", "",
                    None, f"p90 {percentile(parse, 90):.0f} µs over {len(parse)} reads"))
    return rows


if __name__ == "__main__":
    from benchmarks.__main__ import report

    sys.exit(report(run()))
