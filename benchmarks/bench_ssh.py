"""Over a real sshd on loopback: launch overhead, write→commit latency, stream throughput, and upload
rates over SFTP vs the exec-channel fallback of hosts without SFTP."""
from __future__ import annotations

import getpass
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.common import Row, median, percentile

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def _start_sshd(root: Path, name: str = "bench", sftp: bool = True):
    """The test suite's loopback sshd (tests/ssh/conftest.py), logging in as us with a key."""
    from ssh.conftest import SSHServer, _free_port, _keygen, _sshd_config

    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    key = root / "id_bench"
    if not key.exists():
        _keygen(key)
        (root / "authorized_keys").write_text(key.with_suffix(".pub").read_text())
    host_key = _keygen(root / f"host_{name}_ed25519")
    port = _free_port()
    server = SSHServer(name, port, _sshd_config(root, name, port, [host_key], sftp=sftp), root / f"sshd_{name}.log",
                       [host_key])
    server.start()
    return server, key


def _manager(root: Path, server, key):
    from ddpgui.core.hosts import HostProfile, HostStore
    from ddpgui.core.runs.manager import RunManager
    from ddpgui.core.ssh.connection import SSHConnection
    from ddpgui.core.ssh.known_hosts import KnownHosts
    from ddpgui.core.store import RunStore
    from ddpgui.core.targets.ssh import SSHTarget

    (root / "known_hosts").write_text(server.known_hosts_lines())
    known = KnownHosts(shared_files=[root / "known_hosts"], app_file=root / "app_known_hosts")
    hosts = HostStore(root / "hosts.json")
    hosts.add(HostProfile(name="loop", hostname="127.0.0.1", port=server.port, user=getpass.getuser(), auth="key",
                          key_file=str(key), python=sys.executable, run_root=str(root / "remote")))
    store = RunStore(root / "runs.sqlite3")

    def open_target(name):
        return SSHTarget(hosts.get(name), SSHConnection(hosts.route(name), known_hosts=known))

    return RunManager(store, hosts, open_target), store


def _first_metric_by_hand(root: Path, cfg: dict) -> float:
    """Seconds from starting torchrun by hand to the first line of metrics.jsonl."""
    run_dir = Path(tempfile.mkdtemp(dir=root))
    (run_dir / "config.json").write_text(json.dumps(cfg))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                             str(cfg["nproc_per_node"]), "-m", "remote_runner.train", str(run_dir)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = run_dir / "metrics.jsonl"
    while not (metrics.exists() and metrics.stat().st_size):
        time.sleep(0.005)
    elapsed = time.perf_counter() - started
    proc.wait()
    return elapsed


def launch_overhead(root: Path, manager, repeats: int = 3) -> list[Row]:
    cfg = {"workload": "linear", "nproc_per_node": 2, "steps": 20, "log_every": 1}
    t0 = time.perf_counter()
    manager.targets.target("loop")  # connects and uploads the runner (a fresh run root: nothing there yet)
    upload_s = time.perf_counter() - t0
    uploaded = manager.targets.package.size
    manager.targets.environment("loop")
    ours, by_hand = [], []
    for _ in range(repeats):
        got = threading.Event()
        unsubscribe = manager.subscribe(lambda u, got=got: got.set() if u.records.get("metrics.jsonl") else None)
        started = time.perf_counter()
        record = manager.launch("loop", dict(cfg))
        got.wait(120)
        ours.append(time.perf_counter() - started)
        unsubscribe()
        manager.wait(record.id, 120)
        by_hand.append(_first_metric_by_hand(root, dict(cfg, run_id="hand")))
    overhead = median(ours) - median(by_hand)
    return [Row("launch→first metric at client (ssh)", median(ours), "s"),
            Row("torchrun by hand → first metric", median(by_hand), "s"),
            Row("launch overhead over loopback ssh", overhead, "s", "<= 1.5", overhead <= 1.5,
                f"median of {repeats}; runner already on the host"),
            Row("connect + runner upload (first deploy)", upload_s, "s", note=f"{uploaded} bytes")]


