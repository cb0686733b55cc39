"""``ddpgui sweep --parallel`` on a GPU host places each cell on free GPUs of its own (the real CLI in
subprocesses, private store and hosts, real torchrun runs on this CPU machine).

The GPU host is this computer with tests/fixtures/gpu/fake_nvidia_smi.py first on PATH as nvidia-smi,
replaying a real capture: 16x V100 (GPUs 1, 4, 7, 12 busy with 2.5-19 GiB used, GPU 8 at 445 MiB, the other
eleven at 5-7 MiB) or 8x GTX TITAN X (only GPU 0 idle).  Each cell runs a small script whose ranks write
the environment they saw and then hold: until the ranks of ``--peers`` runs have written theirs (so those
runs were alive together), or until the test creates ``--release``.
"""
import json
import os
import queue
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.cli_process import cli_env, run_cli, start_cli
from helpers.gpu_snapshots import fake_smi_on_path
from helpers.sampler_processes import samplers

from ddpgui.core.gpus import monitor as monitor_module
from ddpgui.core.gpus.placement import LOOK_TTL_S
from ddpgui.core.hosts import HostStore
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import RunStore
from ddpgui.core.store.run_store import STORE_FILE
from ddpgui.core.sweeps import SweepRunner, SweepSpec
from ddpgui.core.targets.factory import open_target

REPO = Path(__file__).resolve().parents[2]
ENVDUMP = REPO / "tests" / "fixtures" / "scripts" / "envdump"
WAIT_S = 300  # the machine is shared and slow: generous
V100S = "smi_query_v100_sxm3_32gb_x16.txt"
TITANS = "smi_query_titanx_x8_noheader_nounits.txt"

HOLDER = '''"""Writes what this rank saw to OUT/<run>-rank<R>.json, then holds (see the test module)."""
import argparse, glob, json, os, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--peers", type=int, default=0)
parser.add_argument("--release", default=None)
args = parser.parse_args()
run, rank = os.environ.get("TORCHELASTIC_RUN_ID", "?"), int(os.environ.get("RANK", "0"))
os.makedirs(args.out, exist_ok=True)
seen = {"run": run, "rank": rank, "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "order": os.environ.get("CUDA_DEVICE_ORDER")}
path = os.path.join(args.out, "%s-rank%d.json" % (run, rank))
with open(path + ".tmp", "w") as fh:
    json.dump(seen, fh)
os.replace(path + ".tmp", path)
deadline = time.monotonic() + 200
while time.monotonic() < deadline:
    runs = {json.load(open(p))["run"] for p in glob.glob(os.path.join(args.out, "*.json"))}
    if (args.peers and len(runs) >= args.peers) or (args.release and os.path.exists(args.release)):
        break
    time.sleep(0.2)
else:
    print("held for 200 s: the other runs never came", file=sys.stderr)
    sys.exit(3)
print("step 1 loss 0.5", flush=True)
'''


def _gpu_env(tmp_path, monkeypatch, capture=V100S) -> dict:
    """The CLI's environment on a "GPU host": the fake nvidia-smi first on PATH, replaying ``capture``."""
    fake_smi_on_path(tmp_path, monkeypatch)
    return cli_env(tmp_path, FAKE_SMI_CAPTURE=capture)


@pytest.fixture
def holder(tmp_path) -> Path:
    script = tmp_path / "holder"
    script.mkdir()
    (script / "train.py").write_text(HOLDER)
    return script


def _open_store(env) -> RunStore:
    """The CLI's run store (in its data folder), opened here."""
    return RunStore(Path(env["DDPGUI_DATA_DIR"]) / STORE_FILE)


def _sweep(env):
    """(the sweep, its cells, each cell's run) from the CLI's store."""
    with _open_store(env) as store:
        (sweep,) = store.list_sweeps()
        cells = store.sweep_cells(sweep.id)
        runs = [store.get_run(c.run_id) if c.run_id else None for c in cells]
    return sweep, cells, runs


def _ranks(out_dir: Path) -> dict[str, dict[int, dict]]:
    """run id → rank → what it saw."""
    seen: dict[str, dict[int, dict]] = {}
    for path in out_dir.glob("*.json"):
        rank = json.loads(path.read_text())
        seen.setdefault(rank["run"], {})[rank["rank"]] = rank
    return seen


