"""RunManager on this computer: real supervisor, real torchrun (gloo, CPU), real SQLite store."""
import json
import os
import signal
import subprocess
import sys

import pytest
from helpers.spools import host_records, wait_for

from ddpgui.core.hosts import HostStore
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import RunStore
from ddpgui.core.targets.factory import open_target

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def manager(tmp_path):
    hosts = HostStore(tmp_path / "hosts.json")
    store = RunStore(tmp_path / "runs.sqlite3")
    m = RunManager(store, hosts, lambda name: open_target(name, hosts))
    yield m
    m.close()
    store.close()


def test_launch_follow_store_equals_host_spools(manager):
    updates = []
    manager.subscribe(updates.append)
    record = manager.launch("local", {"workload": "mlp", "nproc_per_node": 2, "steps": 40})
    final = manager.wait(record.id, timeout=240)
    assert final.state == "finished", (final.failure, final.message, final.hint,
                                       manager.store.log_tail(record.id, "stderr.log")[-3000:])
    assert final.last_step == 40
    run_dir = final.run_dirs[0]
    for spool in ("metrics.jsonl", "telemetry.jsonl", "events.jsonl"):
        assert manager.store.records(record.id, spool) == host_records(run_dir, spool), spool
    assert final.summary["steady_samples_per_s"] > 0
    assert final.environment["torch"] and final.environment["hostname"]
    assert any(u.records.get("metrics.jsonl") for u in updates)  # listeners saw the live stream
    assert b"starting torchrun" in manager.store.log_tail(record.id, "stderr.log")
    assert manager.store.offsets(record.id)["metrics.jsonl"] == os.path.getsize(os.path.join(run_dir,
                                                                                             "metrics.jsonl"))


def test_run_that_ended_unfollowed_is_completed_on_reattach(tmp_path):
    hosts = HostStore(tmp_path / "hosts.json")
    with RunStore(tmp_path / "runs.sqlite3") as store:
        first = RunManager(store, hosts, lambda name: open_target(name, hosts))
        record = first.launch("local", {"workload": "linear", "steps": 30}, follow=False)
        target = first.targets.target("local")
        assert wait_for(lambda: target.status(record.run_dirs[0])["state"] == "finished")
        first.close()
        assert store.get_run(record.id).state == "starting"  # nothing followed it
        again = RunManager(store, hosts, lambda name: open_target(name, hosts))
        assert again.reattach() == [record.id]
        final = again.wait(record.id, timeout=60)
        again.close()
        assert final.state == "finished"
        assert store.records(record.id) == host_records(record.run_dirs[0])


def test_corrupt_lines_are_skipped_counted_and_the_stream_goes_on(manager):
    record = manager.launch("local", {"workload": "linear", "steps": 400, "log_every": 1}, follow=False)
    run_dir = record.run_dirs[0]
    assert wait_for(lambda: os.path.exists(os.path.join(run_dir, "metrics.jsonl")))
    with open(os.path.join(run_dir, "metrics.jsonl"), "ab") as fh:
        fh.write(b'{"seq": 99999999, "step": 1, "lo\n')  # truncated record
        fh.write(b"\x00\xffgarbage not json\n")
    manager.follow(record.id)
    final = manager.wait(record.id, timeout=240)
    assert final.state == "finished"
    assert final.corrupt_lines == 2
    stored = manager.store.records(record.id)
    assert [r["step"] for r in stored] == list(range(1, 401))
    warnings = [e for e in manager.store.events(record.id) if e.get("event") == "warning"]
    assert warnings and "corrupt" in warnings[0]["message"]


def test_eight_runs_at_once_complete_and_stay_separate(manager):
    ids = [manager.launch("local", {"workload": "linear", "steps": 20 + i, "name": f"run {i}"}).id
           for i in range(8)]
    finals = [manager.wait(run_id, timeout=400) for run_id in ids]
    assert [f.state for f in finals] == ["finished"] * 8
    for i, final in enumerate(finals):
        steps = [r["step"] for r in manager.store.records(final.id)]
        assert steps == list(range(1, 21 + i)), final.name
    assert len({f.run_dirs[0] for f in finals}) == 8


def test_stop_rerun_duplicate_delete(manager):
    record = manager.launch("local", {"workload": "mlp", "minutes": 10.0, "name": "to stop; rm -rf ~"})
    assert wait_for(lambda: (manager.store.get_run(record.id).last_step or 0) > 2)
    manager.stop(record.id)
    stopped = manager.wait(record.id, timeout=60)
    assert stopped.state == "stopped"

    again = manager.rerun(record.id)
    assert again.id != record.id and again.name == record.name
    assert {k: v for k, v in again.config.items() if k != "run_id"} == \
           {k: v for k, v in record.config.items() if k != "run_id"}
    manager.stop(again.id)
    manager.wait(again.id, timeout=60)

    settings = manager.duplicate(record.id, precision="bf16", minutes=None, steps=5)
    assert settings["precision"] == "bf16" and settings["run_id"] == "" and settings["name"].endswith("(copy)")

    run_dir = record.run_dirs[0]
    manager.delete(record.id)
    assert not os.path.exists(run_dir)
    with pytest.raises(KeyError):
        manager.store.get_run(record.id)


def _cli(args, env, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "ddpgui", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kwargs)


def test_killed_cli_follower_reattaches_with_a_complete_series(tmp_path):
    env = dict(os.environ, DDPGUI_DATA_DIR=str(tmp_path / "data"), DDPGUI_CONFIG_DIR=str(tmp_path / "config"))
    launch = _cli(["launch", "local", "--workload", "linear", "--steps", "300", "--log-every", "1"], env)
    out, err = launch.communicate(timeout=120)
    assert launch.returncode == 0, err
    run_id = json.loads(out)["run_id"]
    follower = _cli(["follow", run_id], env)
    with RunStore(tmp_path / "data" / "runs.sqlite3") as store:
        assert wait_for(lambda: (store.get_run(run_id).last_step or 0) >= 5)
        follower.send_signal(signal.SIGKILL)  # the app dies mid-run
        follower.wait()
        partial = store.get_run(run_id).last_step
        again = _cli(["follow", run_id], env)
        out, err = again.communicate(timeout=300)
        assert again.returncode == 0, err
        run = store.get_run(run_id)
        assert run.state == "finished" and partial < 300
        assert store.records(run_id) == host_records(run.run_dirs[0])
        assert b"run finished" in out


def test_cli_exit_codes_and_refusals(tmp_path):
    env = dict(os.environ, DDPGUI_DATA_DIR=str(tmp_path / "data"), DDPGUI_CONFIG_DIR=str(tmp_path / "config"))
    bad = _cli(["launch", "local", "--workload", "mlp", "--batch-size", "0"], env)
    _, err = bad.communicate(timeout=60)
    assert bad.returncode == 2 and b"batch_size" in err
    unknown = _cli(["show", "no-such-run"], env)
    _, err = unknown.communicate(timeout=60)
    assert unknown.returncode == 2 and b"no run" in err
    failed = _cli(["launch", "local", "--workload", "linear", "--steps", "5", "--backend", "nccl", "--follow"], env)
    out, err = failed.communicate(timeout=120)
    assert failed.returncode == 1 and b"hint:" in out
