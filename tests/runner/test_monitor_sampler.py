"""The host monitor as a real process (``python -m remote_runner monitor``): one snapshot a line from two
long-lived nvidia-smi processes, and an end that leaves nothing behind when its client goes away.

nvidia-smi is tests/fixtures/gpu/fake_nvidia_smi.py on PATH: it replays a real 8-GPU capture every loop.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.gpu_snapshots import fake_smi_on_path

from ddpgui.core.gpus.snapshot import parse_snapshot_line

REPO_ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0  # generous: the machine is shared and slow


def alive(pid):
    """Whether ``pid`` is a live process (a zombie no longer runs: it is not alive)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def wait_until(condition, what, timeout=WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    pytest.fail("%s within %.0f s" % (what, timeout))


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """PATH with the fake nvidia-smi first; returns the log of its starts (``pid argv`` lines)."""
    log = fake_smi_on_path(tmp_path, monkeypatch)
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    return log


def smi_starts(log):
    return [(int(line.split()[0]), line.split(None, 1)[1]) for line in log.read_text().splitlines()]


def smi_pids(log):
    """The pids of the two nvidia-smi processes, once both have started (they start at once, log a moment later)."""
    wait_until(lambda: len(smi_starts(log)) >= 2, "both nvidia-smi processes start")
    return [pid for pid, _ in smi_starts(log)]


def start_monitor(*args):
    return subprocess.Popen([sys.executable, "-m", "remote_runner", "monitor", *args], cwd=str(REPO_ROOT),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def read_snapshots(proc, count):
    snapshots = []
    for _ in range(count):
        line = proc.stdout.readline()
        assert line, "the monitor ended early: %s" % proc.stderr.read().decode()
        snapshots.append(parse_snapshot_line(line))
    return snapshots


def end(proc):
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=WAIT_S)


def test_snapshots_come_from_two_long_lived_nvidia_smi_processes(fake_smi):
    proc = start_monitor("--interval", "0.3", "--source", "nvidia-smi")
    try:
        snapshots = read_snapshots(proc, 4)
        assert [s.seq for s in snapshots] == [0, 1, 2, 3]
        last = snapshots[-1]
        assert last.source == "nvidia-smi" and last.errors == ()
        assert [gpu.index for gpu in last.gpus] == list(range(8))
        assert last.gpus[1].uuid == "GPU-86fe97db-bf54-a056-4e8d-9b07e1a298e7"
        assert (last.gpus[1].mem_used_mib, last.gpus[1].mem_total_mib, last.gpus[1].util_pct) == (10032, 12206, 86)
        assert last.gpus[1].power_w is None  # the capture has no power.draw: [N/A]
        assert all(gpu.processes == () for gpu in last.gpus)  # the compute-apps loops printed no process
        assert last.summary() == "1 of 8 GPUs free"
        smi_pids(fake_smi)
        starts = smi_starts(fake_smi)
        assert len(starts) == 2, starts  # four snapshots, still the same two processes: no spawn per sample
        assert sorted(argv.split()[0].split("=")[0] for _, argv in starts) == ["--query-compute-apps", "--query-gpu"]
        assert all("-lms 300" in argv for _, argv in starts)
        assert all(alive(pid) for pid, _ in starts)
    finally:
        end(proc)


def close_stdin(proc):
    proc.stdin.close()  # the client closed its end: EOF


def close_stdout(proc):
    proc.stdout.close()  # nobody reads any more: the next snapshot meets EPIPE


def kill_monitor(proc):
    proc.send_signal(signal.SIGKILL)  # no chance to clean up: the kernel ends the children (PR_SET_PDEATHSIG)


@pytest.mark.parametrize("go_away, exit_code", [(close_stdin, 0), (close_stdout, 0), (kill_monitor, -signal.SIGKILL)],
                         ids=["stdin EOF", "stdout closed", "monitor killed"])
def test_no_nvidia_smi_is_left_once_the_monitor_ends(fake_smi, go_away, exit_code):
    proc = start_monitor("--interval", "0.3", "--source", "nvidia-smi")
    try:
        read_snapshots(proc, 1)
        pids = smi_pids(fake_smi)
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
        go_away(proc)
        assert proc.wait(timeout=WAIT_S) == exit_code
        stderr = proc.stderr.read().decode()
        assert "Traceback" not in stderr and "Fatal" not in stderr, stderr
        wait_until(lambda: not any(alive(pid) for pid in pids), "the nvidia-smi processes end")
    finally:
        end(proc)


READER = """
import subprocess, sys
monitor = subprocess.Popen([sys.executable, "-m", "remote_runner", "monitor", "--interval", "0.3",
                            "--source", "nvidia-smi"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
print(monitor.pid, flush=True)
for line in monitor.stdout:
    print("snapshot", flush=True)
"""


def test_killing_the_reader_leaves_no_monitor_and_no_nvidia_smi(fake_smi):
    """The client (here a reader process holding the monitor's pipes, as sshd does) is killed outright."""
    reader = subprocess.Popen([sys.executable, "-c", READER], cwd=str(REPO_ROOT), stdout=subprocess.PIPE)
    try:
        monitor_pid = int(reader.stdout.readline())
        assert reader.stdout.readline().strip() == b"snapshot"
        pids = smi_pids(fake_smi)
        assert len(pids) == 2 and alive(monitor_pid) and all(alive(pid) for pid in pids)
        reader.kill()
        reader.wait(timeout=WAIT_S)
        wait_until(lambda: not alive(monitor_pid), "the monitor ends once its reader is gone")
        wait_until(lambda: not any(alive(pid) for pid in pids), "the nvidia-smi processes end")
    finally:
        end(reader)


def test_the_first_snapshot_waits_for_a_slow_nvidia_smi(fake_smi, monkeypatch):
    monkeypatch.setenv("FAKE_SMI_DELAY", "2")  # more than six intervals
    proc = start_monitor("--interval", "0.3", "--source", "nvidia-smi")
    try:
        (first,) = read_snapshots(proc, 1)
        assert first.seq == 0 and len(first.gpus) == 8 and first.summary() == "1 of 8 GPUs free"
    finally:
        end(proc)


def test_a_lost_gpu_in_the_stream(fake_smi, monkeypatch):
    monkeypatch.setenv("FAKE_SMI_LOST", "3")
    proc = start_monitor("--interval", "0.3", "--source", "nvidia-smi")
    try:
        last = read_snapshots(proc, 3)[-1]
        lost = [gpu for gpu in last.gpus if gpu.state == "lost"]
        assert len(lost) == 1 and lost[0].message == "Unknown Error" and lost[0].bus_id == "0000:0B:00.0"
        assert lost[0].index is None  # the capture has no bus ids to tell which index that was
        assert sorted(gpu.index for gpu in last.gpus if gpu.state == "ok") == [0, 1, 2, 4, 5, 6, 7]
        assert last.summary() == "1 of 8 GPUs free"
    finally:
        end(proc)


def test_a_field_an_older_driver_refuses_is_dropped(fake_smi, monkeypatch):
    monkeypatch.setenv("FAKE_SMI_REFUSE", "mig.mode.current")
    proc = start_monitor("--interval", "0.3", "--source", "nvidia-smi")
    try:
        for _ in range(100):
            (last,) = read_snapshots(proc, 1)
            if last.gpus:
                break
        assert len(last.gpus) == 8 and last.errors == () and all(gpu.mig_mode is None for gpu in last.gpus)
        queries = [argv.split()[0] for _, argv in smi_starts(fake_smi) if "--query-gpu" in argv]
        assert queries == ["--query-gpu=index,uuid,name,pci.bus_id,utilization.gpu,memory.used,memory.total,"
                           "power.draw,temperature.gpu,mig.mode.current",
                           "--query-gpu=index,uuid,name,pci.bus_id,utilization.gpu,memory.used,memory.total,"
                           "power.draw,temperature.gpu"]
    finally:
        end(proc)


def test_a_cpu_host_reports_load_memory_and_its_processes():
    proc = start_monitor("--interval", "0.3", "--source", "none")
    try:
        snapshots = read_snapshots(proc, 2)
        last = snapshots[-1]
        assert last.source == "none" and last.gpus == () and last.summary() == "no GPUs"
        assert last.cpu.cpu_count == os.cpu_count() and 0 < last.cpu.mem_used_mib < last.cpu.mem_total_mib
        assert 1 <= len(last.cpu.top) <= 10 and all(top.user and top.command for top in last.cpu.top)
        assert snapshots[0].cpu.top[0].cpu_pct is None  # the first snapshot only sets the baseline
        assert all(top.cpu_pct is not None for top in last.cpu.top)
        proc.stdin.close()
        assert proc.wait(timeout=WAIT_S) == 0
    finally:
        end(proc)
