"""A parallel sweep's cells in the host's own queue (remote_runner/queue.py) placed on free GPUs by the queue itself
(remote_runner/placement.py), on this machine made a host with two idle GPUs: the fake nvidia-smi
(tests/fixtures/gpu/fake_nvidia_smi.py) replaying two V100s of a real capture first on the queue's PATH.  The
runner's commands run as a client runs them, one process per command; each cell is a real one-process run of a
small script whose rank writes the CUDA_VISIBLE_DEVICES it saw and holds until the test lets it go (and until the
other cells of its group have started: they ran side by side)."""
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.gpu_snapshots import gpu_host_env, two_idle_v100s
from helpers.host_queue import queue_processes
from helpers.spools import wait_for

from remote_runner.gpustate import APP_FIELDS, GPU_FIELDS

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 240  # the machine is shared and slow: generous

HOLDER = '''import glob, json, os, sys, time
out, group, peers, release = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
run = os.environ.get("TORCHELASTIC_RUN_ID", "?")
with open(os.path.join(out, "%s.%s.json" % (group, run)), "w") as fh:
    json.dump({"run": run, "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
               "order": os.environ.get("CUDA_DEVICE_ORDER")}, fh)
deadline = time.monotonic() + 200
while len(glob.glob(os.path.join(out, group + ".*.json"))) < peers or not os.path.exists(release):
    if time.monotonic() > deadline:
        sys.exit("held for 200 s")
    time.sleep(0.1)
'''


@pytest.fixture
def host(tmp_path):
    """(the run root, the environment of a two-GPU host, the holder script's folder, its output folder)."""
    root, script, out = tmp_path / "root", tmp_path / "holder", tmp_path / "out"
    for folder in (root, script, out):
        folder.mkdir()
    (script / "train.py").write_text(HOLDER)
    env = dict(os.environ, **gpu_host_env(tmp_path, two_idle_v100s(tmp_path)))
    yield root, env, script, out
    for pid in queue_processes(root):  # a test that failed midway leaves nothing running
        os.kill(pid, signal.SIGKILL)
    for run in (root / "runs").glob("*"):
        if status_of(root, run.name).get("state") not in (None, "finished", "failed", "stopped"):
            runner(env, "stop", str(run))


def runner(env: dict, *args: str, stdin: object = None) -> dict:
    proc = subprocess.run([sys.executable, "-m", "remote_runner", *args], cwd=REPO, capture_output=True, text=True,
                          env=env, input=None if stdin is None else json.dumps(stdin), timeout=120)
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cell(run_id: str, script: Path, out: Path, group: str, peers: int = 1, sweep: str = "s1", **config) -> dict:
    """A parallel sweep's cell: one process of the holder, in ``group`` (held until ``peers`` of it started and
    ``out/release-<group>`` exists)."""
    config = dict({"run_id": run_id, "mode": "script", "nproc_per_node": 1, "backend": "gloo",
                   "script": {"dir": str(script), "entry": "train.py",
                              "args": [str(out), group, str(peers), str(out / f"release-{group}")]}}, **config)
    return {"run_id": run_id, "index": 0, "sweep_id": sweep, "parallel": True, "config": json.dumps(config)}


def status_of(root: Path, run_id: str) -> dict:
    path = root / "runs" / run_id / "status.json"
    return json.loads(path.read_text()) if path.exists() else {}


def config_of(root: Path, run_id: str) -> dict:
    return json.loads((root / "runs" / run_id / "config.json").read_text())


def cells_of(root: Path) -> dict[str, dict]:
    try:
        return {c["run_id"]: c for c in json.loads((root / "queue" / "state.json").read_text())["cells"]}
    except (OSError, ValueError, KeyError):
        return {}


def monitor_smi(env: dict) -> list[int]:
    """The pids of the fake nvidia-smi the queue started to look at the GPUs (the host monitor's two queries; the
    runs' own telemetry starts one of its own), from their log of starts."""
    queries = ("--query-gpu=" + ",".join(GPU_FIELDS), "--query-compute-apps=" + ",".join(APP_FIELDS))
    return [int(line.split()[0]) for line in Path(env["FAKE_SMI_LOG"]).read_text().splitlines()
            if line.split()[1] in queries]


