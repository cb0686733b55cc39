"""Issue 13: what Slurm costs a run, and what following runs costs the cluster's login node.

1. Launch → first metric at the client for a 1-node run (1 process, ``linear``, 20 steps) on the local Slurm
   cluster (tests/helpers/slurm_cluster.py: slurmctld and two slurmd on this machine) through a loopback sshd
   as its login node, vs the same run on that sshd as a plain SSH host: the scheduler's cost.  Pairs in ABBA
   order (drift cancels), after one untimed run on each; the verdict is the median of the per-pair differences.
2. The status-poll load on the login node: Slurm commands per minute (``SlurmTarget.commands``) with the app's
   poll intervals, while 1 and then 4 runs are queued (held), while 2 runs run, and idle.  Each window starts
   half a poll interval after a poll, so a window of whole intervals holds a whole number of polls.

The RunManager keeps the app's defaults (squeue every 10 s while a job is queued or ending, 30 s while all run).
``python -m benchmarks`` runs it with the defaults; alone: ``python -m benchmarks.bench_slurm [--pairs N] [--quick]``
(``--quick``: 2 pairs, 30 s windows).  It needs root (the cluster's daemons) and Slurm + munge (installed by
the test helper when missing).
"""
from __future__ import annotations

import argparse
import getpass
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from benchmarks.common import Row, median, percentile

REPO = Path(__file__).resolve().parents[1]
SSHD = "/usr/sbin/sshd"
RUN = {"workload": "linear", "nproc_per_node": 1, "steps": 20, "log_every": 1}
#: Runs that outlast every window (they are stopped after it).
LONG = {"workload": "linear", "nproc_per_node": 1, "steps": 10_000_000, "log_every": 10}
WAIT_S = 300.0


# ---- the login node: a loopback sshd (as tests/ssh/conftest.py makes it) --------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)
    return path


