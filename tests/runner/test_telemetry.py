"""Telemetry: real nvidia-smi captures parsed, NVML through a fake pynvml fed with captured values,
the CPU sampler run for real, and the nvidia-smi fallback spawned once (fixtures: tests/fixtures/gpu)."""
import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.gpu_fixtures import GPU_FIXTURES, fake_pynvml_fixture

from remote_runner import telemetry
from remote_runner.fsutil import pid_alive
from remote_runner.spools import TELEMETRY
from remote_runner.telemetry import (
    SMI_FIELDS,
    CpuSampler,
    Nvml,
    TelemetrySampler,
    choose_gpu_source,
    parse_smi_line,
    smi_header_fields,
)


def load_capture(name):
    """(query fields, data rows) of a capture: fields from its header, or from its `$ command` when it has none."""
    lines = (GPU_FIXTURES / name).read_text().splitlines()
    command = lines.pop(0)[2:] if lines[0].startswith("$ ") else ""
    if "noheader" in command:
        return re.search(r"--query-gpu=(\S+)", command).group(1).split(","), lines
    return smi_header_fields(lines[0]), lines[1:]


nvml_capture = fake_pynvml_fixture.capture
fake_pynvml = fake_pynvml_fixture.module


def read_records(run_dir):
    path = Path(run_dir) / TELEMETRY
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_for(run_dir, enough, timeout=20.0):
    """The spool's records once ``enough(records)`` holds (fails the test after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = read_records(run_dir)
        if enough(records):
            return records
        time.sleep(0.05)
    pytest.fail("the sampler wrote too little in %.0f s: %r" % (timeout, read_records(run_dir)))


# --- nvidia-smi CSV, real captures -------------------------------------------------------------------------------

def test_a100_capture_with_units_and_na_fan():
    fields, rows = load_capture("smi_query_a100_sxm4_80gb_x8.txt")
    records = [parse_smi_line(row, fields) for row in rows]
    assert [r["power_w"] for r in records] == [67.97, 87.12, 84.83, 85.09, 86.67, 84.99, 85.15, 87.26]
    assert [r["util_pct"] for r in records] == [0, 100, 100, 100, 100, 100, 100, 100]
    assert [r["temp_c"] for r in records] == [28, 30, 28, 32, 30, 31, 30, 32]
    # Not queried there (fan.speed was, as [N/A], and has no record key): None, never 0.
    assert {(r["gpu"], r["mem_used_gib"], r["sm_clock_mhz"]) for r in records} == {(None, None, None)}


def test_v100_capture_header_with_units_values_without():
    fields, rows = load_capture("smi_query_v100_sxm3_32gb_x16.txt")
    records = [parse_smi_line(row, fields) for row in rows]
    assert len(records) == 16
    assert records[1] == {"kind": "gpu", "gpu": None, "name": "Tesla V100-SXM3-32GB", "util_pct": 98,
                          "mem_used_gib": round(11149 / 1024, 3), "mem_total_gib": None, "power_w": 383.55,
                          "temp_c": 62, "sm_clock_mhz": None}
    assert records[0]["mem_used_gib"] == 0.005


def test_geforce_capture_with_mib_w_and_mhz_units():
    fields, rows = load_capture("smi_query_gtx1080ti_gtx1060.txt")
    first, second = (parse_smi_line(row, fields) for row in rows)
    assert (first["name"], first["mem_total_gib"], first["mem_used_gib"], first["power_w"], first["util_pct"]) == \
        ("GeForce GTX 1080 Ti", round(11175 / 1024, 3), round(2856 / 1024, 3), 106.56, 36)
    assert second["power_w"] == 5.68 and second["temp_c"] == 49
    assert first["sm_clock_mhz"] is None  # the graphics clock was queried there, not the SM clock


def test_rtx2080_noheader_nounits_with_bare_na():
    fields, rows = load_capture("smi_query_rtx2080_noheader_nounits.txt")
    record = parse_smi_line(rows[0], fields)
    assert record["name"] == "GeForce RTX 2080"
    assert (record["power_w"], record["temp_c"], record["sm_clock_mhz"], record["util_pct"]) == (176.98, 45, 1965, 86)
    assert record["mem_total_gib"] == round(7979 / 1024, 3)


def test_gb10_memory_na_becomes_null():
    fields, rows = load_capture("smi_query_gb10_memory_na.txt")
    record = parse_smi_line(rows[0], fields)
    assert (record["gpu"], record["name"], record["mem_total_gib"]) == (0, "NVIDIA GB10", None)


def test_own_query_order_and_bracketed_values():
    record = parse_smi_line("3, NVIDIA A100-SXM4-80GB, 100, 15995, 81920, [Not Supported], 30, [N/A]\n")
    assert record == {"kind": "gpu", "gpu": 3, "name": "NVIDIA A100-SXM4-80GB", "util_pct": 100,
                      "mem_used_gib": round(15995 / 1024, 3), "mem_total_gib": 80.0, "power_w": None, "temp_c": 30,
                      "sm_clock_mhz": None}


def test_a_name_with_commas_is_put_back_together():
    record = parse_smi_line("0, NVIDIA A100, Rev 2, 5, 10, 20, 30.5, 40, 1410")
    assert record["name"] == "NVIDIA A100, Rev 2" and record["power_w"] == 30.5 and record["sm_clock_mhz"] == 1410


@pytest.mark.parametrize("line", [
    "Unable to determine the device handle for GPU 0000:CB:00.0: Unknown Error",
    "index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W], temperature.gpu, "
    "clocks.current.sm [MHz]",
])
def test_lines_that_are_not_rows_are_refused(line):
    with pytest.raises(ValueError):
        parse_smi_line(line)


def test_header_fields_lose_their_units():
    assert smi_header_fields("index, power.draw [W], clocks.current.sm [MHz], temperature.gpu") == \
        ["index", "power.draw", "clocks.current.sm", "temperature.gpu"]


# --- choosing the GPU source ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("requested, nvml_gpus, smi_path, expected", [
    ("auto", 2, "/usr/bin/nvidia-smi", "nvml"),
    ("auto", None, "/usr/bin/nvidia-smi", "nvidia-smi"),  # no nvidia-ml-py: one long-lived nvidia-smi
    ("auto", 0, "/usr/bin/nvidia-smi", "none"),  # NVML loads and sees no GPU: nvidia-smi would see none either
    ("auto", None, None, "none"),
    ("nvidia-smi", 2, "/usr/bin/nvidia-smi", "nvidia-smi"),
    ("nvidia-smi", None, None, "none"),
    ("nvml", None, "/usr/bin/nvidia-smi", "none"),
    ("none", 2, "/usr/bin/nvidia-smi", "none"),
])
def test_choose_gpu_source(requested, nvml_gpus, smi_path, expected):
    assert choose_gpu_source(requested, nvml_gpus, smi_path) == expected


# --- NVML through a fake pynvml fed with captured values ------------------------------------------------------------

@pytest.mark.parametrize("names_as_bytes", [False, True], ids=["str", "bytes"])
def test_nvml_sample_of_a100_capture(monkeypatch, names_as_bytes):
    fake = fake_pynvml(nvml_capture("a100_sxm4_80gb_x2_driver_525"), names_as_bytes)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    nvml = Nvml.open()
    assert nvml is not None and nvml.device_count() == 2
    assert (nvml.driver_version(), nvml.cuda_driver_version()) == ("525.60.13", "12.0")
    assert nvml.compute_capability(0) == (8, 0) and nvml.memory_total_gib(0) == 80.0
    assert nvml.sample(0) == {"kind": "gpu", "gpu": 0, "name": "NVIDIA A100-SXM4-80GB", "util_pct": 0,
                              "mem_used_gib": round(22377 / 1024, 3), "mem_total_gib": 80.0, "power_w": 67.97,
                              "temp_c": 28, "sm_clock_mhz": 1155}
    assert nvml.sample(1)["util_pct"] == 100 and nvml.sample(1)["sm_clock_mhz"] == 1410
    nvml.close()
    assert fake.calls == ["init", "shutdown"]


def test_nvml_values_a_gpu_does_not_report_are_none(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(nvml_capture("gb10_driver_580")))
    nvml = Nvml.open()
    assert nvml.sample(0) == {"kind": "gpu", "gpu": 0, "name": "NVIDIA GB10", "util_pct": 0, "mem_used_gib": None,
                              "mem_total_gib": None, "power_w": 3.0, "temp_c": 36, "sm_clock_mhz": None}
    assert nvml.compute_capability(0) is None
    assert nvml.sample(5)["name"] is None  # no such GPU: None everywhere, no exception


def test_nvml_that_does_not_initialise_is_no_nvml(monkeypatch):
    fake = fake_pynvml(nvml_capture("a100_sxm4_80gb_x2_driver_525"))

    def no_driver():
        raise fake.NVMLError("Driver Not Loaded")

    fake.nvmlInit = no_driver
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert Nvml.open() is None
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: import fails
    assert Nvml.open() is None


def test_sampler_writes_nvml_records_then_releases_nvml(monkeypatch, tmp_path):
    fake = fake_pynvml(nvml_capture("a100_sxm4_80gb_x2_driver_525"))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    sampler = TelemetrySampler(str(tmp_path), 0.1, lambda: [os.getpid()])
    sampler.start()
    try:
        records = wait_for(tmp_path, lambda rs: sum(r["kind"] == "gpu" for r in rs) >= 4)
    finally:
        sampler.stop()
    assert sampler.source == "nvml"
    gpu = [r for r in records if r["kind"] == "gpu"]
    assert {r["gpu"] for r in gpu} == {0, 1}
    assert {(r["gpu"], r["power_w"], r["temp_c"]) for r in gpu} == {(0, 67.97, 28), (1, 87.03, 30)}
    assert fake.calls == ["init", "shutdown"]


# --- CPU, for real -----------------------------------------------------------------------------------------------

def test_cpu_sampler_runs_for_real_against_a_busy_process(tmp_path):
    spinning = threading.Event()
    spinning.set()

    def spin():
        while spinning.is_set():
            pass

    busy = threading.Thread(target=spin, daemon=True)
    busy.start()
    sampler = TelemetrySampler(str(tmp_path), 0.5, lambda: [os.getpid()], gpu_source="none")
    try:
        sampler.start()
        records = wait_for(tmp_path, lambda rs: len(rs) >= 3)
    finally:
        sampler.stop()
        spinning.clear()
        busy.join()
    assert sampler.source == "none"
    assert [r["kind"] for r in records] == ["cpu"] * len(records)
    seqs = [r["seq"] for r in records]
    assert seqs == list(range(len(records)))
    assert all(r["nprocs"] == 1 and r["rss_gib"] > 0 and 0 <= r["cpu_pct"] <= 100 for r in records)
    assert max(r["proc_cpu_pct"] for r in records) > 10  # the spinning thread shows
    assert not any(t.name.startswith("telemetry") for t in threading.enumerate())
    written = len(read_records(tmp_path))
    time.sleep(0.6)
    assert len(read_records(tmp_path)) == written  # nothing is written after stop()


def test_cpu_sampler_skips_processes_that_ended():
    sampler = CpuSampler(lambda: [os.getpid(), 2 ** 22 + 12345])  # above the kernel's pid_max: never a process
    sampler.sample()
    record = sampler.sample()
    assert record["nprocs"] == 1 and record["rss_gib"] > 0


def test_cpu_sampler_without_proc_reports_load_only(monkeypatch):
    monkeypatch.setattr(telemetry.os.path, "isfile", lambda path: False)
    sampler = CpuSampler(lambda: [os.getpid()])
    monkeypatch.undo()
    sampler.sample()
    record = sampler.sample()
    assert (record["cpu_pct"], record["proc_cpu_pct"], record["rss_gib"]) == (None, None, None)
    assert record["nprocs"] == 1 and isinstance(record["load_1m"], float)


# --- the nvidia-smi fallback: one long-lived process -------------------------------------------------------------

FAKE_SMI = """#!/bin/sh
# Stands in for nvidia-smi -lms: logs each start, then prints the captured rows every 0.1 s.
echo "$$ $*" >> "{log}"
while true; do
  cat "{rows}"
  sleep 0.1
