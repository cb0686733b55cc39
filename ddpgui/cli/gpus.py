"""``ddpgui gpus HOST [--json] [--watch]``: a host's GPUs, who uses them, and its load, from the host monitor.

One snapshot (``runner monitor`` over the host's connection, ended after it), or with ``--watch`` the
monitor kept running and the screen redrawn at every snapshot until Ctrl-C (exit 130).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from ..core.gpus.monitor import DEFAULT_INTERVAL_S, HostMonitor
from ..core.gpus.snapshot import GpuState, HostSnapshot
from ..core.targets.pool import TargetPool
from .common import EXIT_OK, open_cli_target, terminal_text

#: Seconds to wait for a snapshot (the first may wait up to 30 s for nvidia-smi, plus deploying the runner).
SNAPSHOT_WAIT_S = 120.0
_CLEAR = "\x1b[H\x1b[2J"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gpus", help="a host's GPUs: utilisation, memory, power, temperature, who runs what; "
                                    "load and top processes on a CPU host")
    p.add_argument("host", help="host profile name; 'local' is this computer")
    p.add_argument("--json", action="store_true", help="the snapshot as JSON (docs/PROTOCOL.md, Host monitor)")
    p.add_argument("--watch", action="store_true", help="redraw at every snapshot (about every 2 s) until Ctrl-C")
    p.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, help=argparse.SUPPRESS)
    p.add_argument("--accept-new-host-key", action="store_true", help="trust an unknown SSH host key without asking")
    p.set_defaults(func=cmd_gpus)


def cmd_gpus(args: argparse.Namespace) -> int:
    pool = TargetPool(lambda name: open_cli_target(name, args))
    monitor = HostMonitor(args.host, lambda: pool.target(args.host), interval_s=args.interval, grace_s=0)
    monitor.acquire()
    try:
        snapshot = monitor.wait_snapshot(SNAPSHOT_WAIT_S)
        if not args.watch:
            if snapshot.cpu and any(top.cpu_pct is None for top in snapshot.cpu.top):  # the first sets the baseline
                snapshot = monitor.wait_snapshot(SNAPSHOT_WAIT_S, after_seq=snapshot.seq)
            _show(args.host, snapshot, args.json)
            return EXIT_OK
        while True:  # Ctrl-C ends it: the CLI says "interrupted" and exits 130
            if not args.json and sys.stdout.isatty():
                print(_CLEAR, end="")
            _show(args.host, snapshot, args.json)
            sys.stdout.flush()
            snapshot = monitor.wait_snapshot(SNAPSHOT_WAIT_S, after_seq=snapshot.seq)
    finally:
        monitor.release()
        pool.close()


def _show(name: str, snapshot: HostSnapshot, as_json: bool) -> None:
    if as_json:
        print(json.dumps(snapshot_dict(snapshot), sort_keys=True))
        return
    for line in snapshot_lines(snapshot, name):
        print(terminal_text(line))


def snapshot_dict(snapshot: HostSnapshot) -> dict:
    """The snapshot as the JSON object of docs/PROTOCOL.md (as parsed: every field the client reads)."""
    return {"v": snapshot.version, "kind": "host_snapshot", **{
        key: value for key, value in dataclasses.asdict(snapshot).items() if key != "version"}}


def _value(value: float | int | None, unit: str, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _memory(used: int | None, total: int | None) -> str:
    return f"{'-' if used is None else used}/{'-' if total is None else total} MiB"


def _state(gpu: GpuState) -> str:
    if gpu.state != "ok":
        return gpu.state + (f" ({gpu.message})" if gpu.message else "")
    return "free" if gpu.is_free() else "busy"


def snapshot_lines(snapshot: HostSnapshot, name: str | None = None) -> list[str]:
    """The text of ``ddpgui gpus``: per GPU its values and processes, then the CPU side; ``name``: the profile's."""
    host = snapshot.host if name in (None, snapshot.host) else f"{name} ({snapshot.host})"
    lines = [f"{host}: {snapshot.summary()}" + (f" (from {snapshot.source})" if snapshot.gpus else "")]
    if snapshot.gpus:
        lines.append(f"{'GPU':>3}  {'name':<26} {'util':>5} {'memory':>19} {'power':>7} {'temp':>5}  state")
        for gpu in snapshot.gpus:
            lines.append(f"{'?' if gpu.index is None else gpu.index:>3}  {(gpu.name or '?')[:26]:<26} "
                         f"{_value(gpu.util_pct, '%'):>5} {_memory(gpu.mem_used_mib, gpu.mem_total_mib):>19} "
                         f"{_value(gpu.power_w, ' W'):>7} {_value(gpu.temp_c, ' C'):>5}  {_state(gpu)}")
            if gpu.mig_mode == "enabled":
                lines.append(f"{'':>5}MIG on: {len(gpu.mig_devices)} device(s)")
            if gpu.processes is None:
                lines.append(f"{'':>5}processes: not visible on this host")
            for proc in gpu.processes or ():
                lines.append(f"{'':>5}{proc.user:<12} {proc.pid:>8}  {_value(proc.gpu_mem_mib, ' MiB'):>10}  "
                             f"{proc.command[:80]}" + (f"  ({proc.problem})" if proc.problem else ""))
        for proc in snapshot.unplaced_processes:
            lines.append(f"  on no listed GPU: {proc.describe()}")
    cpu = snapshot.cpu
    if cpu is not None:
        load = " ".join(_value(v, "", 2) for v in (cpu.load_1m, cpu.load_5m, cpu.load_15m))
        cpus = f" ({cpu.cpu_count} CPUs)" if cpu.cpu_count else ""
        lines.append(f"load {load}{cpus}, memory {_memory(cpu.mem_used_mib, cpu.mem_total_mib)}")
        if cpu.top:
            lines.append(f"{'pid':>8}  {'user':<12} {'CPU%':>6} {'RSS MiB':>8}  command")
            for top in cpu.top:
                lines.append(f"{top.pid:>8}  {top.user[:12]:<12} {_value(top.cpu_pct, '', 1):>6} "
                             f"{_value(top.rss_mib, '', 0):>8}  {top.command[:80]}")
    for error in snapshot.errors:
        lines.append(f"note: {error}")
    return lines
