"""Issue 7: what a second node costs at start-up (the rendezvous).

Launch → first metric committed at the client, for a 2-node run (2 + 2 processes, two loopback sshd,
two run roots; the preflight included) and a 1-node run of 4 processes over the same SSH, interleaved.
"""
from __future__ import annotations

import getpass
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.bench_ssh import _start_sshd
from benchmarks.common import Row, median

CONFIG = {"workload": "linear", "steps": 20, "log_every": 1, "batch_size": 8, "dataset_size": 512}


def _manager(root: Path, servers: list, keys: list):
    from ddpgui.core.hosts import HostProfile, HostStore
    from ddpgui.core.runs.manager import RunManager
    from ddpgui.core.ssh.connection import SSHConnection
    from ddpgui.core.ssh.known_hosts import KnownHosts
    from ddpgui.core.store import RunStore
    from ddpgui.core.targets.ssh import SSHTarget

    (root / "known_hosts").write_text("".join(s.known_hosts_lines() for s in servers))
    known = KnownHosts(shared_files=[root / "known_hosts"], app_file=root / "app_known_hosts")
    hosts = HostStore(root / "hosts.json")
    for i, (server, key) in enumerate(zip(servers, keys)):
        hosts.add(HostProfile(name=f"node{i}", hostname="127.0.0.1", port=server.port, user=getpass.getuser(),
                              auth="key", key_file=str(key), python=sys.executable, run_root=str(root / f"n{i}")))
    store = RunStore(root / "runs.sqlite3")

    def open_target(name):
        return SSHTarget(hosts.get(name), SSHConnection(hosts.route(name), known_hosts=known))

    return RunManager(store, hosts, open_target), store


def _first_metric(manager, launch) -> float:
    """Seconds from calling ``launch`` to the first metric record committed at the client."""
    got = threading.Event()
    unsubscribe = manager.subscribe(lambda u: got.set() if u.records.get("metrics.jsonl") else None)
    started = time.perf_counter()
    record = launch()
    got.wait(300)
    elapsed = time.perf_counter() - started
    unsubscribe()
    final = manager.wait(record.id, 300)
    if final.state != "finished":
        raise RuntimeError(f"benchmark run {record.id} {final.state}: {final.message}")
    return elapsed


def run(repeats: int = 3) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        servers, keys = [], []
        for i in range(2):  # two sshd, as two machines
            (root / f"s{i}").mkdir()
            server, key = _start_sshd(root / f"s{i}")
            servers.append(server)
            keys.append(key)
        manager, store = _manager(root, servers, keys)
        try:
            for host in ("node0", "node1"):  # connect, upload the runner and probe once, outside the timings
                manager.targets.probe(host)
            one, two, checks = [], [], []
            for _ in range(repeats):
                t0 = time.perf_counter()
                manager.preflight(["node0", "node1"], dict(CONFIG, nproc_per_node=2))
                checks.append(time.perf_counter() - t0)
                one.append(_first_metric(manager, lambda: manager.launch("node0", dict(CONFIG, nproc_per_node=4))))
                two.append(_first_metric(manager, lambda: manager.launch_nodes(["node0", "node1"],
                                                                               dict(CONFIG, nproc_per_node=2))))
        finally:
            manager.close()
            store.close()
            for server in servers:
                server.stop()
    ratio = median(two) / median(one)
    note = f"median of {repeats} interleaved ({', '.join(f'{x:.1f}' for x in one)}); runner already on the hosts"
    return [Row("launch→first metric, 1 node x 4 procs (ssh)", median(one), "s", note=note),
            Row("launch→first metric, 2 nodes x 2 procs (ssh)", median(two), "s",
                note=f"preflight included ({', '.join(f'{x:.1f}' for x in two)})"),
            Row("2-node / 1-node start-up (rendezvous cost)", ratio, "x",
                note=f"+{median(two) - median(one):.2f} s"),
            Row("multi-node preflight alone (probes cached)", median(checks), "s",
                note="rdzv-listen on node 0 + rdzv-check from node 1")]
