"""One run across two hosts (issue 7): two real sshd on loopback, two run roots, real torchrun with gloo.

Node "n0" is the suite's target sshd and node "n1" its second sshd (the jump host), each with its own run
root; 2 CPU processes per node make a world of 4.
"""
import dataclasses
import getpass
import json
import os
import secrets
import signal
import socket
import sys

import pytest
from helpers.spools import host_records, wait_for

from ddpgui.cli import main as cli_main
from ddpgui.core.hosts import HostStore
from ddpgui.core.paths import config_dir
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.runs.nodes import node_states
from ddpgui.core.store import RunStore
from ddpgui.core.targets.base import TargetError
from remote_runner import proctree
from remote_runner.config import ConfigError
from remote_runner.status import FINAL_STATES, read_status

pytestmark = pytest.mark.slow

SMALL = {"workload": "linear", "nproc_per_node": 2, "batch_size": 8, "dataset_size": 256, "log_every": 1,
         "telemetry_interval_s": 0.25}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def nodes(ssh_env, tmp_path):
    """A RunManager with profiles n0 and n1 on the two sshd (logging in as us, with this Python and torch)."""
    created = []

    def make(**changes):
        profiles = {
            "n0": ssh_env.profile("n0", user=getpass.getuser(), python=sys.executable, run_root=str(tmp_path / "n0")),
            "n1": ssh_env.profile("n1", port=ssh_env.jump.port, user=getpass.getuser(), python=sys.executable,
                                  run_root=str(tmp_path / "n1"), nccl_env={"GLOO_SOCKET_IFNAME": "lo"}),
        }
        for name, fields in changes.items():
            profiles[name] = dataclasses.replace(profiles[name], **fields)
        hosts = ssh_env.store(tmp_path, *profiles.values())
        store = RunStore(tmp_path / "runs.sqlite3")
        manager = RunManager(store, hosts, lambda name: ssh_env.target(tmp_path, hosts.get(name), store=hosts))
        created.append((manager, store))
        return manager

    yield make
    for manager, store in created:
        manager.close()
        store.close()


def test_two_nodes_train_as_one_world_of_four(nodes):
    manager = nodes()
    record = manager.launch_nodes(["n0", "n1"], dict(SMALL, steps=30))
    final = manager.wait(record.id, timeout=300)
    assert final.state == "finished", (final.message, manager.store.log_tail(record.id, "stderr.log", 1)[-2000:])
    assert final.hosts == ["n0", "n1"] and sorted(final.run_dirs) == [0, 1]
    run0, run1 = final.run_dirs[0], final.run_dirs[1]
    assert os.path.dirname(os.path.dirname(run0)) != os.path.dirname(os.path.dirname(run1))  # two run roots

    # Every node got the same run, its own node rank, node 0's endpoint, and its profile's environment.
    configs = [json.load(open(os.path.join(d, "config.json"))) for d in (run0, run1)]
    assert [c["node_rank"] for c in configs] == [0, 1] and {c["nnodes"] for c in configs} == {2}
    assert configs[0]["rdzv_endpoint"] == configs[1]["rdzv_endpoint"]
    assert configs[0]["rdzv_endpoint"].startswith("127.0.0.1:")
    assert configs[1]["env"] == {"GLOO_SOCKET_IFNAME": "lo"} and configs[0]["env"] == {}
    assert {k: v for k, v in configs[0].items() if k not in ("node_rank", "env")} == \
        {k: v for k, v in configs[1].items() if k not in ("node_rank", "env")}

    # Metrics come from global rank 0 (node 0) and are complete; the world had 4 ranks.
    assert [r["step"] for r in manager.store.records(record.id)] == list(range(1, 31))
    assert manager.store.records(record.id) == host_records(run0)
    assert not os.path.exists(os.path.join(run1, "metrics.jsonl"))
    starts = [e for e in manager.store.events(record.id, 0) if e.get("event") == "train_start"]
    assert starts and starts[0]["world_size"] == 4

    # Each node's own telemetry, events and logs are stored under its node.
    for node, run_dir in ((0, run0), (1, run1)):
        telemetry = manager.store.records(record.id, "telemetry.jsonl", node)
        assert telemetry and telemetry == host_records(run_dir, "telemetry.jsonl"), node
        assert manager.store.events(record.id, node)[-1]["event"] == "finished"
        assert b"starting torchrun" in manager.store.log_tail(record.id, "stderr.log", node)
    assert [s.state for s in node_states(manager.store, final)] == ["finished", "finished"]
    assert len(final.environment["nodes"]) == 2 and final.environment["warnings"] == []
    # The run's settings are node 0's without any profile's environment; one host cannot take them.
    assert final.config["nnodes"] == 2 and final.config["env"] == {}
    with pytest.raises(ConfigError) as caught:
        manager.launch("n0", final.config)
    assert caught.value.field == "nnodes" and "launch_nodes" in str(caught.value)