def test_parallel_cells_get_disjoint_free_gpus_and_store_them(tmp_path, holder, monkeypatch):
    env, out = _gpu_env(tmp_path, monkeypatch), tmp_path / "ranks"
    code, stdout, err = run_cli(["sweep", "local", "--script", str(holder), "--nproc", "2", "--repeats", "3",
                                 "--parallel", "--name", "free gpus", "--", "--out", str(out), "--peers", "3"],
                                env, timeout=WAIT_S * 2)
    sweep, cells, runs = _sweep(env)
    assert code == 0, stdout + err
    assert "side by side (on a host with GPUs each on free GPUs of its own)" in err
    assert [c.state for c in cells] == ["done"] * 3 and sweep.state == "done"
    # free:N's order on the V100s, each cell leaving out the GPUs its running siblings hold
    assert [r.config["gpus"] for r in runs] == [[0, 3], [5, 6], [9, 10]]
    for run in runs:
        assert run.config["nproc_per_node"] == 2 and run.state == "finished"
        assert run.config["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                                     "CUDA_VISIBLE_DEVICES": ",".join(map(str, run.config["gpus"]))}
    seen = _ranks(out)
    assert sorted(seen) == sorted(r.id for r in runs)  # all three ran together: each held until the others came
    visible = {}
    for run in runs:
        ranks = seen[run.id]
        assert sorted(ranks) == [0, 1]
        assert {r["visible"] for r in ranks.values()} == {",".join(map(str, run.config["gpus"]))}
        assert {r["order"] for r in ranks.values()} == {"PCI_BUS_ID"}
        visible[run.id] = set(run.config["gpus"])
    groups = list(visible.values())
    assert all(a.isdisjoint(b) for i, a in enumerate(groups) for b in groups[i + 1:])
    assert not {1, 4, 7, 12} & set().union(*groups)  # never a busy GPU
    assert samplers(env["DDPGUI_DATA_DIR"]) == []  # the placement's snapshots left no sampler


def _lines(proc) -> queue.Queue:
    """The CLI's stdout lines, read on a thread (the test waits for one without blocking)."""
    lines: queue.Queue = queue.Queue()

    def read():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_a_pool_of_named_gpus_too_small_for_two_cells_makes_the_next_wait_saying_why(tmp_path, holder, monkeypatch):
    env, out, release = _gpu_env(tmp_path, monkeypatch), tmp_path / "ranks", tmp_path / "release"
    proc = start_cli(["sweep", "local", "--script", str(holder), "--nproc", "2", "--repeats", "2", "--parallel",
                      "--gpus", "0,1,2,3", "--name", "pool sweep", "--", "--out", str(out), "--release",
                      str(release)], env)
    try:
        lines, said = _lines(proc), []
        waiting = ("next: #2 waiting for 2 free GPUs on local (among GPUs 0,1,2,3): 1 free (2), 2 held by the "
                   "sweep's running cells, 1 busy (GPU 1: 11149 MiB used, 98% utilised")
        while not any(waiting in line for line in said):
            line = lines.get(timeout=WAIT_S)
            assert line is not None, "".join(said) + proc.stderr.read()
            said.append(line)
        code, shown, err = run_cli(["sweep-show", "pool sweep"], env)
        assert code == 0, err
        row = next(line for line in shown.splitlines() if " #2 " in line)
        assert "pending" in row and "waiting for 2 free GPUs on local (among GPUs 0,1,2,3)" in row
        release.write_text("")
        stdout, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, "".join(said) + stdout + err
    assert "side by side (on a host with GPUs each on free GPUs of its own among GPUs 0,1,2,3)" in err
    sweep, (first, second), (run1, run2) = _sweep(env)
    assert (first.state, second.state) == ("done", "done") and second.reason == ""  # the wait's reason is gone
    assert run1.config["gpus"] == run2.config["gpus"] == [0, 3]  # the second got them when the first let go
    assert run2.started_at >= run1.ended_at
    seen = _ranks(out)
    assert {r["visible"] for ranks in seen.values() for r in ranks.values()} == {"0,3"}


def test_with_too_few_free_gpus_the_first_cell_waits_saying_who_holds_them_until_stopped(tmp_path, monkeypatch):
    """Nothing of the sweep runs and the host has 1 free GPU of 8: nothing is launched onto the busy ones; the
    looks of the whole wait come from one long-lived sampler (its two nvidia-smi), never one per look."""
    env = _gpu_env(tmp_path, monkeypatch, capture=TITANS)
    smi_log = Path(env["FAKE_SMI_LOG"])
    proc = start_cli(["sweep", "local", "--workload", "linear", "--steps", "2", "--nproc", "2", "--repeats", "2",
                      "--parallel", "--name", "busy host"], env)
    try:
        lines, said = _lines(proc), []
        waiting = ("0/2 cells  next: #1 waiting for 2 free GPUs on local: 1 free (0), 7 busy (GPU 1: 10032 MiB of "
                   "12206 MiB used, 86% utilised")
        while not any(waiting in line for line in said):
            line = lines.get(timeout=WAIT_S)
            assert line is not None, "".join(said) + proc.stderr.read()
            said.append(line)
        time.sleep(4 * LOOK_TTL_S)  # several looks' time: each used to start a sampler of its own
        starts = smi_log.read_text().splitlines()
        assert len(starts) == 2 and {s.split()[1].split("=")[0] for s in starts} == \
            {"--query-gpu", "--query-compute-apps"}, starts
        code, out, err = run_cli(["sweep-stop", "busy host"], env, timeout=WAIT_S)
        assert code == 0 and "stopped" in out, out + err
        stdout, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 3, "".join(said) + stdout + err  # stopped
    sweep, cells, runs = _sweep(env)
    assert sweep.state == "stopped" and [c.state for c in cells] == ["cancelled", "cancelled"]
    assert runs == [None, None]
    with _open_store(env) as store:
        assert store.list_runs() == []
    assert samplers(env["DDPGUI_DATA_DIR"]) == []


def test_free_n_gives_each_parallel_cell_n_free_gpus(tmp_path, holder, monkeypatch):
    env, out = _gpu_env(tmp_path, monkeypatch), tmp_path / "ranks"
    code, stdout, err = run_cli(["sweep", "local", "--script", str(holder), "--gpus", "free:1", "--repeats", "2",
                                 "--parallel", "--", "--out", str(out), "--peers", "2"], env, timeout=WAIT_S * 2)
    assert code == 0, stdout + err
    _, cells, runs = _sweep(env)
    assert [r.config["gpus"] for r in runs] == [[0], [3]] and all(r.config["nproc_per_node"] == 1 for r in runs)
    seen = _ranks(out)
    assert {run.id: seen[run.id][0]["visible"] for run in runs} == {runs[0].id: "0", runs[1].id: "3"}


def test_a_cell_wider_than_the_host_fails_saying_so_and_the_others_run(tmp_path, monkeypatch):
    env, out = _gpu_env(tmp_path, monkeypatch), tmp_path / "ranks"
    code, stdout, err = run_cli(["sweep", "local", "--script", str(ENVDUMP), "--nproc", "17,1", "--parallel",
                                 "--", "--out", str(out)], env, timeout=WAIT_S * 2)
    assert code == 1, stdout + err
    _, (wide, narrow), (no_run, run) = _sweep(env)
    assert wide.state == "failed" and no_run is None
    assert wide.reason == "not launched: it needs 17 GPUs, but local has 16 that can run it"
    assert "fewer processes (--nproc)" in wide.hint
    assert "nproc=17: failed — not launched: it needs 17 GPUs" in stdout
    assert narrow.state == "done" and run.config["gpus"] == [0]


@pytest.mark.parametrize("args, says", [
    (["--gpus", "0,16"], "local has no GPU 16 (its GPUs: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)"),
    (["--gpus", "0,1", "--nproc", "1,4"], "a cell of 4 processes needs 4 GPUs, but local has 2 (among GPUs 0,1) "
                                          "that can run it"),
    (["--gpus", "free:2", "--nproc", "1"], "--nproc 1 and --gpus free:2 disagree"),
    (["--gpus", "0", "--env", "CUDA_VISIBLE_DEVICES=1"], "both choose the run's GPUs"),
    (["--gpus", "free:17"], "a cell of 17 processes needs 17 GPUs, but local has 16 that can run it"),
], ids=["a gpu the host lacks", "a pool too small", "nproc contradicts", "env contradicts", "more than the host"])
def test_parallel_gpus_the_host_can_never_give_are_refused_before_anything_runs(tmp_path, monkeypatch, args, says):
    env = _gpu_env(tmp_path, monkeypatch)
    code, stdout, err = run_cli(["sweep", "local", "--workload", "linear", "--steps", "2", "--repeats", "2",
                                 "--parallel", *args], env, timeout=WAIT_S)
    assert code == 2, stdout + err
    assert says in err and "Traceback" not in err, err
    with _open_store(env) as store:
        assert store.list_sweeps() == [] and store.list_runs() == []


def test_parallel_gpus_on_a_cpu_host_are_refused(tmp_path):
    env = cli_env(tmp_path)
    code, stdout, err = run_cli(["sweep", "local", "--workload", "linear", "--steps", "2", "--repeats", "2",
                                 "--parallel", "--gpus", "free:1"], env, timeout=WAIT_S)
    assert code == 2 and "local has no GPUs" in err, stdout + err


def test_a_serial_sweep_on_the_gpu_host_is_as_before(tmp_path, monkeypatch):
    """Without --parallel nothing is placed: every cell sees the host's GPUs, one cell at a time."""
    env, out = _gpu_env(tmp_path, monkeypatch), tmp_path / "ranks"
    code, stdout, err = run_cli(["sweep", "local", "--script", str(ENVDUMP), "--repeats", "2", "--", "--out",
                                 str(out)], env, timeout=WAIT_S * 2)
    assert code == 0, stdout + err
    _, cells, runs = _sweep(env)
    assert all(r.config.get("gpus") is None and "CUDA_VISIBLE_DEVICES" not in (r.config.get("env") or {})
               for r in runs)
    assert runs[1].started_at >= runs[0].ended_at
    assert all("CUDA_VISIBLE_DEVICES" not in json.loads(p.read_text())["env"] for p in out.glob("rank*.json"))


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="two cells side by side need two CPUs")
def test_a_parallel_sweep_on_a_cpu_host_is_as_before(tmp_path, holder):
    """This computer without nvidia-smi: cells side by side as its CPUs allow, no GPU settings."""
    env, out = cli_env(tmp_path), tmp_path / "ranks"
    code, stdout, err = run_cli(["sweep", "local", "--script", str(holder), "--repeats", "2", "--parallel", "--",
                                 "--out", str(out), "--peers", "2"], env, timeout=WAIT_S * 2)
    assert code == 0, stdout + err
    _, cells, runs = _sweep(env)
    assert all(r.config.get("gpus") is None and not r.config.get("env") for r in runs)
    seen = _ranks(out)
    assert sorted(seen) == sorted(r.id for r in runs)  # both ran together: each held until the other came
    assert {r["visible"] for ranks in seen.values() for r in ranks.values()} == {None}
    assert all(c.reason == "" for c in cells)