done
"""


def fake_nvidia_smi(tmp_path, monkeypatch, script):
    """``script`` installed as ``nvidia-smi`` first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(script)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", "%s%s%s" % (bin_dir, os.pathsep, os.environ["PATH"]))


def sample_through_nvidia_smi(run_dir, interval_s):
    """Run the sampler with the nvidia-smi source until it wrote 4 CPU samples; its records."""
    sampler = TelemetrySampler(str(run_dir), interval_s, lambda: [os.getpid()], gpu_source="nvidia-smi")
    sampler.start()
    try:
        return wait_for(run_dir, lambda rs: sum(r["kind"] == "cpu" for r in rs) >= 4)
    finally:
        sampler.stop()


def test_nvidia_smi_is_spawned_once_and_its_lines_become_records(monkeypatch, tmp_path):
    gpus = nvml_capture("a100_sxm4_80gb_x2_driver_525")["gpus"]
    rows = tmp_path / "rows.csv"
    rows.write_text("".join("%d, %s, %d, %d, %d, %.2f, %d, %d\n" % (
        i, g["name"], g["util_gpu_pct"], g["memory_used_mib"], g["memory_total_mib"], g["power_draw_w"],
        g["temperature_gpu_c"], g["clock_sm_mhz"]) for i, g in enumerate(gpus)))
    log = tmp_path / "spawns.log"
    fake_nvidia_smi(tmp_path, monkeypatch, FAKE_SMI.format(log=log, rows=rows))
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    records = sample_through_nvidia_smi(run_dir, 0.2)

    spawns = log.read_text().splitlines()
    assert len(spawns) == 1
    pid, args = spawns[0].split(" ", 1)
    assert args.split() == ["--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits", "-lms", "200"]
    assert not pid_alive(int(pid))
    gpu = [r for r in records if r["kind"] == "gpu"]
    assert len(gpu) >= 4
    assert {(r["gpu"], r["name"], r["power_w"], r["sm_clock_mhz"], r["mem_total_gib"]) for r in gpu} == \
        {(0, "NVIDIA A100-SXM4-80GB", 67.97, 1155, 80.0), (1, "NVIDIA A100-SXM4-80GB", 87.03, 1410, 80.0)}
    assert [r["seq"] for r in records] == list(range(len(records)))


def test_nvidia_smi_that_dies_is_reported_once(monkeypatch, tmp_path):
    # The real message of a host whose driver is not loaded.
    fake_nvidia_smi(tmp_path, monkeypatch,
                    "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                    "driver. Make sure that the latest NVIDIA driver is installed and running.\"\nexit 9\n")
    records = sample_through_nvidia_smi(tmp_path, 0.1)
    errors = [r for r in records if r["kind"] == "telemetry_error"]
    assert [e["message"] for e in errors] == ["RuntimeError: nvidia-smi exited with code 9; no more GPU samples"]
    assert not any(r["kind"] == "gpu" for r in records)
