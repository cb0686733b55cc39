"""``ddpgui gpus HOST`` and ``--gpus`` as the real CLI runs them (subprocesses, private store and hosts).

On this CPU machine as it is ("no GPUs", load, memory, top processes), and as a GPU host: nvidia-smi on PATH
is tests/fixtures/gpu/fake_nvidia_smi.py replaying a real 8-GPU capture (GTX TITAN X: GPU 0 idle with 802 MiB
used, GPUs 1-7 busy with 6.4-10 GiB used each).  ``--gpus`` launches are real CPU runs (gloo): a tiny script
(tests/fixtures/scripts/envdump) writes the environment every rank saw.
"""
import json
import os
import signal
import time
from pathlib import Path

import pytest
from helpers.cli_process import cli_env, run_cli, start_cli
from helpers.gpu_snapshots import fake_smi_bin
from helpers.sampler_processes import samplers

from ddpgui.core.gpus.snapshot import parse_snapshot_line
from ddpgui.core.store import RunStore

REPO = Path(__file__).resolve().parents[2]
ENVDUMP = REPO / "tests" / "fixtures" / "scripts" / "envdump"
WAIT_S = 240  # the machine is shared and slow: generous


def _fake_smi_path(tmp_path) -> str:
    """A PATH whose nvidia-smi is the fake replaying the TITAN X capture."""
    return f"{fake_smi_bin(tmp_path)}:{os.environ['PATH']}"


@pytest.fixture
def cpu_env(tmp_path):
    return cli_env(tmp_path)


@pytest.fixture
def gpu_env(tmp_path):
    """The CLI's environment on a "GPU host": the fake nvidia-smi first on PATH (no NVML on this machine)."""
    log = tmp_path / "smi.log"
    log.write_text("")
    return cli_env(tmp_path, PATH=_fake_smi_path(tmp_path), FAKE_SMI_LOG=str(log))


def test_gpus_on_this_cpu_host_shows_load_memory_and_top_processes(cpu_env):
    code, out, err = run_cli(["gpus", "local"], cpu_env, timeout=WAIT_S)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("local") and lines[0].endswith(": no GPUs"), out
    assert lines[1].startswith("load ") and f"({os.cpu_count()} CPUs)" in lines[1] and " MiB" in lines[1]
    assert lines[2].split() == ["pid", "user", "CPU%", "RSS", "MiB", "command"]
    pids = [int(line.split()[0]) for line in lines[3:] if line.split() and line.split()[0].isdigit()]
    assert 1 <= len(pids) <= 10
    assert all(Path(f"/proc/{pid}").exists() or pid > 0 for pid in pids)
    assert "Traceback" not in err
    assert samplers(cpu_env["DDPGUI_DATA_DIR"]) == []  # the one-shot sampler ended


def test_gpus_json_is_the_snapshot(cpu_env):
    code, out, err = run_cli(["gpus", "local", "--json"], cpu_env, timeout=WAIT_S)
    assert code == 0, err
    snapshot = parse_snapshot_line(out.strip())
    assert snapshot.gpus == () and snapshot.source == "none" and snapshot.host == os.uname().nodename
    assert snapshot.cpu.cpu_count == os.cpu_count() and snapshot.cpu.mem_total_mib > 0 and snapshot.cpu.top
    assert all(top.cpu_pct is not None for top in snapshot.cpu.top)  # the second snapshot: CPU% known


def test_gpus_on_a_gpu_host_shows_each_gpu_and_how_many_are_free(gpu_env):
    code, out, err = run_cli(["gpus", "local"], gpu_env, timeout=WAIT_S)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].endswith(": 1 of 8 GPUs free (from nvidia-smi)"), out
    rows = {line.split()[0]: line for line in lines[2:10]}
    assert sorted(rows) == [str(i) for i in range(8)]
    assert "GeForce GTX TITAN X" in rows["0"] and "802/12206 MiB" in rows["0"] and rows["0"].endswith("free")
    assert "86%" in rows["1"] and "10032/12206 MiB" in rows["1"] and rows["1"].endswith("busy")
    assert " 54 C" in rows["1"] and " - " in rows["1"]  # temperature; power not in the capture
    code, out, err = run_cli(["gpus", "local", "--json"], gpu_env, timeout=WAIT_S)
    assert code == 0, err
    snapshot = parse_snapshot_line(out.strip())
    assert snapshot.summary() == "1 of 8 GPUs free" and snapshot.gpu(2).mem_used_mib == 6442


