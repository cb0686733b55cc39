"""A sweep on an SSH host runs in the host's own queue (remote_runner/queue.py, ddpgui/core/sweeps/hostqueue.py),
through the real CLI in processes of its own over the loopback sshd: the client killed after the first cell has
finished changes nothing (every cell finishes on the host) and a new client with a fresh store gets every record
back with ``adopt``; a second sweep while the queue runs starts no second queue process and runs after the first;
``sweep-stop`` cancels the waiting cells and stops the running run on the host."""
import getpass
import json
import os
import secrets
import signal
import sys
from pathlib import Path

import pytest
from helpers.cli_process import cli_env, run_cli, start_cli
from helpers.host_queue import queue_processes
from helpers.spools import assert_stored_as_on_host, wait_for

from ddpgui.core.store import RunStore

FINAL = ("finished", "failed", "stopped")


@pytest.fixture
def host(ssh_env, tmp_path):
    """A profile ``q`` for the loopback sshd (this user, this Python: torch) with a run root of its own, in a CLI
    config under ``tmp_path``; yields (the CLI's environment, the run root)."""
    root = tmp_path / f"queue root {secrets.token_hex(3)}"
    env = cli_env(tmp_path, HOME=str(tmp_path))
    code, out, err = run_cli(["hosts", "add", "q", "--host", "127.0.0.1", "--port", str(ssh_env.server.port),
                              "--user", getpass.getuser(), "--auth", "key", "--key-file", str(ssh_env.key_plain),
                              "--python", sys.executable, "--run-root", str(root)], env)
    assert code == 0, err
    yield env, root
    for pid in queue_processes(root):
        os.kill(pid, signal.SIGKILL)
    for run_dir in (root / "runs").glob("*"):
        if host_state(run_dir) not in FINAL:
            run_cli(["stop", run_dir.name], env, timeout=60)


def host_state(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "status.json").read_text()).get("state")
    except (OSError, ValueError):
        return None


def queue_cells(root: Path) -> list[dict]:
    try:
        return json.loads((root / "queue" / "state.json").read_text())["cells"]
    except (OSError, ValueError, KeyError):
        return []


def store_of(env: dict) -> RunStore:
    return RunStore(Path(env["DDPGUI_DATA_DIR"]) / "runs.sqlite3")


def finished_runs(env: dict) -> int:
    if not (Path(env["DDPGUI_DATA_DIR"]) / "runs.sqlite3").exists():
        return 0
    with store_of(env) as store:
        return sum(r.state == "finished" for r in store.list_runs())


@pytest.mark.slow
def test_the_sweep_finishes_on_the_host_without_its_client_and_adopt_brings_it_back(host, tmp_path):
    env, root = host
    client = start_cli(["sweep", "q", "--workload", "linear", "--steps", "5", "--batch-size", "8", "--repeats", "6",
                        "--name", "lid closed", "--accept-new-host-key"], env)
    try:
        assert wait_for(lambda: finished_runs(env) >= 1 or client.poll() is not None, timeout=240)
        assert client.poll() is None, client.communicate()
        client.send_signal(signal.SIGKILL)  # the laptop's lid closes: nothing of the client is left
    finally:
        client.kill()
        client.communicate()
    assert wait_for(lambda: len(queue_cells(root)) == 6 and not queue_processes(root), timeout=300)
    cells = queue_cells(root)
    assert [c["state"] for c in cells] == ["launched"] * 6
    assert [host_state(Path(c["run_dir"])) for c in cells] == ["finished"] * 6
    with store_of(env) as store:  # the killed client had only part of it
        assert finished_runs(env) < 6

    fresh = dict(env, DDPGUI_DATA_DIR=str(tmp_path / "another computer"))
    code, out, err = run_cli(["adopt", "q", "--json", "--accept-new-host-key"], fresh)
    assert code == 0, err
    reply = json.loads(out)
    assert sorted(reply["adopted"]) == sorted(c["run_id"] for c in cells) and len(reply["sweeps"]) == 1
    with store_of(fresh) as store:
        (sweep,) = store.list_sweeps()
        assert sweep.name == "lid closed" and sweep.state == "done" and sweep.repeats == 6
        got = store.sweep_cells(sweep.id)
        assert [(c.state, c.run_id, c.repeat) for c in got] == [("done", c["run_id"], i) for i, c in enumerate(cells)]
        for cell in got:
            record = store.get_run(cell.run_id)
            assert record.state == "finished" and record.sweep_id == sweep.id and record.last_step == 5
            assert_stored_as_on_host(store, record)
    code, out, err = run_cli(["adopt", "q", "--json", "--accept-new-host-key"], fresh)  # again: nothing new
    assert code == 0 and json.loads(out)["adopted"] == [] and json.loads(out)["sweeps"] == [], err