class LoginNode:
    """An sshd on 127.0.0.1 whose sessions get the cluster's ``SLURM_CONF`` (``SetEnv``), logging us in by key."""

    def __init__(self, root: Path, slurm_conf: Path):
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        self.root, self.port, self.proc = root, 0, None
        self.key = _keygen(root / "id_bench")
        (root / "authorized_keys").write_text(self.key.with_suffix(".pub").read_text())
        self.host_key = _keygen(root / "host_ed25519")
        self.slurm_conf = slurm_conf
        self.log = root / "sshd.log"

    def _config(self, port: int) -> Path:
        config = self.root / "sshd.conf"
        config.write_text("\n".join([
            f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {self.host_key}",
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}", "UsePAM no", "StrictModes no",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password",
            "PidFile none", "MaxSessions 64", "MaxStartups 64", "LogLevel VERBOSE", "Subsystem sftp internal-sftp",
            f"SetEnv SLURM_CONF={self.slurm_conf}", ""]))
        subprocess.run([SSHD, "-t", "-f", str(config)], check=True)
        return config

    def start(self) -> None:
        for _ in range(5):  # a port picked free can be taken before sshd binds it
            port = _free_port()
            self.proc = subprocess.Popen([SSHD, "-D", "-f", str(self._config(port)), "-E", str(self.log)])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    self.port = port
                    return
                except OSError:
                    time.sleep(0.05)
            self.stop()
        raise RuntimeError(f"sshd did not start: {self.log.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def known_hosts_line(self) -> str:
        kind, key = self.host_key.with_suffix(".pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {key}\n"


# ---- the app's parts, counting what they ask of the login node --------------------------------------------------
class Tally:
    """Every Slurm command the cluster's targets ran (time, name), and the SSH channels they opened."""

    def __init__(self):
        self.commands: list[tuple[float, str]] = []
        self.channels: list[float] = []
        self.targets: list = []

    def slurm_commands(self) -> int:
        """The sum of ``SlurmTarget.commands`` over every target opened (a dropped link reopens one)."""
        return sum(t.commands for t in self.targets)


def _manager(root: Path, login: LoginNode, tally: Tally):
    from ddpgui.core.hosts import HostProfile, HostStore
    from ddpgui.core.hosts.slurm_options import SlurmOptions
    from ddpgui.core.runs.manager import RunManager
    from ddpgui.core.ssh.connection import SSHConnection
    from ddpgui.core.ssh.known_hosts import KnownHosts
    from ddpgui.core.store import RunStore
    from ddpgui.core.targets.slurm import SlurmTarget
    from ddpgui.core.targets.ssh import SSHTarget

    class CountedConnection(SSHConnection):
        def _session(self):
            tally.channels.append(time.monotonic())
            return super()._session()

    class CountedSlurmTarget(SlurmTarget):
        def slurm(self, argv, timeout=60.0):
            tally.commands.append((time.monotonic(), argv[0]))
            return super().slurm(argv, timeout)

    (root / "known_hosts").write_text(login.known_hosts_line())
    known = KnownHosts(shared_files=[root / "known_hosts"], app_file=root / "app_known_hosts")
    hosts = HostStore(root / "hosts.json")
    fields = dict(hostname="127.0.0.1", port=login.port, user=getpass.getuser(), auth="key",
                  key_file=str(login.key), python=sys.executable)
    hosts.add(HostProfile(name="cluster", kind="slurm", slurm=SlurmOptions(partition="debug"),
                          run_root=str(root / "cluster root"), **fields))
    hosts.add(HostProfile(name="box", run_root=str(root / "ssh root"), **fields))
    store = RunStore(root / "runs.sqlite3")

    def open_target(name):  # as ddpgui.core.targets.factory.open_target, with the app's connection defaults
        profile = hosts.get(name)
        if not profile.is_slurm:
            return SSHTarget(profile, SSHConnection(hosts.route(name), known_hosts=known))
        target = CountedSlurmTarget(profile, CountedConnection(hosts.route(name), known_hosts=known))
        tally.targets.append(target)
        return target

    return RunManager(store, hosts, open_target), store


class FirstMetrics:
    """When each run's first metric record reached the client (a manager listener)."""

    def __init__(self):
        self.at: dict[str, float] = {}
        self.seen = threading.Condition()

    def __call__(self, update) -> None:
        if update.records.get("metrics.jsonl") and update.run_id not in self.at:
            with self.seen:
                self.at[update.run_id] = time.perf_counter()
                self.seen.notify_all()

    def wait(self, run_id: str, timeout: float) -> float:
        with self.seen:
            if not self.seen.wait_for(lambda: run_id in self.at, timeout):
                raise TimeoutError(f"no metric of run {run_id} reached the client within {timeout:.0f} s")
            return self.at[run_id]


def _wait_for(what: str, check, timeout: float = WAIT_S, every: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


# ---- 1. the scheduler's cost ------------------------------------------------------------------------------------
def _timed_run(manager, firsts: FirstMetrics, host: str) -> tuple[float, float, float]:
    """(launch → first metric, launch() call, launch → run ended) in seconds, for one run on ``host``."""
    started = time.perf_counter()
    record = manager.launch(host, dict(RUN))
    returned = time.perf_counter() - started
    first = firsts.wait(record.id, WAIT_S) - started
    final = manager.wait(record.id, WAIT_S)
    ended = time.perf_counter() - started
    if final.state != "finished":
        raise RuntimeError(f"benchmark run {record.id} on {host} {final.state}: {final.message} {final.hint}")
    return first, returned, ended


def _spread(values: list[float]) -> str:
    return f"min {min(values):.2f}, max {max(values):.2f}"


def scheduler_cost(manager, pairs: int) -> list[Row]:
    firsts = FirstMetrics()
    unsubscribe = manager.subscribe(firsts)
    try:
        for host in ("cluster", "box"):  # connect, deploy the runner, probe, and one run each: all untimed
            manager.targets.probe(host)
            _timed_run(manager, firsts, host)
        got: dict[str, list[tuple[float, float, float]]] = {"cluster": [], "box": []}
        for i in range(pairs):
            for host in (("cluster", "box") if i % 2 == 0 else ("box", "cluster")):  # ABBA
                got[host].append(_timed_run(manager, firsts, host))
                print(f"  pair {i + 1} {host}: first metric {got[host][-1][0]:.2f} s", file=sys.stderr, flush=True)
    finally:
        unsubscribe()
    slurm, ssh = [g[0] for g in got["cluster"]], [g[0] for g in got["box"]]
    diffs = [a - b for a, b in zip(slurm, ssh)]
    cost = median(diffs)
    returned = [g[1] for g in got["cluster"]]
    slurm_end, ssh_end = [g[2] for g in got["cluster"]], [g[2] for g in got["box"]]
    return [
        Row("launch→first metric at client, Slurm 1 node (local cluster)", median(slurm), "s",
            note=f"p90 {percentile(slurm, 90):.2f}; {_spread(slurm)}; {pairs} ABBA pairs; "
                 f"launch() returns after {median(returned):.2f} s (sbatch done)"),
        Row("launch→first metric at client, same login node as SSH host", median(ssh), "s",
            note=f"p90 {percentile(ssh, 90):.2f}; {_spread(ssh)}"),
        Row("scheduler's cost: Slurm − SSH, median of per-pair differences", cost, "s", "<= 5 (idle)", cost <= 5,
            f"pairs {', '.join(f'{d:+.2f}' for d in diffs)}; {_spread(diffs)}"),
        Row("launch→run ended (20 steps), Slurm − SSH, per-pair median",
            median([a - b for a, b in zip(slurm_end, ssh_end)]), "s",
            note=f"Slurm {median(slurm_end):.2f} s, SSH {median(ssh_end):.2f} s"),
    ]


# ---- 2. the status-poll load ------------------------------------------------------------------------------------
def _window(tally: Tally, seconds: float, after_poll_s: float | None) -> tuple[float, Counter, float]:
    """(Slurm commands per minute, by command, SSH channels per minute) over ``seconds``; ``after_poll_s``: start
    that long after the next squeue (None: start now)."""
    if after_poll_s is not None:
        n = len(tally.commands)
        _wait_for("a status poll", lambda: any(c == "squeue" for _, c in tally.commands[n:]), 120, 0.05)
        time.sleep(after_poll_s)
    count, channels, start = tally.slurm_commands(), len(tally.channels), time.monotonic()
    time.sleep(seconds)
    end = time.monotonic()
    names = Counter(c for t, c in tally.commands if start <= t < end)
    minutes = (end - start) / 60
    return (tally.slurm_commands() - count) / minutes, names, (len(tally.channels) - channels) / minutes


def _held(manager, cluster, record) -> None:
    cluster.run("scontrol", "uhold", record.environment["slurm"]["job_id"])
    _wait_for(f"run {record.id} shown held", lambda: (manager.store.get_run(record.id).environment.get("slurm")
                                                      or {}).get("reason") == "JobHeldUser")


def _row(label: str, measured: tuple[float, Counter, float], target: str, limit: float, seconds: float) -> Row:
    rate, names, channels = measured
    by = ", ".join(f"{name} ×{n}" for name, n in sorted(names.items())) or "none"
    return Row(f"Slurm commands/min on the login node, {label}", rate, "/min", target, rate <= limit,
               f"{by} in {seconds:.0f} s; {channels:.1f} SSH channels/min")


def _stop_all(manager, ids: list[str]) -> None:
    for run_id in ids:
        if manager.store.get_run(run_id).active:
            manager.stop(run_id)
    for run_id in ids:
        manager.wait(run_id, WAIT_S)


def poll_load(manager, cluster, tally: Tally, seconds: float) -> list[Row]:
    poll_s, running_poll_s = manager.slurm.poll_s, manager.slurm.running_poll_s
    rows = []
    # (a) queued: a job holding both nodes keeps the runs pending, then each is held by its user.
    blocker = cluster.sbatch("-N2", "--exclusive", "--wrap", "sleep 3600")
    try:
        cluster.wait_job(blocker, "RUNNING")
        queued = [manager.launch("cluster", dict(RUN))]
        _held(manager, cluster, queued[0])
        rows.append(_row("1 run queued (held)", _window(tally, seconds, poll_s / 2), "<= 6", 6, seconds))
        for _ in range(3):
            queued.append(manager.launch("cluster", dict(RUN)))
            _held(manager, cluster, queued[-1])
        rows.append(_row("4 runs queued (held)", _window(tally, seconds, poll_s / 2), "<= 6", 6, seconds))
        _stop_all(manager, [r.id for r in queued])
    finally:
        cluster.run("scancel", blocker, check=False)
    cluster.wait_idle(120)
    # (b) running: two long runs, once the watcher has seen both run (it then polls every running_poll_s).
    running = [manager.launch("cluster", dict(LONG)) for _ in range(2)]

    def both_running() -> bool:
        records = [manager.store.get_run(r.id) for r in running]
        return all(r.state == "running" and r.environment["slurm"].get("state") == "RUNNING" for r in records)

    _wait_for("both long runs running", both_running)
    rows.append(_row("2 runs running", _window(tally, seconds, running_poll_s / 2), "<= 2", 2, seconds))
    ended = [manager.store.get_run(r.id) for r in running if not manager.store.get_run(r.id).active]
    if ended:
        raise RuntimeError(f"a long run ended inside the window ({ended[0].state}: {ended[0].message})")
    _stop_all(manager, [r.id for r in running])
    # (c) idle: once the watcher has let go of every run (no Slurm command for a poll interval and more).
    last = [tally.slurm_commands(), time.monotonic()]

    def quiet() -> bool:
        if tally.slurm_commands() != last[0]:
            last[:] = [tally.slurm_commands(), time.monotonic()]
        return time.monotonic() - last[1] > poll_s + 5

    _wait_for("the watcher idle", quiet, 120, 0.5)
    rows.append(_row("idle (no run)", _window(tally, seconds, None), "0", 0, seconds))
    return rows


# ---- the whole benchmark ----------------------------------------------------------------------------------------
def run(pairs: int = 5, window_s: float = 60.0) -> list[Row]:
    sys.path.insert(0, str(REPO / "tests"))
    import pytest
    from helpers.slurm_cluster import SlurmCluster

    root = Path(tempfile.mkdtemp(prefix="ddpgui-bench-slurm-"))
    root.chmod(0o755)
    cluster = SlurmCluster()
    login = manager = store = None
    try:
        try:
            cluster.start()
        except pytest.skip.Exception as exc:  # no Slurm, or not root: said loudly, as the tests do
            print(f"bench_slurm: {exc}", file=sys.stderr)
            return [Row("Slurm benchmark", float("nan"), "", note=f"not run: {exc}")]
        login = LoginNode(root, cluster.conf)
        login.start()
        tally = Tally()
        manager, store = _manager(root, login, tally)
        return scheduler_cost(manager, pairs) + poll_load(manager, cluster, tally, window_s)
    finally:  # also on Ctrl-C: every run stopped, every job cancelled, the daemons and sshd ended
        _cleanup(manager, store, cluster, login, root)


def _cleanup(manager, store, cluster, login, root: Path) -> None:
    import shutil

    steps = []
    if manager is not None:
        steps.append(lambda: [manager.stop(r.id) for r in manager.store.list_runs() if r.active and r.run_dirs])
        steps.append(manager.close)
    if store is not None:
        steps.append(store.close)
    steps.append(cluster.stop)
    if login is not None:
        steps.append(login.stop)
    for step in steps:
        try:
            step()
        except Exception as exc:  # the rest still runs
            print(f"bench_slurm cleanup: {exc}", file=sys.stderr)
    shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str]) -> int:
    from benchmarks.__main__ import report

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_slurm", description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=None, help="Slurm/SSH launch pairs (default 5)")
    parser.add_argument("--window", type=float, default=None, help="seconds per poll-load window (default 60)")
    parser.add_argument("--quick", action="store_true", help="2 pairs, 30 s windows")
    args = parser.parse_args(argv)
    pairs = args.pairs or (2 if args.quick else 5)
    window = args.window or (30.0 if args.quick else 60.0)
    start = time.perf_counter()
    rows = run(pairs, window)
    print(f"  bench_slurm took {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return report(rows)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
