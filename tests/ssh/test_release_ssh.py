"""A rented instance released by itself (remote_runner/release.py, ddpgui/cli/release.py), through the real CLI
over an sshd of the test's own, which the release action kills as a shutdown would: the action fires once the
last run has ended and the idle time has passed, with no client connected, and never while the run is active; an
action that destroys the disk waits until a client has collected every record (a follow does it), then fires; a
release that fails is reported in words by ``hosts release-status``.  The watcher polls every 5 s, as it does
for users: the measured delay is the product's."""
import getpass
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from helpers.cli_process import cli_env, run_cli
from helpers.host_queue import release_watchers
from helpers.spools import wait_for

FINAL = ("finished", "failed", "stopped")


@pytest.fixture
def instance(ssh_env, own_server, tmp_path):
    """A profile ``inst`` for the test's own sshd, with a run root of its own; yields (CLI env, run root, server)."""
    root = tmp_path / "inst root"
    env = cli_env(tmp_path, HOME=str(tmp_path))
    code, out, err = run_cli(["hosts", "add", "inst", "--host", "127.0.0.1", "--port", str(own_server.port),
                              "--user", getpass.getuser(), "--auth", "key", "--key-file", str(ssh_env.key_plain),
                              "--python", sys.executable, "--run-root", str(root)], env)
    assert code == 0, err
    yield env, root, own_server
    for pid in release_watchers(root):
        os.kill(pid, signal.SIGKILL)


def host_status(root: Path) -> dict:
    runs = list((root / "runs").glob("*/status.json"))
    return json.loads(runs[0].read_text()) if runs else {}


def host_states(root: Path) -> list:
    states = []
    for status in (root / "runs").glob("*/status.json"):
        try:
            states.append(json.loads(status.read_text()).get("state"))
        except (OSError, ValueError):
            states.append(None)  # being written
    return states


