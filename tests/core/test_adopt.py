"""``adopt``: after the run store is lost, the runs on a host are taken back, every point, exactly once.

Real supervisor and torchrun (gloo, CPU) on this computer, a real SQLite store deleted and made again.
"""
import dataclasses
import json
import os
import subprocess
import sys

import pytest
from helpers.spools import assert_stored_as_on_host, wait_for

from ddpgui.core.hosts import HostStore
from ddpgui.core.runs.adopt import adopt_runs
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import RunStore
from ddpgui.core.targets.factory import open_target

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPOOLS = ("metrics.jsonl", "telemetry.jsonl", "events.jsonl")


def _delete_store(path):
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{path}{suffix}"):
            os.unlink(f"{path}{suffix}")


def test_adopt_takes_back_ended_and_live_runs_after_the_store_is_gone(tmp_path):
    hosts = HostStore(tmp_path / "hosts.json")
    # A run root of its own: the session's default one holds other tests' runs, which adopt would take too.
    hosts.update(dataclasses.replace(hosts.get("local"), run_root=str(tmp_path / "root")))
    path = tmp_path / "runs.sqlite3"
    with RunStore(path) as store:
        first = RunManager(store, hosts, lambda name: open_target(name, hosts))
        ended = first.wait(first.launch("local", {"workload": "linear", "steps": 25, "log_every": 1,
                                                  "name": "ended one", "tags": ["a"]}).id, timeout=240)
        assert ended.state == "finished"
        live = first.launch("local", {"workload": "linear", "steps": 100000, "log_every": 1}, follow=False)
        target = first.targets.target("local")
        assert wait_for(lambda: target.status(live.run_dirs[0])["state"] == "running", timeout=120)
        first.close()
    _delete_store(path)

    with RunStore(path) as store:
        manager = RunManager(store, hosts, lambda name: open_target(name, hosts))
        try:
            result = adopt_runs(manager, ["local"])
            assert sorted(r.id for r in result.adopted) == sorted([ended.id, live.id])
            assert result.ended == [ended.id] and result.known == [] and result.skipped == []
            again = manager.wait(ended.id, timeout=120)
            assert (again.state, again.last_step, again.name, again.tags) == ("finished", 25, "ended one", ["a"])
            assert again.run_dirs == ended.run_dirs and again.config == ended.config
            assert again.summary == ended.summary
            assert_stored_as_on_host(store, again)

            # The live run is followed live: points keep arriving, and it can be stopped through its new record.
            assert wait_for(lambda: (store.get_run(live.id).last_step or 0) >= 20, timeout=120)
            manager.stop(live.id)
            stopped = manager.wait(live.id, timeout=120)
            assert stopped.state == "stopped"
            assert_stored_as_on_host(store, stopped)
            counts = {r: {s: len(store.records(r, s)) for s in SPOOLS} for r in (ended.id, live.id)}

            # Adopting again adds nothing.
            twice = adopt_runs(manager, ["local"])
            assert twice.adopted == [] and sorted(twice.known) == sorted([ended.id, live.id])
            assert {r: {s: len(store.records(r, s)) for s in SPOOLS} for r in (ended.id, live.id)} == counts
        finally:
            manager.close()


def _cli(args, env):
    return subprocess.run([sys.executable, "-m", "ddpgui", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)


def test_cli_adopt_after_the_store_was_moved_aside(tmp_path):
    env = dict(os.environ, DDPGUI_DATA_DIR=str(tmp_path / "data"), DDPGUI_CONFIG_DIR=str(tmp_path / "config"))
    launched = _cli(["launch", "local", "--workload", "linear", "--steps", "30", "--log-every", "1", "--follow"], env)
    assert launched.returncode == 0, launched.stderr
    with RunStore(tmp_path / "data" / "runs.sqlite3") as store:
        [before] = store.list_runs()
    _delete_store(tmp_path / "data" / "runs.sqlite3")

    adopted = _cli(["adopt", "local"], env)
    assert adopted.returncode == 0, adopted.stderr
    assert f"adopted {before.id} " in adopted.stdout and "finished, 30 steps" in adopted.stdout, adopted.stdout
    with RunStore(tmp_path / "data" / "runs.sqlite3") as store:
        [after] = store.list_runs()
        assert (after.id, after.state, after.last_step) == (before.id, "finished", 30)
        assert_stored_as_on_host(store, after)
    twice = _cli(["adopt", "local", "--json"], env)
    assert twice.returncode == 0, twice.stderr
    assert json.loads(twice.stdout) == {"adopted": [], "known": [before.id], "skipped": [], "sweeps": []}
    listed = _cli(["runs", "--json"], env)
    assert [r["id"] for r in json.loads(listed.stdout)] == [before.id]