def test_a_parallel_sweep_on_a_cpu_host_whose_monitor_ends_runs_as_its_probe_says(tmp_path, monkeypatch):
    """The host's monitor ends by itself at once (a real process that exits), every time it is started: the
    probe found no GPUs on this computer, so the cells run on its CPUs instead of waiting to see its GPUs."""
    started = []

    def broken(target, interval_s=2.0, source=None):
        started.append(target.name)
        return [sys.executable, "-c", "import sys; sys.exit('no monitor on this host')"]

    monkeypatch.setattr(monitor_module, "monitor_command", broken)
    hosts = HostStore(tmp_path / "hosts.json")
    manager = RunManager(RunStore(tmp_path / "runs.sqlite3"), hosts, lambda name: open_target(name, hosts))
    try:
        with SweepRunner(manager) as runner:
            sweep = runner.start(SweepSpec(hosts=["local"], base={"workload": "linear", "steps": 2,
                                                                  "dataset_size": 64, "batch_size": 8},
                                           repeats=2, parallel=True))
            sweep = runner.wait(sweep.id, timeout=WAIT_S)
            cells = manager.store.sweep_cells(sweep.id)
        assert sweep.state == "done", [(c.state, c.reason) for c in cells]
        assert [c.state for c in cells] == ["done", "done"] and all(c.reason == "" for c in cells)
        assert started == ["local"]  # its monitor was tried and failed; once the probe said, never again
        assert manager.targets.environment("local")["gpu_count"] == 0
    finally:
        manager.close()
        manager.store.close()