def test_watch_redraws_until_ctrl_c_and_leaves_no_sampler(gpu_env):
    proc = start_cli(["gpus", "local", "--watch", "--interval", "0.5"], gpu_env)
    try:
        headers = []
        deadline = time.monotonic() + WAIT_S
        while len(headers) < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"ddpgui gpus --watch ended early: {proc.stderr.read()}"
            if "GPUs free" in line:
                headers.append(line)
        assert len(headers) == 2, headers
        assert samplers(gpu_env["DDPGUI_DATA_DIR"]), "the sampler runs while watching"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    deadline = time.monotonic() + 60
    while samplers(gpu_env["DDPGUI_DATA_DIR"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert samplers(gpu_env["DDPGUI_DATA_DIR"]) == []


def _rank_envs(out_dir: Path) -> dict[int, dict]:
    return {int(path.stem[4:]): json.loads(path.read_text()) for path in out_dir.glob("rank*.json")}


def test_launch_on_chosen_gpus_gives_each_rank_them_and_stores_the_choice(gpu_env, tmp_path):
    out_dir = tmp_path / "ranks"
    code, out, err = run_cli(["launch", "local", "--script", str(ENVDUMP), "--gpus", "1,0", "--nproc", "2",
                              "--name", "on gpus 1,0", "--follow", "--", "--out", str(out_dir)], gpu_env, timeout=WAIT_S)
    assert code == 0, out + err
    # GPU 1 is busy in the capture: a warning that says so, and the run goes on
    assert "warning: GPU 1 is busy: 10032 MiB of 12206 MiB used, 86% utilised" in err
    assert "running on it anyway" in err and "GPU 0 is busy" not in err
    ranks = _rank_envs(out_dir)
    assert sorted(ranks) == [0, 1] and all(rank["world"] == 2 for rank in ranks.values())
    for rank in ranks.values():
        assert rank["env"]["CUDA_VISIBLE_DEVICES"] == "1,0" and rank["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    with _store(gpu_env) as store:
        (record,) = store.list_runs()
    assert record.config["gpus"] == [1, 0] and record.config["nproc_per_node"] == 2
    assert record.config["env"]["CUDA_VISIBLE_DEVICES"] == "1,0"
    code, out, err = run_cli(["runs"], gpu_env)
    assert code == 0, err
    header, row = out.splitlines()[:2]
    assert header.split()[-1] == "gpus" and row.split()[-1] == "1,0"
    code, out, err = run_cli(["show", record.id], gpu_env)
    assert code == 0 and "  gpus        1,0 (CUDA_VISIBLE_DEVICES)" in out, out + err


def _store(env):
    """The CLI's run store (its data folder), opened here."""
    old = os.environ.get("DDPGUI_DATA_DIR")
    os.environ["DDPGUI_DATA_DIR"] = env["DDPGUI_DATA_DIR"]
    try:
        return RunStore()
    finally:
        if old is None:
            del os.environ["DDPGUI_DATA_DIR"]
        else:
            os.environ["DDPGUI_DATA_DIR"] = old


def test_free_gpus_pick_the_idle_one_and_nproc_follows(gpu_env, tmp_path):
    out_dir = tmp_path / "ranks"
    code, out, err = run_cli(["launch", "local", "--script", str(ENVDUMP), "--gpus", "free:1", "--follow",
                              "--", "--out", str(out_dir)], gpu_env, timeout=WAIT_S)
    assert code == 0, out + err
    assert "warning" not in err
    ranks = _rank_envs(out_dir)
    assert sorted(ranks) == [0] and ranks[0]["env"]["CUDA_VISIBLE_DEVICES"] == "0"  # the only GPU under 1 GiB
    with _store(gpu_env) as store:
        (record,) = store.list_runs()
    assert record.config["gpus"] == [0] and record.config["nproc_per_node"] == 1


def test_rerun_checks_the_gpus_again_and_any_free_picks_again(gpu_env, tmp_path):
    """``ddpgui rerun`` of a run on chosen GPUs checks them on a fresh snapshot: a GPU lost since is refused,
    naming it, and nothing is launched; a run given "any 1 free" picks the free one again (here GPU 0 again,
    the capture's only free GPU), stored with how it was chosen."""
    code, out, err = run_cli(["launch", "local", "--workload", "linear", "--steps", "2", "--gpus", "1",
                              "--follow"], gpu_env, timeout=WAIT_S)
    assert code == 0, out + err
    with _store(gpu_env) as store:
        (named,) = store.list_runs()
    lost = dict(gpu_env, FAKE_SMI_LOST="1")
    code, out, err = run_cli(["rerun", named.id], lost, timeout=WAIT_S)
    assert code == 2, out + err
    assert "not rerun: " in err and "has no GPU 1" in err and "it is lost: Unknown Error" in err, err
    with _store(gpu_env) as store:
        assert [r.id for r in store.list_runs()] == [named.id]  # nothing launched
    code, out, err = run_cli(["rerun", named.id, "--follow"], gpu_env, timeout=WAIT_S)
    assert code == 0 and "warning: GPU 1 is busy: 10032 MiB" in err, out + err  # busy: it warns and runs

    code, out, err = run_cli(["launch", "local", "--workload", "linear", "--steps", "2", "--gpus", "free:1",
                              "--name", "any free", "--follow"], gpu_env, timeout=WAIT_S)
    assert code == 0, out + err
    with _store(gpu_env) as store:
        (free,) = [r for r in store.list_runs() if r.name == "any free"]
    assert free.config["gpus"] == [0] and free.config["gpu_choice"] == "free:1"
    code, out, err = run_cli(["rerun", free.id, "--follow"], gpu_env, timeout=WAIT_S)
    assert code == 0 and "warning" not in err, out + err
    with _store(gpu_env) as store:
        again = [r for r in store.list_runs() if r.name == "any free" and r.id != free.id]
    assert len(again) == 1 and again[0].config["gpus"] == [0] and again[0].config["gpu_choice"] == "free:1"
    code, out, err = run_cli(["show", again[0].id], gpu_env)
    assert code == 0 and "  gpus        0 (CUDA_VISIBLE_DEVICES, picked as free:1)" in out, out + err


@pytest.mark.parametrize("gpus, extra, said", [
    ("free:2", [], "free:2 asks for 2 free GPUs, but "),
    ("9", [], "has no GPU 9 (its GPUs: 0, 1, 2, 3, 4, 5, 6, 7)"),
    ("3", ["FAKE_SMI_LOST=3"], "has no GPU 3 (its GPUs: 0, 1, 2, 4, 5, 6, 7); a GPU without an index (bus "),
    ("0,3", ["--nproc", "4"], "--nproc 4 and --gpus 0,3 disagree: 2 GPUs for 4 processes per node"),
    ("0", ["--env", "CUDA_VISIBLE_DEVICES=2"], "both choose the run's GPUs"),
    ("0,,1", [], "an index is missing between two commas"),
], ids=["not enough free", "missing GPU", "lost GPU", "nproc contradicts", "env contradicts", "bad form"])
def test_a_choice_that_cannot_run_is_refused_and_launches_nothing(gpu_env, gpus, extra, said):
    env = dict(gpu_env)
    args = []
    for item in extra:
        if item.startswith("FAKE_SMI_"):
            key, value = item.split("=", 1)
            env[key] = value
        else:
            args.append(item)
    code, out, err = run_cli(["launch", "local", "--workload", "linear", "--steps", "2", "--gpus", gpus, *args],
                             env, timeout=WAIT_S)
    assert code == 2, out + err
    assert said in err and "Traceback" not in err, err
    if gpus == "free:2":
        assert "has 1 of 8 free (0); busy: GPU 1: 10032 MiB of 12206 MiB used" in err
    if gpus == "3":
        assert ") it is lost: Unknown Error" in err  # the driver's own words for the GPU that fell off the bus
    with _store(gpu_env) as store:
        assert store.list_runs() == []


def test_a_sweep_takes_the_same_gpus_for_every_cell(gpu_env):
    code, out, err = run_cli(["sweep", "local", "--workload", "linear", "--steps", "2", "--nproc", "1,2",
                              "--gpus", "0"], gpu_env, timeout=WAIT_S)
    assert code == 2 and "--nproc 2 and --gpus 0 disagree" in err, out + err


def test_a_sweep_runs_every_cell_on_the_chosen_gpus(gpu_env):
    code, out, err = run_cli(["sweep", "local", "--workload", "linear", "--steps", "2", "--batch-size", "4,8",
                              "--gpus", "0", "--name", "gpu sweep"], gpu_env, timeout=WAIT_S * 2)
    assert code == 0, out + err
    with _store(gpu_env) as store:
        runs = store.list_runs()
    assert len(runs) == 2 and sorted(r.config["batch_size"] for r in runs) == [4, 8]
    assert all(r.config["gpus"] == [0] and r.config["env"]["CUDA_VISIBLE_DEVICES"] == "0" for r in runs)