def _writer(run_dirs: list[str], rate: float, seconds: float) -> None:
    """Appends records to each run's metrics spool at ``rate`` per second, like rank 0 does."""
    from remote_runner.spools import SpoolWriter

    writers = [SpoolWriter(os.path.join(d, "metrics.jsonl")) for d in run_dirs]
    n = int(rate * seconds)
    start = time.perf_counter()
    for i in range(n):
        for w in writers:
            w.write({"step": i + 1, "loss": 1.0 / (i + 1), "samples_per_s": 1000.0})
        delay = start + (i + 1) / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)


def _fake_run(manager, store, root: Path, run_id: str, pid: int, records_file: bytes = b"") -> str:
    from remote_runner.status import write_status

    run_dir = root / "remote" / "runs" / run_id
    run_dir.mkdir(parents=True)
    if records_file:
        (run_dir / "metrics.jsonl").write_bytes(records_file)
    write_status(str(run_dir), state="running" if pid else "finished", pid=pid or None)
    store.create_run(run_id, hosts=["loop"], run_dirs={0: str(run_dir)}, state="running")
    return str(run_dir)


def latency(root: Path, manager, store, runs: int = 8, rate: float = 100.0, seconds: float = 10.0) -> list[Row]:
    lat: list[float] = []
    lock = threading.Lock()

    def on_update(update):
        now = time.time()
        with lock:
            lat.extend(now - rec["t"] for rec in update.records.get("metrics.jsonl", ()))

    unsubscribe = manager.subscribe(on_update)
    run_dirs = [_fake_run(manager, store, root, f"lat-{i}", os.getpid()) for i in range(runs)]
    for i in range(runs):
        manager.follow(f"lat-{i}")
    time.sleep(1.0)  # the follow streams are open
    writer = multiprocessing.Process(target=_writer, args=(run_dirs, rate, seconds))
    writer.start()
    writer.join()
    time.sleep(1.0)
    from remote_runner.status import write_status

    for d in run_dirs:
        write_status(d, state="finished")
    for i in range(runs):
        manager.wait(f"lat-{i}", 30)
    unsubscribe()
    ms = [x * 1000 for x in lat]
    expected = runs * int(rate * seconds)
    return [Row(f"write→commit latency p50 ({runs} runs x {rate:.0f}/s)", percentile(ms, 50), "ms", "<= 100",
                percentile(ms, 50) <= 100, f"{len(ms)}/{expected} records"),
            Row("write→commit latency p99", percentile(ms, 99), "ms", "<= 250", percentile(ms, 99) <= 250)]


def throughput(root: Path, manager, store, n: int = 300_000) -> list[Row]:
    from remote_runner.spools import SpoolWriter

    tmp = root / "spool.jsonl"
    with SpoolWriter(str(tmp)) as w:
        for i in range(n):
            w.write({"step": i + 1, "loss": 0.5, "samples_per_s": 1000.0, "step_time_ms": 5.0, "lr": 1e-3})
    _fake_run(manager, store, root, "tput", 0, tmp.read_bytes())
    started = time.perf_counter()
    manager.follow("tput")
    manager.wait("tput", 300)
    elapsed = time.perf_counter() - started
    stored = len(store.series("tput", keys=["step"])["step"])
    rate = stored / elapsed
    return [Row("records through one ssh connection", rate, "rec/s", ">= 50000", rate >= 50000,
                f"{stored} records, {tmp.stat().st_size / 1e6:.0f} MB")]


def _spread(values: list[float]) -> str:
    return f"min {min(values):.1f}, max {max(values):.1f}"


