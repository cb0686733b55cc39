"""HostSnapshots built the way the host monitor builds them, from the real captures in tests/fixtures/gpu
(SOURCES.md): ``--query-gpu`` output (8x GTX TITAN X, 16x V100) and plain nvidia-smi tables with their
process lists (8x A40 shared by several jobs, 8x A40 with a GPU showing ERR!); and the fake nvidia-smi
(fake_nvidia_smi.py, replaying the TITAN X capture) in a folder to put first on a PATH (fake_smi_bin), or put
first on this process's (fake_smi_on_path)."""
import json
import os
import re
import shlex
import sys

from ddpgui.core.gpus.snapshot import HostSnapshot, parse_snapshot_line
from helpers.gpu_fixtures import GPU_FIXTURES
from remote_runner.gpustate import parse_lost_line, parse_smi_table, read_query_output, snapshot

TITANS = "smi_query_titanx_x8_noheader_nounits.txt"  # GPU 0 idle (802 MiB), 1-7 busy (6.4-10 GiB, no process list)
A40S = "smi_summary_a40_x8_510.txt"  # python3.8 on GPU 0, julia on 5-7, GPUs 1-4 free (Xorg only)
A40S_ERR = "smi_summary_a40_x8_err_525.txt"  # GPU 4 shows ERR!, a python process on GPU 2


def monitor_snapshot(gpus: list[dict], host: str) -> HostSnapshot:
    """The snapshot of the JSON line the monitor prints for these GPU entries (the CPU side left out)."""
    record = snapshot(1, "nvidia-smi", gpus, None)
    record["host"] = host
    return parse_snapshot_line(json.dumps(record))


def query_gpus(name: str) -> list[dict]:
    text = (GPU_FIXTURES / name).read_text()
    first, _, rest = text.partition("\n")
    fields = re.search(r"--query-gpu=(\S+)", first).group(1).split(",") if "noheader" in first else None
    gpus, _ = read_query_output(rest if first.startswith("$ ") else text, "gpu", fields)
    return gpus


def query_snapshot(name: str, host: str = "gpu-box") -> HostSnapshot:
    return monitor_snapshot(query_gpus(name), host)


def table_gpus(name: str) -> list[dict]:
    """A plain nvidia-smi table's GPUs with their compute processes (type C); owners not captured: "?"."""
    table = parse_smi_table((GPU_FIXTURES / name).read_text())
    for gpu in table["gpus"]:
        gpu["processes"] = [{"pid": p["pid"], "user": "?", "command": p["name"], "gpu_mem_mib": p["gpu_mem_mib"],
                             "problem": "not captured"} for p in table["processes"]
                            if p["gpu"] == gpu["index"] and "C" in p["type"]]
    return table["gpus"]


def table_snapshot(name: str, host: str = "gpu-box") -> HostSnapshot:
    return monitor_snapshot(table_gpus(name), host)


def with_lost(gpus: list[dict], index: int) -> list[dict]:
    """These GPUs with GPU ``index`` replaced by the real line of a GPU that fell off the bus (its index gone)."""
    lost = parse_lost_line((GPU_FIXTURES / "smi_lost_unknown_error.txt").read_text())
    return [lost if gpu["index"] == index else gpu for gpu in gpus]


def fake_smi_bin(tmp_path) -> str:
    """A folder ``tmp_path/bin`` whose nvidia-smi is the fake (fake_nvidia_smi.py: the TITAN X capture, or
    FAKE_SMI_CAPTURE's); returns its path, to be put first on a PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!%s\nimport runpy, sys\nsys.argv[0] = %r\nrunpy.run_path(%r, run_name='__main__')\n"
                   % (sys.executable, str(smi), str(GPU_FIXTURES / "fake_nvidia_smi.py")))
    smi.chmod(0o755)
    return str(bin_dir)


def fake_smi_on_path(tmp_path, monkeypatch):
    """nvidia-smi on PATH (for this process and what it starts) is the fake replaying the TITAN X capture;
    returns the log of its starts (``pid argv`` lines)."""
    log = tmp_path / "smi.log"
    log.write_text("")
    monkeypatch.setenv("PATH", f"{fake_smi_bin(tmp_path)}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SMI_LOG", str(log))
    return log


def two_idle_v100s(tmp_path) -> str:
    """A capture of a host with two idle GPUs: the 16x V100 capture's header and its GPUs 0 and 2 (5 and 7 MiB
    used), which the fake nvidia-smi numbers 0 and 1; returns its path (for FAKE_SMI_CAPTURE)."""
    lines = (GPU_FIXTURES / "smi_query_v100_sxm3_32gb_x16.txt").read_text().splitlines()
    path = tmp_path / "smi_query_v100_x2.txt"
    path.write_text("\n".join([lines[0], lines[1], lines[3]]) + "\n")
    return str(path)


def gpu_host_env(tmp_path, capture: str) -> dict:
    """What a process needs to see this computer as a GPU host: the fake nvidia-smi first on PATH, replaying
    ``capture`` (a name in tests/fixtures/gpu or a path), its starts logged to ``tmp_path/smi.log``."""
    log = tmp_path / "smi.log"
    log.touch()
    return {"PATH": f"{fake_smi_bin(tmp_path)}:{os.environ['PATH']}", "FAKE_SMI_CAPTURE": capture,
            "FAKE_SMI_LOG": str(log)}


def gpu_host_python(tmp_path, capture: str) -> str:
    """A Python for a host profile (``--python``) whose host has GPUs: this Python, started with
    :func:`gpu_host_env`, so the runner and what it starts (the host's queue) see the fake nvidia-smi."""
    wrapper = tmp_path / "bin" / "python-on-gpu-host"
    env = " ".join(f"{name}={shlex.quote(value)}" for name, value in gpu_host_env(tmp_path, capture).items())
    wrapper.write_text(f"#!/bin/sh\nexport {env}\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)