def test_killing_node_1_fails_the_run_on_both_nodes_naming_node_1(nodes):
    manager = nodes()
    # rank_failure_timeout_s is the bound on a collective waiting for a dead peer.
    record = manager.launch_nodes(["n0", "n1"], dict(SMALL, steps=100000, rank_failure_timeout_s=20))
    run0, run1 = record.run_dirs[0], record.run_dirs[1]
    assert wait_for(lambda: (manager.store.get_run(record.id).last_step or 0) >= 5, timeout=240)
    ranks = [pid for pid in proctree.rank_pids(run1) if pid in proctree.run_processes(run1, [])]
    assert len(ranks) == 2
    for pid in ranks:
        os.kill(pid, signal.SIGKILL)
    final = manager.wait(record.id, timeout=20 + 60)  # the bound, plus slack for a loaded machine
    assert final.state == "failed"
    assert final.message.startswith("node 1 (n1) failed: ") and "killed" in final.message, final.message
    assert final.failed_rank in (2, 3) and final.hint
    # The run ended on both nodes: each supervisor recorded an outcome and left no process behind.
    statuses = [read_status(d) for d in (run0, run1)]
    assert all(s["state"] in FINAL_STATES for s in statuses)
    assert statuses[1]["state"] == "failed" and statuses[1]["failure"] == "killed"
    assert wait_for(lambda: not proctree.run_processes(run0, []) and not proctree.run_processes(run1, []), 30)
    states = node_states(manager.store, final)
    assert [s.final for s in states] == [True, True] and states[1].failure == "killed"


def test_preflight_names_an_unreachable_node_and_launches_nothing(nodes, tmp_path):
    manager = nodes(n1={"port": _closed_port()})
    with pytest.raises(TargetError) as caught:
        manager.launch_nodes(["n0", "n1"], dict(SMALL, steps=10))
    assert str(caught.value).startswith("node 1 (n1) is not reachable: ")
    assert caught.value.hint
    assert manager.store.list_runs() == []
    assert not os.path.exists(tmp_path / "n0" / "runs") or not os.listdir(tmp_path / "n0" / "runs")


def test_preflight_finds_a_blocked_rendezvous_port_and_launches_nothing(nodes, tmp_path):
    # 192.0.2.1 (TEST-NET-1) is never routed: node 1 cannot reach node 0 there, as behind a firewall.
    manager = nodes(n0={"rdzv_address": "192.0.2.1"})
    with pytest.raises(TargetError) as caught:
        manager.launch_nodes(["n0", "n1"], dict(SMALL, steps=10))
    message = str(caught.value)
    assert message.startswith("node 1 (n1) cannot reach node 0 (n0) at 192.0.2.1:"), message
    assert "firewall" in caught.value.hint and "rendezvous address" in caught.value.hint
    assert manager.store.list_runs() == []
    for node in ("n0", "n1"):
        assert not os.path.exists(tmp_path / node / "runs") or not os.listdir(tmp_path / node / "runs")


def test_preflight_names_a_taken_rendezvous_port_on_node_0(nodes):
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        manager = nodes(n0={"rdzv_address": f"127.0.0.1:{taken.getsockname()[1]}"})
        with pytest.raises(TargetError) as caught:
            manager.preflight(["n0", "n1"], dict(SMALL, steps=10))
    assert str(caught.value).startswith("node 0 (n0) cannot hold a rendezvous port: cannot listen on port ")
    assert "another program holds that port" in caught.value.hint


def test_preflight_refuses_more_processes_than_a_node_has(nodes):
    manager = nodes()
    with pytest.raises(TargetError) as caught:
        manager.preflight(["n0", "n1"], dict(SMALL, nproc_per_node=10000, steps=10))
    assert str(caught.value).startswith("node 0 (n0) has ") and "asks for 10000 per node" in str(caught.value)
    assert "lower the processes per node" in caught.value.hint