def transfer_rates(root: Path, server, key, size: int = 4 * 2**20, repeats: int = 7) -> list[Row]:
    """Upload of one file over SFTP vs over the exec-channel fallback (an sshd without SFTP), interleaved."""
    from ddpgui.core.hosts import HostProfile, HostStore
    from ddpgui.core.ssh.connection import SSHConnection
    from ddpgui.core.ssh.known_hosts import KnownHosts
    from ddpgui.core.targets.ssh import SSHTarget

    plain, _ = _start_sshd(root, "nosftp", sftp=False)
    try:
        (root / "known_hosts_xfer").write_text(server.known_hosts_lines() + plain.known_hosts_lines())
        known = KnownHosts(shared_files=[root / "known_hosts_xfer"], app_file=root / "app_known_hosts_xfer")
        hosts = HostStore(root / "hosts_xfer.json")
        targets = {}
        for name, srv in (("sftp", server), ("exec", plain)):
            hosts.add(HostProfile(name=name, hostname="127.0.0.1", port=srv.port, user=getpass.getuser(),
                                  auth="key", key_file=str(key), python=sys.executable,
                                  run_root=str(root / f"xfer {name}")))
            targets[name] = SSHTarget(hosts.get(name), SSHConnection(hosts.route(name), known_hosts=known))
        data = os.urandom(size)
        rates: dict[str, list[float]] = {"sftp": [], "exec": []}
        command_ms: list[float] = []
        for target in targets.values():  # connect, and find out about SFTP, before timing
            target.makedirs(target.run_root())
            target.write_file(os.path.join(target.run_root(), "warm"), b"x")
        assert targets["exec"].connection.sftp_offered is False and targets["sftp"].connection.sftp_offered
        for i in range(repeats):
            for name in (("sftp", "exec") if i % 2 == 0 else ("exec", "sftp")):
                target = targets[name]
                started = time.perf_counter()
                target.write_file(os.path.join(target.run_root(), "blob"), data, 0o600)
                rates[name].append(size / 1e6 / (time.perf_counter() - started))
            started = time.perf_counter()
            targets["exec"].exec(["true"])
            command_ms.append((time.perf_counter() - started) * 1000)
        tree_s = _tree_uploads(root, targets, repeats=3)
        for target in targets.values():
            target.close()
    finally:
        plain.stop()
    sftp, exec_ = median(rates["sftp"]), median(rates["exec"])
    return [Row(f"upload {size / 2**20:.0f} MiB over SFTP (loopback)", sftp, "MB/s",
                note=f"median of {repeats}; {_spread(rates['sftp'])}"),
            Row(f"upload {size / 2**20:.0f} MiB over exec channel (no SFTP)", exec_, "MB/s",
                note=f"median of {repeats}; {_spread(rates['exec'])}; sha256-checked, renamed"),
            Row("exec-channel / SFTP upload rate", exec_ / sftp, "x", note="interleaved, one run"),
            Row("one exec channel running `true` (fixed cost per transfer)", median(command_ms), "ms",
                note=_spread(command_ms)),
            Row("script dir of 200 small files over SFTP", median(tree_s["sftp"]), "s",
                note=f"median of 3; {_spread(tree_s['sftp'])}"),
            Row("script dir of 200 small files over exec channels", median(tree_s["exec"]), "s",
                note=f"median of 3; {_spread(tree_s['exec'])}; one channel for all files")]


def _tree_uploads(root: Path, targets: dict, repeats: int) -> dict[str, list[float]]:
    """Seconds to upload a fresh copy of a 200-file script directory (2 KiB each, 10 folders), interleaved."""
    from ddpgui.core.targets.uploads import upload_dir

    tree = root / "tree"
    for i in range(200):
        path = tree / f"pkg{i % 10}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(2048))
    seconds: dict[str, list[float]] = {"sftp": [], "exec": []}
    for i in range(repeats):
        for name in (("sftp", "exec") if i % 2 == 0 else ("exec", "sftp")):
            target = targets[name]
            started = time.perf_counter()
            upload_dir(target, tree, os.path.join(target.run_root(), f"tree{i}"))
            seconds[name].append(time.perf_counter() - started)
    return seconds


def run() -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        server, key = _start_sshd(root)
        manager, store = _manager(root, server, key)
        try:
            return (launch_overhead(root, manager) + latency(root, manager, store) + throughput(root, manager, store)
                    + transfer_rates(root, server, key))
        finally:
            manager.close()
            store.close()
            server.stop()