@pytest.mark.slow
def test_a_second_sweep_shares_the_one_queue_and_sweep_stop_cancels_the_waiting_cells(host):
    env, root = host
    first = start_cli(["sweep", "q", "--workload", "linear", "--steps", "100000", "--repeats", "3", "--name", "long",
                       "--accept-new-host-key"], env)
    second = None
    try:
        assert wait_for(lambda: any(host_state(d) == "running" for d in (root / "runs").glob("*")), timeout=120)
        second = start_cli(["sweep", "q", "--workload", "linear", "--steps", "5", "--name", "short",
                            "--accept-new-host-key"], env)
        assert wait_for(lambda: len(queue_cells(root)) == 4 or second.poll() is not None, timeout=120)
        assert len(queue_processes(root)) == 1
        assert [c["state"] for c in queue_cells(root)] == ["launched", "waiting", "waiting", "waiting"]
        with store_of(env) as store:
            long = next(s for s in store.list_sweeps() if s.name == "long")
        code, out, err = run_cli(["sweep-stop", long.id, "--accept-new-host-key"], env, timeout=120)
        assert code == 0 and "stopped" in out, err
        states = [c["state"] for c in queue_cells(root)]
        assert states[:3] == ["launched", "cancelled", "cancelled"], states
        assert host_state(Path(queue_cells(root)[0]["run_dir"])) == "stopped"
        assert second.wait(timeout=180) == 0  # the short sweep ran after the long one was stopped
        out, err = first.communicate(timeout=60)
        assert first.returncode != 0 and "stopped" in out, err
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    with store_of(env) as store:
        sweeps = {s.name: s for s in store.list_sweeps()}
        assert sweeps["long"].state == "stopped" and sweeps["short"].state == "done"
        assert [c.state for c in store.sweep_cells(sweeps["long"].id)] == ["cancelled"] * 3
        (short,) = store.sweep_cells(sweeps["short"].id)
        assert store.get_run(short.run_id).state == "finished"
    assert sorted(d.name for d in (root / "runs").iterdir()) == sorted(  # the cancelled cells never got a run
        c["run_id"] for c in queue_cells(root) if c["state"] == "launched")


@pytest.mark.slow
def test_a_single_launch_queued_runs_after_the_current_one(host):
    env, root = host
    code, out, err = run_cli(["launch", "q", "--workload", "linear", "--minutes", "0.1", "--batch-size", "8",
                              "--queue", "--accept-new-host-key"], env)
    assert code == 0, err
    first = json.loads(out)["run_id"]
    assert f"queued on q as run {first}" in err
    code, out, err = run_cli(["launch", "q", "--workload", "linear", "--steps", "3", "--batch-size", "8", "--queue",
                              "--follow"], env)  # waits behind the first, on the host's queue, then follows it
    assert code == 0, out + err
    runs = {d.name: json.loads((d / "status.json").read_text()) for d in (root / "runs").iterdir()}
    second = next(name for name in runs if name != first)
    assert runs[first]["state"] == runs[second]["state"] == "finished"
    assert runs[second]["started_at"] >= runs[first]["ended_at"]
    with store_of(env) as store:
        assert store.get_run(second).state == "finished" and store.get_run(second).host == "q"
    code, out, err = run_cli(["launch", "local", "--workload", "linear", "--steps", "3", "--queue"], env)
    assert code == 2 and "a run is queued on an SSH host" in err, err