def alive(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def seen(out: Path, group: str) -> dict[str, str]:
    """run id → the CUDA_VISIBLE_DEVICES its rank saw, for the runs of ``group`` that started."""
    found = {}
    for path in out.glob(f"{group}.*.json"):
        try:
            rank = json.loads(path.read_text())
        except ValueError:  # being written
            continue
        found[rank["run"]] = rank["visible"]
    return found


def test_four_one_process_cells_on_two_gpus_run_two_at_a_time_each_on_a_gpu_of_its_own(host):
    root, env, script, out = host
    reply = runner(env, "queue-add", str(root), "--profile", "box", stdin={"cells": [
        cell("p0", script, out, "a", peers=2), cell("p1", script, out, "a", peers=2),
        cell("p2", script, out, "b", peers=2), cell("p3", script, out, "b", peers=2)]})
    assert reply["ok"] and reply["started"], reply
    assert wait_for(lambda: len(seen(out, "a")) == 2, timeout=WAIT_S), cells_of(root)  # side by side
    waiting = "waiting for 1 free GPU on box: 0 free, 2 held by the sweep's running cells"
    assert wait_for(lambda: cells_of(root)["p2"].get("reason") == waiting, timeout=WAIT_S), cells_of(root)["p2"]
    state = cells_of(root)
    assert state["p2"]["state"] == state["p3"]["state"] == "waiting"  # never a third beside them
    assert state["p2"]["hint"] == "it starts when GPUs are freed; see who holds them with: ddpgui gpus box"
    assert sorted(state[r]["gpus"][0] for r in ("p0", "p1")) == [0, 1]
    (out / "release-a").touch()
    assert wait_for(lambda: len(seen(out, "b")) == 2, timeout=WAIT_S), cells_of(root)
    assert all(status_of(root, r)["state"] == "finished" for r in ("p0", "p1"))  # b's started once a's let go
    # nothing waits for GPUs: the queue stopped looking (it ends them right after the last launch)
    assert wait_for(lambda: not any(alive(pid) for pid in monitor_smi(env)), timeout=30)
    (out / "release-b").touch()
    assert wait_for(lambda: not queue_processes(root), timeout=WAIT_S), cells_of(root)
    assert len(monitor_smi(env)) == 2  # one look for the whole wait: its two nvidia-smi streams, started once
    state = cells_of(root)
    assert [state[f"p{i}"]["state"] for i in range(4)] == ["launched"] * 4
    assert all(state[f"p{i}"].get("reason") == "" for i in range(4))
    visible = {**seen(out, "a"), **seen(out, "b")}
    for pair in (("p0", "p1"), ("p2", "p3")):
        gpus = [config_of(root, r)["gpus"] for r in pair]
        assert sorted(gpus) == [[0], [1]], gpus  # each on a GPU of its own
        for run_id, placed in zip(pair, gpus):
            config = config_of(root, run_id)
            assert config["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": str(placed[0])}
            assert state[run_id]["gpus"] == placed and visible[run_id] == str(placed[0])
            assert status_of(root, run_id)["state"] == "finished"


def test_a_cell_naming_a_gpu_a_running_cell_holds_waits_saying_so_and_an_impossible_cell_fails_in_words(host):
    root, env, script, out = host
    reply = runner(env, "queue-add", str(root), "--profile", "box", stdin={"cells": [
        cell("f0", script, out, "a"),
        cell("f1", script, out, "x", nproc_per_node=3),
        cell("f2", script, out, "b", gpus=[0], env={"CUDA_VISIBLE_DEVICES": "0"})]})
    assert reply["ok"], reply
    assert wait_for(lambda: len(seen(out, "a")) == 1, timeout=WAIT_S), cells_of(root)
    assert cells_of(root)["f0"]["gpus"] == [0]  # the idlest GPU (5 MiB used; GPU 1: 7 MiB)
    waiting = "waiting for GPUs 0 on box: GPU 0 held by the sweep's running cells"
    assert wait_for(lambda: cells_of(root)["f2"].get("reason") == waiting, timeout=WAIT_S), cells_of(root)["f2"]
    state = cells_of(root)
    assert state["f2"]["state"] == "waiting" and state["f2"]["hint"] == "it starts when they end"
    assert state["f1"]["state"] == "failed" and not (root / "runs" / "f1").exists()
    assert state["f1"]["error"] == "not launched: it needs 3 GPUs, but box has 2 that can run it"
    assert state["f1"]["hint"] == "give the cells fewer processes (--nproc), or sweep on a host with more GPUs"
    (out / "release-a").touch()
    (out / "release-b").touch()
    assert wait_for(lambda: not queue_processes(root), timeout=WAIT_S), cells_of(root)
    assert status_of(root, "f2")["state"] == "finished" and status_of(root, "f2")["started_at"] >= \
        status_of(root, "f0")["ended_at"]
    assert config_of(root, "f2")["gpus"] == [0] and seen(out, "b") == {"f2": "0"}
    stop = runner(env, "queue-stop", str(root))
    assert stop["cancelled"] == [] and stop["stopped"] == []


def test_a_serial_cell_waits_for_the_parallel_ones_and_runs_alone(host):
    """A serial sweep queued behind a parallel one: it starts when nothing runs, and nothing starts beside it."""
    root, env, script, out = host
    serial = dict(cell("s0", script, out, "s", sweep="s2"), parallel=False)
    after = cell("s1", script, out, "t", sweep="s3")
    runner(env, "queue-add", str(root), stdin={"cells": [cell("q0", script, out, "a"), serial, after]})
    assert wait_for(lambda: len(seen(out, "a")) == 1, timeout=WAIT_S), cells_of(root)
    assert [cells_of(root)[r]["state"] for r in ("s0", "s1")] == ["waiting", "waiting"]
    (out / "release-a").touch()
    assert wait_for(lambda: len(seen(out, "s")) == 1, timeout=WAIT_S), cells_of(root)
    assert seen(out, "s") == {"s0": None} and "gpus" not in cells_of(root)["s0"]  # not placed: the host's GPUs
    assert cells_of(root)["s1"]["state"] == "waiting"
    (out / "release-s").touch()
    (out / "release-t").touch()
    assert wait_for(lambda: not queue_processes(root), timeout=WAIT_S), cells_of(root)
    assert status_of(root, "s1")["started_at"] >= status_of(root, "s0")["ended_at"] >= \
        status_of(root, "q0")["ended_at"] and seen(out, "t") == {"s1": "0"}


CPUS = os.cpu_count() or 1


@pytest.mark.skipif(CPUS < 2 or CPUS % 2 or shutil.which("nvidia-smi") is not None,
                    reason="two cells of half the CPUs each, on a host without nvidia-smi")
def test_on_a_host_without_gpus_parallel_cells_run_side_by_side_as_its_cpus_hold_them(tmp_path):
    """No nvidia-smi on the queue's PATH (nor NVML): cells of half the CPUs' processes each, two at a time."""
    root, script, out = tmp_path / "root", tmp_path / "holder", tmp_path / "out"
    for folder in (root, script, out):
        folder.mkdir()
    (script / "train.py").write_text(HOLDER)
    env = dict(os.environ)
    half = CPUS // 2
    try:
        runner(env, "queue-add", str(root), stdin={"cells": [
            cell("c0", script, out, "a", peers=2, nproc_per_node=half),
            cell("c1", script, out, "a", peers=2, nproc_per_node=half),
            cell("c2", script, out, "b", nproc_per_node=half)]})
        assert wait_for(lambda: len(seen(out, "a")) == 2, timeout=WAIT_S), cells_of(root)  # side by side
        state = cells_of(root)
        assert state["c2"]["state"] == "waiting" and not state["c2"].get("reason")  # the CPUs are taken
        assert seen(out, "a") == {"c0": None, "c1": None} and "gpus" not in state["c0"]
        (out / "release-a").touch()
        (out / "release-b").touch()
        assert wait_for(lambda: not queue_processes(root), timeout=WAIT_S), cells_of(root)
        assert [status_of(root, r)["state"] for r in ("c0", "c1", "c2")] == ["finished"] * 3
        assert config_of(root, "c2").get("gpus") is None
    finally:
        for pid in queue_processes(root):
            os.kill(pid, signal.SIGKILL)
