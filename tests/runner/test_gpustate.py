"""Host snapshots (remote_runner.gpustate): real nvidia-smi captures parsed (tests/fixtures/gpu, SOURCES.md),
MIG, lost GPUs, processes whose owner or name cannot be read, NVML through the fake pynvml fed with captured
values, and the CPU side read from this machine's real /proc."""
import json
import os
import pwd
import re
import subprocess
import sys
import time
import types

import pytest
from helpers.gpu_fixtures import GPU_FIXTURES, fake_pynvml_fixture

from remote_runner import gpustate
from remote_runner.gpustate import (
    HostNvml,
    ProcessTable,
    attach_processes,
    bus_key,
    describe_process,
    host_cpu,
    parse_app_row,
    parse_gpu_row,
    parse_lost_line,
    parse_smi_table,
    process_owner,
    read_query_output,
    snapshot,
)


def capture(name):
    """(query fields from the `$ command` line when the output has no header, else None; the output)."""
    text = (GPU_FIXTURES / name).read_text()
    first, _, rest = text.partition("\n")
    if not first.startswith("$ "):
        return None, text
    query = re.search(r"--query-(?:gpu|compute-apps)=(\S+)", first)
    return (query.group(1).split(",") if query and "noheader" in first else None), rest


QUERY_CAPTURES = sorted(p.name for p in GPU_FIXTURES.glob("smi_query_*.txt"))
APP_CAPTURES = sorted(p.name for p in GPU_FIXTURES.glob("smi_apps_*.txt"))
TABLE_CAPTURES = sorted(p.name for p in GPU_FIXTURES.glob("smi_summary_*.txt"))
LOST_CAPTURES = sorted(p.name for p in GPU_FIXTURES.glob("smi_lost_*.txt"))


@pytest.mark.parametrize("name", QUERY_CAPTURES)
def test_every_gpu_query_capture_parses(name):
    fields, text = capture(name)
    gpus, other = read_query_output(text, "gpu", fields)
    assert other == [] and len(gpus) == len(text.strip().splitlines()) - (fields is None)
    assert [gpu["index"] for gpu in gpus] == list(range(len(gpus)))
    for gpu in gpus:
        assert gpu["state"] == "ok" and set(gpu) == set(gpustate.new_gpu(0))
        assert all(gpu[key] is None or isinstance(gpu[key], int) for key in ("util_pct", "mem_used_mib",
                                                                            "mem_total_mib", "temp_c"))
    json.dumps(gpus)


@pytest.mark.parametrize("name", APP_CAPTURES)
def test_every_compute_apps_capture_parses(name):
    fields, text = capture(name)
    apps, other = read_query_output(text, "apps", fields)
    assert other == [] and len(apps) == len(text.strip().splitlines()) - 1


def test_eight_titan_x_with_their_uuids():
    fields, text = capture("smi_query_titanx_x8_noheader_nounits.txt")
    gpus, _ = read_query_output(text, "gpu", fields)
    assert len(gpus) == 8 and {gpu["name"] for gpu in gpus} == {"GeForce GTX TITAN X"}
    assert gpus[1]["uuid"] == "GPU-86fe97db-bf54-a056-4e8d-9b07e1a298e7"
    assert (gpus[1]["mem_used_mib"], gpus[1]["mem_total_mib"], gpus[1]["util_pct"], gpus[1]["temp_c"]) == \
        (10032, 12206, 86, 54)
    assert gpus[0]["mem_used_mib"] == 802 and gpus[0]["power_w"] is None and gpus[0]["processes"] is None


def test_units_and_missing_values():
    _, text = capture("smi_query_gtx1080ti_gtx1060.txt")
    first, second = read_query_output(text, "gpu")[0]
    assert (first["mem_used_mib"], first["mem_total_mib"], first["power_w"]) == (2856, 11175, 106.56)
    assert (second["mem_used_mib"], second["util_pct"]) == (4, 0)
    _, text = capture("smi_query_gb10_memory_na.txt")
    (gb10,), _ = read_query_output(text, "gpu")
    assert gb10["name"] == "NVIDIA GB10" and gb10["mem_total_mib"] is None  # unified memory: [N/A]
    fields, text = capture("smi_query_rtx2080_noheader_nounits.txt")
    (rtx,), _ = read_query_output(text, "gpu", fields)
    assert (rtx["uuid"], rtx["util_pct"], rtx["mem_total_mib"]) == ("GPU-22b2c6ac-2d49-4863-197c-9c469071178a", 86, 7979)


