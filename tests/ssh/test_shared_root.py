"""Two hosts whose run root is one directory (an NFS home on a lab cluster): two real loopback sshd.

Profiles "s0" and "s1" log in to the suite's two sshd with the same run root.  A 2-node run gets one
directory per node, its rerun too; single-node runs launched at once through both hosts (two clients,
each with its own store) never collide, not even when both chose the same run id.
"""
import getpass
import os
import sys
import threading

import pytest
from helpers.spools import assert_stored_as_on_host, host_records

from ddpgui.core.runs.adopt import adopt_runs
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import RunStore
from ddpgui.core.targets.base import TargetError
from remote_runner.status import read_status

pytestmark = pytest.mark.slow

SMALL = {"workload": "linear", "nproc_per_node": 1, "batch_size": 8, "dataset_size": 256, "log_every": 1,
         "telemetry_interval_s": 0.25}


@pytest.fixture
def shared(ssh_env, tmp_path):
    """make(client) -> a RunManager (its own store) over profiles s0, s1 on the two sshd sharing one run root."""
    root = str(tmp_path / "shared home" / "ddpgui")
    created = []

    def make(client: str = "a") -> RunManager:
        profiles = [ssh_env.profile("s0", user=getpass.getuser(), python=sys.executable, run_root=root),
                    ssh_env.profile("s1", port=ssh_env.jump.port, user=getpass.getuser(), python=sys.executable,
                                    run_root=root, nccl_env={"GLOO_SOCKET_IFNAME": "lo"})]
        (tmp_path / client).mkdir()
        hosts = ssh_env.store(tmp_path / client, *profiles)
        store = RunStore(tmp_path / client / "runs.sqlite3")
        manager = RunManager(store, hosts, lambda name: ssh_env.target(tmp_path / client, hosts.get(name),
                                                                       store=hosts))
        created.append((manager, store))
        return manager

    make.root = root
    yield make
    for manager, store in created:
        manager.close()
        store.close()


def _assert_complete(manager, record):
    """Every node's metrics (node 0) and telemetry stored, as the host wrote them."""
    assert [r["step"] for r in manager.store.records(record.id)] == list(range(1, record.total_steps + 1))
    assert manager.store.records(record.id) == host_records(record.run_dirs[0])
    for node, run_dir in record.run_dirs.items():
        telemetry = manager.store.records(record.id, "telemetry.jsonl", node)
        assert telemetry and telemetry == host_records(run_dir, "telemetry.jsonl"), node
        assert manager.store.events(record.id, node)[-1]["event"] == "finished"


def test_two_nodes_in_one_shared_run_root_train_to_the_end_and_rerun(shared):
    manager = shared()
    record = manager.launch_nodes(["s0", "s1"], dict(SMALL, steps=20))
    final = manager.wait(record.id, timeout=300)
    assert final.state == "finished", (final.message, manager.store.log_tail(record.id, "stderr.log", 1)[-2000:])
    runs = os.path.join(shared.root, "runs")
    assert final.run_dirs == {0: os.path.join(runs, f"{record.id}.node0"), 1: os.path.join(runs, f"{record.id}.node1")}
    assert [read_status(d)["state"] for d in final.run_dirs.values()] == ["finished", "finished"]
    _assert_complete(manager, final)

    again = manager.wait(manager.rerun(record.id).id, timeout=300)
    assert again.state == "finished", again.message
    assert again.id != record.id and sorted(again.run_dirs) == [0, 1]
    _assert_complete(manager, again)
    assert sorted(os.listdir(runs)) == sorted(os.path.basename(d) for r in (final, again) for d in r.run_dirs.values())


def test_single_node_runs_through_both_hosts_at_once_do_not_collide(shared):
    clients = [shared("a"), shared("b")]
    records, errors = {}, []

    def launch(client, host):
        try:
            records[host] = client.launch(host, dict(SMALL, steps=15))
        except Exception as exc:  # reported below
            errors.append(exc)

    # Two clients deploy the runner into the fresh shared root and launch at the same moment.
    threads = [threading.Thread(target=launch, args=(c, h)) for c, h in zip(clients, ("s0", "s1"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert records["s0"].run_dirs[0] != records["s1"].run_dirs[0]
    for client, host in zip(clients, ("s0", "s1")):
        final = client.wait(records[host].id, timeout=300)
        assert final.state == "finished", final.message
        _assert_complete(client, final)

    # Both clients chose the same run id: one launches, the other is refused, and nothing is overwritten.
    same = dict(SMALL, steps=15, run_id="20260101-000000-abcdef")
    first = clients[0].launch("s0", same)
    config = open(os.path.join(first.run_dirs[0], "config.json"), "rb").read()
    with pytest.raises(TargetError) as caught:
        clients[1].launch("s1", dict(same, steps=99))
    assert "already exists: another launch chose the same run id" in str(caught.value)
    assert open(os.path.join(first.run_dirs[0], "config.json"), "rb").read() == config
    assert clients[0].wait(first.id, timeout=300).state == "finished"
    assert clients[1].store.get_run(same["run_id"]).state == "failed"


def test_adopt_over_ssh_takes_back_a_two_node_run_as_one_and_a_single_node_run(shared):

    client = shared("a")
    two = client.wait(client.launch_nodes(["s0", "s1"], dict(SMALL, steps=12)).id, timeout=300)
    one = client.wait(client.launch("s1", dict(SMALL, steps=8)).id, timeout=300)
    assert (two.state, one.state) == ("finished", "finished")

    other = shared("b")  # another computer (or the same one after its store was lost): an empty store
    result = adopt_runs(other, ["s0", "s1"])
    assert sorted(r.id for r in result.adopted) == sorted([two.id, one.id]) and not result.skipped
    for before in (two, one):
        after = other.wait(before.id, timeout=120)
        assert (after.state, after.last_step, after.hosts, after.run_dirs) == \
            ("finished", before.total_steps, before.hosts, before.run_dirs)
        assert after.config == before.config
        assert_stored_as_on_host(other.store, after)
        for node in after.run_dirs:
            assert other.store.records(after.id, "telemetry.jsonl", node)
    assert adopt_runs(other, ["s0", "s1"]).adopted == []

    # Node 1's directory elsewhere (its host has its own run root) and only node 0's host named: the run is not
    # half-adopted, and the message says to name every host of the run.
    node1, away = two.run_dirs[1], os.path.join(shared.root, "elsewhere")
    os.rename(node1, away)
    try:
        third = shared("c")
        partial = adopt_runs(third, ["s0"])
    finally:
        os.rename(away, node1)
    assert [r.id for r in partial.adopted] == [one.id]
    [(where, why)] = [s for s in partial.skipped if two.id in s[1]]
    assert "node(s) 1 are not on the hosts named" in why and "naming every host of the run" in why