def test_stop_stops_every_node(nodes):
    manager = nodes()
    record = manager.launch_nodes(["n0", "n1"], dict(SMALL, steps=100000))
    assert wait_for(lambda: (manager.store.get_run(record.id).last_step or 0) >= 3, timeout=240)
    manager.stop(record.id)
    final = manager.wait(record.id, timeout=120)
    assert final.state == "stopped", final.message
    assert [read_status(d)["state"] in FINAL_STATES for d in final.run_dirs.values()] == [True, True]
    for run_dir in final.run_dirs.values():
        assert not proctree.run_processes(run_dir, [])


@pytest.fixture
def app_profiles(ssh_env, tmp_path, monkeypatch):
    """Profiles n0/n1 (fresh names) in the app's own hosts file, as the CLI reads them; removed afterwards."""
    monkeypatch.setenv("HOME", str(tmp_path))  # the real ~/.ssh/known_hosts is neither read nor needed
    (config_dir() / "known_hosts").unlink(missing_ok=True)
    suffix = secrets.token_hex(3)
    names = [f"mn0-{suffix}", f"mn1-{suffix}", f"mndead-{suffix}"]
    for name, port, extra in zip(names, (ssh_env.server.port, ssh_env.jump.port, _closed_port()),
                                 (["--rdzv-address", "127.0.0.1"], ["--node-env", "GLOO_SOCKET_IFNAME=lo"], [])):
        assert cli_main(["hosts", "add", name, "--host", "127.0.0.1", "--port", str(port), "--user", getpass.getuser(),
                         "--auth", "key", "--key-file", str(ssh_env.key_plain), "--python", sys.executable,
                         "--run-root", str(tmp_path / name), *extra]) == 0
    yield names
    for name in names:
        HostStore().remove(name)


def test_cli_launch_nodes_follow_and_show_per_node_state(app_profiles, capsys):
    n0, n1, dead = app_profiles
    capsys.readouterr()
    assert cli_main(["launch", "--nodes", f"{n0},{dead}", "--workload", "linear", "--steps", "5",
                     "--accept-new-host-key"]) == 1
    assert f"node 1 ({dead}) is not reachable" in capsys.readouterr().err
    assert cli_main(["launch", "--nodes", f"{n0},{n1}", "--workload", "linear", "--nproc", "2", "--steps", "20",
                     "--batch-size", "8", "--log-every", "1", "--accept-new-host-key"]) == 0
    launched = json.loads(capsys.readouterr().out)
    assert sorted(launched["run_dirs"]) == ["0", "1"]
    configs = [json.load(open(os.path.join(launched["run_dirs"][n], "config.json"))) for n in ("0", "1")]
    assert configs[1]["env"] == {"GLOO_SOCKET_IFNAME": "lo"} and configs[0]["rdzv_endpoint"].startswith("127.0.0.1:")
    assert cli_main(["follow", launched["run_id"], "--accept-new-host-key"]) == 0
    capsys.readouterr()
    assert cli_main(["show", launched["run_id"]]) == 0
    shown = capsys.readouterr().out
    assert f"node 0      {n0}: finished" in shown and f"node 1      {n1}: finished" in shown, shown
    assert "steps       20/20" in shown


def test_cli_refuses_both_a_host_and_nodes(app_profiles, capsys):
    n0, n1, _ = app_profiles
    assert cli_main(["launch", n0, "--nodes", f"{n0},{n1}", "--workload", "linear"]) == 2
    err = capsys.readouterr().err
    assert "with --nodes, give no HOST" in err and "after --" in err
    assert cli_main(["launch", "--workload", "linear"]) == 2
    assert "name the host to run on" in capsys.readouterr().err


def test_a_node_that_cannot_be_launched_stops_the_nodes_already_started(nodes, tmp_path):
    manager = nodes()
    checked = manager.preflight(["n0", "n1"], dict(SMALL, steps=100000))
    (tmp_path / "n1" / "runs").write_text("not a directory")  # node 1 cannot make its run directory
    with pytest.raises(TargetError) as caught:
        manager.launch_nodes(["n0", "n1"], dict(SMALL, steps=100000), checked=checked)
    assert str(caught.value).startswith("node 1 (n1) could not be launched: ")
    [record] = manager.store.list_runs()
    assert record.state == "failed" and record.failure == "launch_failed"
    assert record.message.startswith("node 1 (n1) could not be launched: ") and list(record.run_dirs) == [0]
    assert read_status(record.run_dirs[0])["state"] in FINAL_STATES
    assert not proctree.run_processes(record.run_dirs[0], [])