def test_compute_apps_rows():
    _, text = capture("smi_apps_pid_name_mem_host.txt")
    (app,), _ = read_query_output(text, "apps")
    assert (app["pid"], app["name"], app["gpu_mem_mib"], app["name_problem"]) == \
        (40170, "/opt/rh/rh-python38/root/usr/bin/python3", 185, None)
    _, text = capture("smi_apps_uuid_name_vgpu.txt")
    apps, _ = read_query_output(text, "apps")
    assert [(a["gpu_uuid"][:12], a["name"], a["pid"]) for a in apps] == \
        [("GPU-d0180485", "vgpu", None), ("GPU-777ead31", "vgpu", None), ("GPU-777ead31", "vgpu", None)]


def test_a_process_name_with_commas_and_names_nvidia_smi_cannot_read():
    # The monitor's own field order (the name last); the bracketed names are what nvidia-smi prints for
    # another user's process ([Insufficient Permissions]) and a pid of another PID namespace ([Not Found]).
    app = parse_app_row("2026/06/22 00:11:49.123, GPU-28780eb0, 1758887, 58060, python -c print(1,2), x\n")
    assert (app["pid"], app["gpu_mem_mib"], app["name"]) == (1758887, 58060, "python -c print(1,2), x")
    for token in ("[Insufficient Permissions]", "[Not Found]"):
        app = parse_app_row("2026/06/22 00:11:49.123, GPU-28780eb0, 1758887, 58060, %s" % token)
        assert app["name"] is None and app["name_problem"] == token.strip("[]")