def release_state(root: Path) -> dict:
    try:
        return json.loads((root / "release" / "state.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.slow
def test_the_instance_releases_itself_after_the_last_run_with_no_client(instance, tmp_path):
    env, root, server = instance
    marker = tmp_path / "shut down"
    command = f"date +%s.%N > '{marker}.new'; mv '{marker}.new' '{marker}'; kill {server.proc.pid}"
    code, out, err = run_cli(["hosts", "edit", "inst", "--release-command", command, "--release-after", "0.25",
                              "--accept-new-host-key"], env)
    assert code == 0, err
    assert "release: after 15 s idle" in out and "keeps the disk (a stop)" in out and "releases in" in out, out
    code, out, err = run_cli(["launch", "inst", "--workload", "linear", "--nproc", "1", "--minutes", "0.4",
                              "--batch-size", "8"], env)  # no --follow: the client is gone once it started
    assert code == 0, err
    assert wait_for(lambda: host_status(root).get("state") in FINAL, timeout=120)
    assert not marker.exists()  # the run lasted past the idle time: no release while it ran
    ended = host_status(root)["ended_at"]
    assert wait_for(marker.exists, timeout=90)
    fired = float(marker.read_text())
    assert ended + 15 <= fired <= ended + 15 + 30, fired - ended  # the idle time chosen + at most 30 s
    assert wait_for(lambda: server.proc.poll() is not None, timeout=10)  # the host is gone, as after a shutdown
    assert wait_for(lambda: release_state(root).get("released_at"), timeout=10)
    assert release_state(root)["last"]["ok"]


@pytest.mark.slow
def test_a_terminate_waits_for_the_records_until_a_client_collects_them(instance, tmp_path):
    env, root, server = instance
    marker = tmp_path / "terminated"
    code, out, err = run_cli(["launch", "inst", "--workload", "linear", "--nproc", "1", "--steps", "3",
                              "--batch-size", "8", "--accept-new-host-key"], env)
    assert code == 0, err
    code, out, err = run_cli(["hosts", "edit", "inst", "--release-command", f"touch '{marker}'",
                              "--release-kind", "terminate", "--release-after", "0.02"], env)
    assert code == 0, err
    assert "destroys the instance's disk" in err
    assert wait_for(lambda: host_status(root).get("state") in FINAL, timeout=120)
    time.sleep(7)  # the idle time and a poll of the watcher: it waits for the records, not the clock
    assert not marker.exists()
    code, out, err = run_cli(["hosts", "release-status", "inst"], env)
    assert code == 0 and "idle, but the release waits: no client has collected every record" in out, out + err
    run_id = host_status(root)["run_id"] if "run_id" in host_status(root) else next((root / "runs").iterdir()).name
    code, out, err = run_cli(["follow", run_id], env)  # a client collects them: the host hears it
    assert code == 0, err
    collected = json.loads(next((root / "runs").iterdir()).joinpath("collected.json").read_text())
    assert collected["offsets"]["metrics.jsonl"] == next((root / "runs").iterdir()).joinpath(
        "metrics.jsonl").stat().st_size
    assert wait_for(marker.exists, timeout=30)


def test_a_release_that_fails_is_reported_at_the_next_connection(instance):
    env, root, server = instance
    code, out, err = run_cli(["hosts", "edit", "inst", "--release-command", "echo 'no such pod' >&2; exit 3",
                              "--release-after", "0", "--accept-new-host-key"], env)
    assert code == 0, err
    assert wait_for(lambda: release_state(root).get("attempts") == 1, timeout=30)
    code, out, err = run_cli(["hosts", "release-status", "inst"], env)
    assert code == 1, out + err
    assert "last release FAILED" in out and "exited with 3: no such pod" in out, out
    code, out, err = run_cli(["hosts", "edit", "inst", "--no-release"], env)
    assert code == 0 and "no release action is set on the host" in out, out + err
    assert wait_for(lambda: not release_watchers(root), timeout=15)


@pytest.mark.slow
def test_kept_outputs_come_back_as_the_run_ends_and_the_host_hears_it(instance, tmp_path):
    """``launch --keep-outputs``: the files of the run's outputs folder are downloaded to DATA_DIR/outputs/RUN as
    the run ends (sha256-checked), and the host's collected.json says so: a terminate would wait for it."""
    env, root, server = instance
    outs = tmp_path / "outs"
    (outs / "ckpt").mkdir(parents=True)
    payload = os.urandom(300_000)
    (outs / "ckpt" / "model.pt").write_bytes(payload)
    code, out, err = run_cli(["launch", "inst", "--workload", "linear", "--nproc", "1", "--steps", "3",
                              "--batch-size", "8", "--outputs-dir", str(outs), "--keep-outputs", "--follow",
                              "--accept-new-host-key"], env)
    assert code == 0, out + err
    run_dir = next((root / "runs").iterdir())
    kept = Path(env["DDPGUI_DATA_DIR"]) / "outputs" / run_dir.name / "outputs" / "ckpt" / "model.pt"
    assert kept.read_bytes() == payload
    collected = json.loads((run_dir / "collected.json").read_text())
    assert collected["outputs"] is True
    assert collected["offsets"]["events.jsonl"] == (run_dir / "events.jsonl").stat().st_size


def finished(env: dict) -> list:
    from ddpgui.core.store import RunStore

    path = Path(env["DDPGUI_DATA_DIR"]) / "runs.sqlite3"
    if not path.exists():
        return []
    with RunStore(path) as store:
        return [r for r in store.list_runs() if r.state == "finished"]


@pytest.mark.slow
def test_overnight_the_sweep_ends_on_the_host_and_the_terminate_waits_for_the_morning_client(instance, tmp_path):
    """The issue's whole night: a sweep keeping its outputs, its client killed after the first cell (the lid
    closes); the host runs every cell, then waits with its destroying release until a client has every record
    and every kept output (the laptop opens: sweep-resume), and then releases itself."""
    from helpers.cli_process import start_cli

    env, root, server = instance
    outs = tmp_path / "outs"
    outs.mkdir()
    (outs / "samples.txt").write_text("generated\n")
    marker = tmp_path / "terminated"
    client = start_cli(["sweep", "inst", "--workload", "linear", "--steps", "4", "--batch-size", "8", "--repeats",
                        "3", "--name", "night", "--outputs-dir", str(outs), "--keep-outputs",
                        "--accept-new-host-key"], env)
    try:
        assert wait_for(lambda: len(finished(env)) >= 1 or client.poll() is not None, timeout=240)
        assert client.poll() is None, client.communicate()
        client.send_signal(signal.SIGKILL)
    finally:
        client.kill()
        client.communicate()
    code, out, err = run_cli(["hosts", "edit", "inst", "--release-command", f"touch '{marker}'; kill {server.proc.pid}",
                              "--release-kind", "terminate", "--release-after", "0.02"], env)
    assert code == 0, err
    assert wait_for(lambda: host_states(root).count("finished") == 3, timeout=240)
    time.sleep(7)  # idle longer than chosen, and a look of the watcher: the records and outputs wait for a client
    assert not marker.exists()
    sweep_id = json.loads(run_cli(["sweeps", "--json"], env)[1])[0]["id"]
    code, out, err = run_cli(["sweep-resume", sweep_id], env)  # the morning: the laptop opens
    assert code == 0, out + err
    runs = finished(env)
    assert len(runs) == 3, out + err
    for run in runs:
        assert (Path(env["DDPGUI_DATA_DIR"]) / "outputs" / run.id).is_dir(), out + err
        assert (Path(env["DDPGUI_DATA_DIR"]) / "outputs" / run.id / "outputs" / "samples.txt").read_text() == \
            "generated\n"
    assert wait_for(marker.exists, timeout=30)
    assert wait_for(lambda: server.proc.poll() is not None, timeout=10)


def test_a_release_removed_while_the_host_is_away_is_cleared_at_the_next_connection(instance, tmp_path):
    env, root, server = instance
    code, out, err = run_cli(["hosts", "edit", "inst", "--release-command", f"touch '{tmp_path / 'released'}'",
                              "--release-after", "600", "--accept-new-host-key"], env)
    assert code == 0 and (root / "release" / "policy.json").exists(), err
    server.stop()  # the host is away
    code, out, err = run_cli(["hosts", "edit", "inst", "--no-release"], env)
    assert code == 0, err
    assert "was not reached" in err and "until then its old release action stays set there" in err
    assert (root / "release" / "policy.json").exists()
    server.start()
    code, out, err = run_cli(["launch", "inst", "--workload", "linear", "--steps", "2", "--batch-size", "8",
                              "--follow"], env)  # any connection of a client clears it
    assert code == 0, err
    assert wait_for(lambda: not (root / "release" / "policy.json").exists(), timeout=30)
    assert wait_for(lambda: not release_watchers(root), timeout=15)
    assert json.loads((Path(env["DDPGUI_CONFIG_DIR"]) / "release-clear.json").read_text()) == []
