"""Host snapshots for the GPU views, built from real captures (tests/fixtures/gpu, SOURCES.md) the way the
monitor builds them (remote_runner.gpustate), parsed by ddpgui.core.gpus.snapshot.

The captured processes are looked up on this machine as the monitor would on theirs: their pids are not here,
so their owners are "?" with the monitor's own reason (another PID namespace), their names nvidia-smi's.
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from helpers.gpu_fixtures import GPU_FIXTURES
from helpers.gpu_snapshots import A40S, TITANS, query_gpus, with_lost

from ddpgui.core.gpus.snapshot import HostSnapshot, parse_snapshot, parse_snapshot_line
from remote_runner.gpustate import describe_process, parse_smi_table, snapshot

REPO = Path(__file__).resolve().parents[2]
A100S = "smi_summary_a100_sxm4_80gb_525.txt"


def _record(gpus: list[dict], host: str, unplaced=(), cpu=None) -> HostSnapshot:
    record = snapshot(1, "nvidia-smi", gpus, cpu, unplaced=unplaced)
    record["host"] = host
    return parse_snapshot(json.loads(json.dumps(record)))


def table_gpus(name: str, kinds: str = "C") -> list[dict]:
    """A plain nvidia-smi table's GPUs with their processes (of ``kinds``: C compute, G graphics), each looked
    up on this machine as the monitor does (helpers.gpu_snapshots.table_gpus writes "not captured" instead)."""
    table = parse_smi_table((GPU_FIXTURES / name).read_text())
    for gpu in table["gpus"]:
        gpu["processes"] = [describe_process(p["pid"], p["gpu_mem_mib"], p["name"]) for p in table["processes"]
                            if p["gpu"] == gpu["index"] and any(k in p["type"] for k in kinds)]
    return table["gpus"]


def a40_snapshot(host: str = "gpu1", kinds: str = "C", extra=(), unplaced=()) -> HostSnapshot:
    """8x A40 shared by several jobs (python3.8 on 0, julia on 5-7); ``extra``: (GPU, pid, MiB) of processes of
    this machine put on those GPUs, ``unplaced``: (pid, MiB) of processes on no GPU of the host."""
    gpus = table_gpus(A40S, kinds)
    for index, pid, mib in extra:
        gpus[index]["processes"].append(describe_process(pid, mib))
    return _record(gpus, host, unplaced=[describe_process(pid, mib) for pid, mib in unplaced])


def mig_snapshot(host: str = "mig-box") -> HostSnapshot:
    """8x A100 (their captured table) with GPU 1 in MIG mode, its MIG devices from the MIG capture."""
    gpus = table_gpus(A100S)
    migs = parse_smi_table((GPU_FIXTURES / "smi_summary_mig_devices_a100.txt").read_text())["mig_devices"]
    gpus[1]["mig_mode"] = "enabled"
    gpus[1]["mig_devices"] = [{k: d[k] for k in ("gi", "ci", "dev", "mem_used_mib", "mem_total_mib")} for d in migs]
    for gpu in gpus:
        gpu.setdefault("mig_mode", "disabled")
        if gpu["mig_mode"] is None:
            gpu["mig_mode"] = "disabled"
    return _record(gpus, host)


def lost_snapshot(host: str = "titan-box", lost: int = 3) -> HostSnapshot:
    """8x GTX TITAN X with GPU ``lost`` replaced by nvidia-smi's 'Unknown Error' line (as fake_nvidia_smi does)."""
    return _record(with_lost(query_gpus(TITANS), lost), host)


def cpu_snapshot_line() -> str:
    """A real line of ``remote_runner monitor`` on this machine (a CPU host), the second (the first has no CPU %
    yet: it sets the baseline); its stdin closed to end it."""
    child = subprocess.Popen([sys.executable, "-m", "remote_runner", "monitor", "--interval", "0.5"], cwd=REPO,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        child.stdout.readline()
        line = child.stdout.readline()
    finally:
        child.stdin.close()
        child.wait(60)
    return line.decode()


def cpu_snapshot(line: str | None = None) -> HostSnapshot:
    return parse_snapshot_line(line or cpu_snapshot_line())


def with_processes(base: HostSnapshot, count: int, host: str | None = None) -> HostSnapshot:
    """``base`` with ``count`` processes spread over its GPUs (copies of its own, other pids): for the benchmark."""
    record = {"v": base.version, "kind": "host_snapshot", "seq": base.seq, "t": base.t, "host": host or base.host,
              "source": base.source, "cpu": None}
    gpus = [asdict(gpu) for gpu in base.gpus]
    seen = [p for gpu in gpus for p in gpu["processes"] or ()]
    for gpu in gpus:
        gpu["processes"] = []
    for k in range(count):
        process = dict(seen[k % len(seen)], pid=seen[k % len(seen)]["pid"] + k)
        gpus[k % len(gpus)]["processes"].append(process)
    record["gpus"] = gpus
    return parse_snapshot(json.loads(json.dumps(record)))