def gone_pid():
    """The pid of a child that has ended and been reaped: no process has it (until the kernel reuses it)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_owner_and_command_of_real_processes():
    me = pwd.getpwuid(os.getuid()).pw_name
    assert process_owner(os.getpid()) == (me, None)
    entry = describe_process(os.getpid(), 100)
    assert entry["user"] == me and sys.executable.split("/")[-1] in entry["command"] and entry["problem"] is None
    user, problem = process_owner(gone_pid())
    assert user == "?" and "another PID namespace" in problem


def test_a_process_that_is_not_here_and_whose_name_nvidia_smi_could_not_read():
    pid = gone_pid()
    entry = describe_process(pid, 58060, None, "Insufficient Permissions")
    assert (entry["user"], entry["command"], entry["gpu_mem_mib"]) == ("?", "?", 58060)
    assert "no process %d" % pid in entry["problem"] and "nvidia-smi: Insufficient Permissions" in entry["problem"]
    entry = describe_process(pid, 185, "/opt/rh/rh-python38/root/usr/bin/python3", None)
    assert entry["command"] == "/opt/rh/rh-python38/root/usr/bin/python3" and entry["user"] == "?"


def test_processes_go_to_their_gpu_by_uuid():
    fields, text = capture("smi_query_titanx_x8_noheader_nounits.txt")
    gpus, _ = read_query_output(text, "gpu", fields)
    me = os.getpid()
    apps = [parse_app_row("t, GPU-86fe97db-bf54-a056-4e8d-9b07e1a298e7, %d, 10032, python" % me),
            parse_app_row("t, GPU-not-on-this-host, %d, 5, python" % me)]
    unplaced = attach_processes(gpus, apps)
    assert [p["pid"] for p in gpus[1]["processes"]] == [me] and gpus[1]["processes"][0]["gpu_mem_mib"] == 10032
    assert gpus[0]["processes"] == [] and [p["gpu_mem_mib"] for p in unplaced] == [5]


@pytest.mark.parametrize("name", LOST_CAPTURES)
def test_a_gpu_that_fell_off_the_bus(name):
    line = (GPU_FIXTURES / name).read_text()
    gpu = parse_lost_line(line)
    assert gpu["state"] == "lost" and gpu["processes"] is None and gpu["index"] is None
    assert gpu["message"] in ("Unknown Error", "GPU is lost. Reboot the system to recover this GPU")
    assert bus_key(gpu["bus_id"]) in ("0000:0b:00.0", "0000:07:00.0", "0000:02:00.0")
    with pytest.raises(ValueError):
        parse_gpu_row(line)


def test_lost_gpus_by_bus_id_and_by_index():
    assert bus_key("00000000:0B:00.0") == bus_key("0000:0b:00.0")
    # R610 drivers name the GPU too: "GPU1: 0000:34:00.0".
    gpu = parse_lost_line("Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error")
    assert (gpu["index"], gpu["bus_id"], gpu["message"]) == (1, "0000:34:00.0", "Unknown Error")
    assert parse_lost_line("0, GPU-004f693d, GeForce GTX TITAN X, 25, 0, 802, 12206") is None


def test_error_values_in_a_gpu_row():
    row = parse_gpu_row("3, GPU-f0e47078, NVIDIA A100, [GPU is lost], [GPU is lost], [GPU is lost], 81920, "
                        "[GPU is lost], [GPU is lost], [GPU is lost]")
    assert row["state"] == "lost" and row["index"] == 3 and row["mem_total_mib"] == 81920
    row = parse_gpu_row("3, GPU-f0e47078, NVIDIA A100, 00000000:4C:00.0, 0, [Unknown Error], 81920, 85.09, 31, "
                        "Enabled")
    assert row["state"] == "error" and "memory.used" in row["message"] and row["mig_mode"] == "enabled"


@pytest.mark.parametrize("name", TABLE_CAPTURES)
def test_every_plain_table_capture_parses(name):
    table = parse_smi_table((GPU_FIXTURES / name).read_text())
    assert table["gpus"] or table["mig_devices"] or table["processes"]
    for gpu in table["gpus"]:
        assert isinstance(gpu["index"], int) and gpu["bus_id"]
        assert (gpu["temp_c"] is None) == (gpu["state"] == "error")  # ERR! is no temperature
    json.dumps(table)


def test_the_a100_table_with_its_processes():
    table = parse_smi_table((GPU_FIXTURES / "smi_summary_a100_sxm4_80gb_525.txt").read_text())
    assert [gpu["index"] for gpu in table["gpus"]] == list(range(8)) and table["driver_version"] == "525.60.13"
    gpu1 = table["gpus"][1]
    assert (gpu1["bus_id"], gpu1["mem_used_mib"], gpu1["mem_total_mib"], gpu1["util_pct"], gpu1["power_w"]) == \
        ("00000000:0B:00.0", 15995, 81920, 100, 87.0)
    assert len(table["processes"]) == 10
    assert [(p["gpu"], p["pid"], p["type"], p["gpu_mem_mib"]) for p in table["processes"] if p["gpu"] == 2] == \
        [(2, 19501, "G", 63), (2, 20379, "G", 63), (2, 280060, "C", 15992)]
    assert table["processes"][0]["name"] == "...-m4-2023-02-28/bin/python"


def test_mig_devices_and_the_older_process_table():
    table = parse_smi_table((GPU_FIXTURES / "smi_summary_mig_devices_a100.txt").read_text())
    assert [(d["gpu"], d["gi"], d["ci"], d["dev"], d["mem_used_mib"], d["mem_total_mib"])
            for d in table["mig_devices"]] == [(1, 3, 0, 0, 14366, 19968), (1, 5, 0, 1, 9826, 19968),
                                              (1, 6, 0, 2, 13, 19968)]
    table = parse_smi_table((GPU_FIXTURES / "smi_summary_old_processes_pid_type.txt").read_text())
    assert table["processes"] == [{"gpu": 0, "gi": None, "ci": None, "pid": 28290, "type": "C", "name": "python",
                                   "gpu_mem_mib": 1012}]


def test_a_gpu_that_shows_err():
    table = parse_smi_table((GPU_FIXTURES / "smi_summary_a40_x8_err_525.txt").read_text())
    broken = table["gpus"][4]
    assert (broken["index"], broken["name"], broken["bus_id"], broken["state"]) == (4, None, "00000000:83:00.0", "error")
    assert broken["message"] == "nvidia-smi shows ERR! for temperature, power, utilization"
    assert (broken["mem_used_mib"], broken["util_pct"], broken["power_w"]) == (0, None, None)
    assert [gpu["state"] for gpu in table["gpus"]].count("ok") == 7
    assert table["processes"] == [{"gpu": 2, "gi": None, "ci": None, "pid": 2111354, "type": "C",
                                   "name": "...eratornet/venv/bin/python", "gpu_mem_mib": 818}]


def test_a_gb10_table_without_memory():
    (gpu,) = parse_smi_table((GPU_FIXTURES / "smi_summary_gb10_580.txt").read_text())["gpus"]
    assert (gpu["temp_c"], gpu["power_w"], gpu["util_pct"], gpu["mem_used_mib"]) == (36, 3.0, 0, None)


A100_NVML = "a100_sxm4_80gb_x2_driver_525"
# The same machine's process table (smi_summary_a100_sxm4_80gb_525.txt): GPU 0 and GPU 1 of nvml_values.json.
A100_PROCESSES = {0: [(280058, 22374)], 1: [(280059, 15992)]}


def fake_nvml(values, processes=None, lost=(), mig=None):
    """The fake pynvml of tests/fixtures/gpu, plus what the monitor asks besides telemetry's values.

    ``processes``: {gpu: [(pid, MiB)]}; ``lost``: indices whose handle NVML refuses ("GPU is lost");
    ``mig``: {gpu: [(gi, ci, used MiB, total MiB)]}.  What is not given raises NVML's "Not Supported".
    """
    nv = fake_pynvml_fixture.module(values)
    gpus = values["gpus"]
    get_handle = nv.nvmlDeviceGetHandleByIndex

    def handle_by_index(index):
        if index in lost:
            raise nv.NVMLError("GPU is lost")
        return get_handle(index)

    def index_of(handle):
        return next(i for i, gpu in enumerate(gpus) if gpu is handle)

    def running(handle):
        if isinstance(handle, tuple) or processes is None:  # a MIG device's processes: not captured
            raise nv.NVMLError("Not Supported")
        found = processes.get(index_of(handle), [])
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=mib << 20) for pid, mib in found]

    def mig_mode(handle):
        if mig is None or index_of(handle) not in mig:
            raise nv.NVMLError("Not Supported")
        return (1, 1)

    def memory(handle):
        if isinstance(handle, tuple):
            _, _, used, total = mig[handle[0]][handle[1]]
            return types.SimpleNamespace(used=used << 20, total=total << 20, free=(total - used) << 20)
        return get_memory(handle)

    get_memory = nv.nvmlDeviceGetMemoryInfo
    nv.nvmlDeviceGetHandleByIndex = handle_by_index
    nv.nvmlDeviceGetComputeRunningProcesses = running
    nv.nvmlDeviceGetMigMode = mig_mode
    nv.nvmlDeviceGetMaxMigDeviceCount = lambda handle: len(mig[index_of(handle)])
    nv.nvmlDeviceGetMigDeviceHandleByIndex = lambda handle, at: (index_of(handle), at)
    nv.nvmlDeviceGetGpuInstanceId = lambda handle: mig[handle[0]][handle[1]][0]
    nv.nvmlDeviceGetComputeInstanceId = lambda handle: mig[handle[0]][handle[1]][1]
    nv.nvmlDeviceGetMemoryInfo = memory
    return nv


def test_nvml_with_captured_values_and_processes():
    values = fake_pynvml_fixture.capture(A100_NVML)
    nvml = HostNvml(fake_nvml(values, A100_PROCESSES))
    first, second = nvml.gpu(0), nvml.gpu(1)
    captured = values["gpus"][0]
    assert (first["mem_used_mib"], first["mem_total_mib"], first["util_pct"], first["temp_c"], first["power_w"]) == \
        (captured["memory_used_mib"], captured["memory_total_mib"], captured["util_gpu_pct"],
         captured["temperature_gpu_c"], captured["power_draw_w"])
    assert first["state"] == "ok" and first["name"] == captured["name"] and first["mig_mode"] is None
    assert [(p["pid"], p["gpu_mem_mib"]) for p in first["processes"]] == [(280058, 22374)]
    assert [(p["pid"], p["gpu_mem_mib"]) for p in second["processes"]] == [(280059, 15992)]


def test_nvml_that_cannot_list_processes_says_unknown_not_none():
    nvml = HostNvml(fake_pynvml_fixture.module(fake_pynvml_fixture.capture(A100_NVML)))
    assert nvml.gpu(0)["processes"] is None and nvml.gpu(0)["uuid"] is None


def test_nvml_a_lost_gpu():
    nvml = HostNvml(fake_nvml(fake_pynvml_fixture.capture(A100_NVML), A100_PROCESSES, lost={1}))
    assert nvml.gpu(0)["state"] == "ok"
    lost = nvml.gpu(1)
    assert (lost["state"], lost["message"], lost["processes"], lost["index"]) == ("lost", "GPU is lost", None, 1)


def test_nvml_mig_devices():
    # The MIG devices of GPU 1 in smi_summary_mig_devices_a100.txt; that GPU's other values were not captured.
    unknown = dict.fromkeys(fake_pynvml_fixture.capture(A100_NVML)["gpus"][0])
    values = {"gpus": [dict(unknown), dict(unknown)]}
    mig = {1: [(3, 0, 14366, 19968), (5, 0, 9826, 19968), (6, 0, 13, 19968)]}
    gpu = HostNvml(fake_nvml(values, {}, mig=mig)).gpu(1)
    assert gpu["mig_mode"] == "enabled"
    assert [(d["gi"], d["ci"], d["dev"], d["mem_used_mib"], d["mem_total_mib"]) for d in gpu["mig_devices"]] == \
        [(3, 0, 0, 14366, 19968), (5, 0, 1, 9826, 19968), (6, 0, 2, 13, 19968)]
    assert gpu["processes"] is None and gpu["mem_used_mib"] is None


def test_the_cpu_side_from_this_machines_proc():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        table = ProcessTable()
        first = host_cpu(table)
        with open("/proc/meminfo") as fh:
            total_kib = int(fh.readline().split()[1])
        assert first["cpu_count"] == os.cpu_count() and first["mem_total_mib"] == total_kib // 1024
        assert 0 < first["mem_used_mib"] < first["mem_total_mib"] and first["load_1m"] >= 0
        assert all(row["cpu_pct"] is None for row in first["top"]) and len(first["top"]) == gpustate.TOP_PROCESSES

        def ticks():
            with open("/proc/%d/stat" % spinner.pid, "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            return int(fields[11]) + int(fields[12])
        start = ticks()
        while ticks() == start:  # until the spinner has used a clock tick since the first sample
            time.sleep(0.02)
        every = table.top(count=100000)
        mine = next(row for row in every if row["pid"] == spinner.pid)
        assert mine["cpu_pct"] > 0 and mine["user"] == pwd.getpwuid(os.getuid()).pw_name
        assert mine["command"].endswith("while True: pass")
        assert every == sorted(every, key=lambda row: (-row["cpu_pct"], -row["rss_mib"]))
    finally:
        spinner.kill()
        spinner.wait()


def test_a_snapshot_is_one_json_line_with_a_version():
    fields, text = capture("smi_query_titanx_x8_noheader_nounits.txt")
    gpus, _ = read_query_output(text, "gpu", fields)
    line = json.dumps(snapshot(7, "nvidia-smi", gpus, host_cpu(ProcessTable())))
    back = json.loads(line)
    assert "\n" not in line and back["v"] == gpustate.SNAPSHOT_VERSION and back["seq"] == 7
    assert back["kind"] == "host_snapshot" and len(back["gpus"]) == 8 and back["cpu"]["cpu_count"] == os.cpu_count()
