"""A real Slurm cluster on this machine for the tests: munge, one ``slurmctld`` and two ``slurmd`` (n1, n2).

Debian's ``slurm-wlm`` runs several ``slurmd`` on one host (``slurmd -N n1``); every node is this machine at
127.0.0.1 on its own port.  The daemons run as root (``SlurmUser=root``) in the foreground (``-D``) as children
of the test process, from a private ``slurm.conf`` in a temp dir on free ports, so a developer's own cluster is
never touched.  Client commands reach it through ``SLURM_CONF`` (:attr:`SlurmCluster.env`).

Every ``slurmd`` runs with ``DDPGUI_SLURM_CLUSTER=<root>`` and ``DDPGUI_SLURM_NODE=<node>`` in its
environment; the ``slurmstepd`` it starts for a job inherits them, which is how :meth:`SlurmCluster.kill_node`
and the teardown find the processes of one node of this cluster (all nodes are this same machine).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from helpers.system_lock import system_lock

BINARIES = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "sinfo", "scontrol", "scancel", "srun")
PACKAGES = "slurm-wlm munge"
TAG = "DDPGUI_SLURM_CLUSTER"
NODE_TAG = "DDPGUI_SLURM_NODE"
MUNGE_KEY = Path("/etc/munge/munge.key")


class SlurmError(RuntimeError):
    """The test cluster did not do what it was asked; the message carries the daemons' log tails."""


def _missing() -> list[str]:
    sbin = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [b for b in BINARIES if not shutil.which(b, path=sbin)]


def ensure_slurm() -> None:
    """Slurm and munge installed (apt-get when we are root and they are not), else the test is skipped loudly."""
    how = f"run `apt-get install -y {PACKAGES}` (as root) and run the tests again"
    if _missing() and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES.split()]
        with system_lock():  # dpkg's lock: one test process installs, the other finds it installed
            if _missing() and subprocess.run(install, env=env, capture_output=True, timeout=600).returncode != 0:
                subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
                subprocess.run(install, env=env, capture_output=True, timeout=600)
    if _missing():
        pytest.skip(f"SKIPPED LOUDLY: the Slurm tests need a real Slurm and munge and {', '.join(_missing())} "
                    f"could not be found: {how}")
    if os.geteuid() != 0:
        pytest.skip("SKIPPED LOUDLY: the local Slurm cluster runs its daemons as root (SlurmUser=root, one "
                    "slurmd per node on this machine); run the Slurm tests as root (CI does)")


def _munge_works() -> bool:
    try:
        cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
        if cred.returncode != 0:
            return False
        return subprocess.run(["unmunge"], input=cred.stdout, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def ensure_munge() -> None:
    """A running ``munged`` (started as user munge when none answers).

    A ``munged`` started here is left running at the end: it is a system service that holds no test state,
    and another cluster of the same session (or the developer's own Slurm) may be using it.
    """
    if _munge_works():
        return
    with system_lock():  # one munged, one key, whichever test process gets here first
        _start_munge()


def _start_munge() -> None:
    if _munge_works():
        return
    if not MUNGE_KEY.exists():
        MUNGE_KEY.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        MUNGE_KEY.write_bytes(os.urandom(1024))
        shutil.chown(MUNGE_KEY.parent, "munge", "munge")
    shutil.chown(MUNGE_KEY, "munge", "munge")
    MUNGE_KEY.chmod(0o400)
    for directory in ("/run/munge", "/var/lib/munge", "/var/log/munge"):
        os.makedirs(directory, exist_ok=True)
        shutil.chown(directory, "munge", "munge")
    started = subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged"],
                             capture_output=True, text=True, timeout=30)
    deadline = time.monotonic() + 20
    while not _munge_works():
        if time.monotonic() > deadline:
            raise SlurmError(f"munged did not start (rc {started.returncode}): {started.stderr.strip()}; "
                             f"see /var/log/munge/munged.log, and check {MUNGE_KEY} (owner munge, mode 0400)")
        time.sleep(0.2)


def _die_with_parent() -> None:
    """In the daemon's child before exec: SIGTERM it when the test process dies (killed pytest, no teardown)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _free_ports(count: int) -> list[int]:
    sockets, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("0.0.0.0", 0))  # the daemons listen on every address
            sockets.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in sockets:
            s.close()
    return ports


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, comm) for every live process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            table[int(entry.name)] = (int(fields[1]), stat[stat.index("(") + 1:stat.rindex(")")])
    return table


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _descendants(roots: list[int], table: dict[int, tuple[int, str]]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _sigkill(pids: list[int]) -> list[int]:
    killed = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed


def _describe(pids: list[int]) -> str:
    lines = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = "(gone)"
        lines.append(f"{pid} {cmd}")
    return "; ".join(lines)


_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")


def parse_scontrol(line: str) -> dict[str, str]:
    """``Key=Value Key=Value …`` (``scontrol show … -o``) as a dict; a value runs up to the next `` Key=``."""
    marks = list(_KEY.finditer(line.strip()))
    text = line.strip()
    return {m.group(1): text[m.end():(marks[i + 1].start() if i + 1 < len(marks) else len(text))].strip()
            for i, m in enumerate(marks)}


class SlurmCluster:
    """A two-node Slurm cluster (partitions ``debug``: no time limit, default; ``short``: 5 minutes)."""

    def __init__(self, root: Path | None = None, nodes: tuple[str, ...] = ("n1", "n2"), cpus: int = 2,
                 options: dict[str, str] | None = None) -> None:
        """``options``: slurm.conf settings that replace (or add to) the defaults, e.g. ``{"MinJobAge": "2"}``."""
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="ddpgui-slurm-"))
        self.root.chmod(0o755)
        self.conf = self.root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        for name in [n for n in self.env if n.startswith(("SLURM_", "SBATCH_", "SRUN_", "SQUEUE_", "SINFO_"))]:
            if name != "SLURM_CONF":
                del self.env[name]  # a developer's own Slurm settings must not steer the test cluster
        self.nodes = list(nodes)
        self.cpus = cpus
        self.options = dict(options or {})
        self.hostname = socket.gethostname()
        self.ctld: subprocess.Popen | None = None
        self.slurmds: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}

    # -- configuration and daemons -------------------------------------------------------------------------

    def write_conf(self) -> None:
        ctld_port, *node_ports = _free_ports(1 + len(self.nodes))
        self.ports = {"slurmctld": ctld_port, **dict(zip(self.nodes, node_ports))}
        d = self.root
        for sub in ("state", *(f"spool-{n}" for n in self.nodes)):
            (d / sub).mkdir(exist_ok=True)
        names = ",".join(self.nodes)
        settings = [
            "ClusterName=ddpgui-test",
            f"SlurmctldHost={self.hostname}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill", "ReturnToService=2", "MpiDefault=none",
            f"StateSaveLocation={d}/state", f"SlurmdSpoolDir={d}/spool-%n",
            f"SlurmctldPidFile={d}/slurmctld.pid", f"SlurmdPidFile={d}/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/slurmctld.log", f"SlurmdLogFile={d}/slurmd-%n.log",
            "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none", "MailProg=/bin/true",
            "MinJobAge=300",  # ended jobs stay visible to `scontrol show job` for 5 minutes
            "KillWait=5",  # SIGTERM at the time limit (or scancel), SIGKILL 5 s later
            "InactiveLimit=0", "OverTimeLimit=0",
            # a dead slurmd is marked DOWN after 12 s (its ping every 4 s): the tests that kill one wait that long
            "SlurmdTimeout=12", "MessageTimeout=8",
        ]
        lines = [
            *(line for line in settings if line.split("=", 1)[0] not in self.options),
            *(f"{key}={value}" for key, value in self.options.items()),
            *(f"NodeName={n} NodeHostname={self.hostname} NodeAddr=127.0.0.1 Port={self.ports[n]} "
              f"CPUs={self.cpus} RealMemory=4000 State=UNKNOWN" for n in self.nodes),
            f"PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP",
            f"PartitionName=short Nodes={names} MaxTime=00:05:00 MaxNodes={len(self.nodes)} State=UP",
            "",
        ]
        self.conf.write_text("\n".join(lines))
        self.conf.chmod(0o644)

    def _spawn(self, argv: list[str], log: str, extra_env: dict[str, str]) -> subprocess.Popen:
        with open(self.root / log, "ab") as out:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env={**self.env, TAG: str(self.root), **extra_env}, start_new_session=True,
                                    preexec_fn=_die_with_parent)

    def start(self, timeout: float = 60) -> None:
        """munge, slurmctld and every slurmd up; returns once every node is idle."""
        ensure_slurm()
        ensure_munge()
        for attempt in range(3):  # a port picked free can be taken before a daemon binds it
            self.write_conf()
            self.ctld = self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld.out", {})
            self.slurmds = {}
            for node in self.nodes:
                self.start_slurmd(node)
            try:
                self.wait_idle(timeout)
                return
            except SlurmError:
                if attempt == 2 or "Address already in use" not in self.log_tail(200):
                    tail = self.log_tail()
                    self.stop()
                    raise SlurmError(f"the test Slurm cluster in {self.root} did not come up within "
                                     f"{timeout:.0f} s (every node idle).\n{tail}") from None
                self._stop_daemons()

    def start_slurmd(self, node: str) -> None:
        """(Re)start ``node``'s slurmd; with ``ReturnToService=2`` a node marked DOWN comes back when it registers.

        Call it from a thread that outlives the cluster (the main thread): the daemon gets SIGTERM when the
        thread that started it ends (``PR_SET_PDEATHSIG``)."""
        self.slurmds[node] = self._spawn(["slurmd", "-D", "-f", str(self.conf), "-N", node], f"slurmd-{node}.out",
                                         {NODE_TAG: node})

    def _stop_daemons(self) -> None:
        procs = [p for p in (*self.slurmds.values(), self.ctld) if p is not None]
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 20
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self._kill_leftovers()
        self.slurmds, self.ctld = {}, None

    def job_processes(self) -> list[int]:
        """Every live process this cluster runs for jobs: its slurmstepd with their trees, and any process of a
        job (``SLURM_JOB_ID`` and this ``SLURM_CONF`` in its environment) that left its tree.  The daemons
        (and their own children, such as slurmctld's slurmscriptd) are not in it; empty when no job runs."""
        table = _proc_table()
        daemons = set(_descendants([p.pid for p in (*self.slurmds.values(), self.ctld)
                                    if p is not None and p.poll() is None], table))
        daemons.add(os.getpid())
        roots = []
        for pid in table:
            if pid in daemons:
                continue
            env = _environ(pid)
            if env.get(TAG) == str(self.root) or (env.get("SLURM_CONF") == str(self.conf) and "SLURM_JOB_ID" in env):
                roots.append(pid)
        return [p for p in _descendants(roots, table) if p not in daemons]

    def _kill_leftovers(self) -> None:
        deadline = time.monotonic() + 10
        while (pids := self.job_processes()) and time.monotonic() < deadline:
            _sigkill(pids)
            time.sleep(0.1)

    def stop(self) -> None:
        """Cancel every job, stop the daemons (SIGTERM, then SIGKILL), kill what is left, remove the temp dir."""
        if self.ctld is not None and self.ctld.poll() is None:
            try:
                self.cancel_all()
            except (SlurmError, subprocess.TimeoutExpired, OSError):
                pass
        self._stop_daemons()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- client side -------------------------------------------------------------------------------------------

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster (``SLURM_CONF`` set); ``check``: raise on rc != 0."""
        done = subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=timeout,
                              cwd=self.root)
        if check and done.returncode != 0:
            raise SlurmError(f"`{' '.join(argv)}` failed (rc {done.returncode}): {done.stderr.strip()}\n"
                             f"{self.log_tail(20)}")
        return done

    def node_states(self) -> dict[str, str]:
        """node -> sinfo's short state (``idle``, ``alloc``, ``mix``, ``down*``, ``drain``, …)."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N|%t", check=False).stdout
        return dict(line.split("|", 1) for line in out.split() if "|" in line)

    def jobs(self) -> list[dict]:
        """The queue: one dict per job with ``id``, ``state``, ``reason``, ``nodes``, ``user``, ``name``."""
        out = self.run("squeue", "-h", "-o", "%i|%T|%r|%N|%u|%j").stdout
        keys = ("id", "state", "reason", "nodes", "user", "name")
        return [dict(zip(keys, line.split("|", 5))) for line in out.splitlines() if line.strip()]

    def job_state(self, job_id: str) -> dict:
        """``scontrol show job -o ID`` as a dict (``JobState``, ``Reason``, ``ExitCode``, ``NodeList``, …)."""
        return parse_scontrol(self.run("scontrol", "show", "job", "-o", str(job_id)).stdout)

    def wait_job(self, job_id: str, *states: str, timeout: float = 120) -> dict:
        """Until ``scontrol show job`` gives one of ``states`` (e.g. ``"RUNNING"``); returns that job's fields."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job_state(job_id)
            if job.get("JobState") in states:
                return job
            if time.monotonic() > deadline:
                raise SlurmError(f"job {job_id} did not reach {'/'.join(states)} within {timeout:.0f} s: it is "
                                 f"{job.get('JobState')} (Reason={job.get('Reason')})\n{self.log_tail(20)}")
            time.sleep(0.3)

    def sbatch(self, *args: str) -> str:
        """``sbatch --parsable ARGS``; returns the job id."""
        return self.run("sbatch", "--parsable", *args).stdout.strip().split(";")[0]

    def cancel_all(self) -> None:
        """``scancel`` every job of this cluster (any user)."""
        ids = [job["id"] for job in self.jobs()]
        if ids:
            self.run("scancel", *ids, check=False)

    def wait_idle(self, timeout: float = 60) -> None:
        """Until every node is idle and the queue is empty; raises :class:`SlurmError` with the logs' tails."""
        deadline = time.monotonic() + timeout
        seen: object = None
        while time.monotonic() < deadline:
            for proc in (self.ctld, *self.slurmds.values()):
                if proc is not None and proc.poll() is not None:
                    raise SlurmError(f"a Slurm daemon exited (rc {proc.returncode}): {proc.args}\n{self.log_tail()}")
            states = self.node_states()
            queue = self.run("squeue", "-h", "-o", "%i|%T", check=False)
            seen = (states, queue.stdout.strip() or queue.stderr.strip())
            if (queue.returncode == 0 and not queue.stdout.strip() and set(states) == set(self.nodes)
                    and all(s == "idle" for s in states.values())):
                return
            time.sleep(0.3)
        raise SlurmError(f"the test Slurm cluster was not idle within {timeout:.0f} s: nodes and queue {seen}\n"
                         f"{self.log_tail()}")

    def reset(self, timeout: float = 120) -> None:
        """After a test: every job cancelled, a slurmd a test killed restarted, nodes it took down or drained
        resumed, all idle again, and no process of a job left (else :class:`SlurmError` names them)."""
        for node, proc in list(self.slurmds.items()):
            if proc.poll() is not None:  # a test killed it (kill_slurmd)
                self.start_slurmd(node)
        self.cancel_all()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            broken = [n for n, s in self.node_states().items() if s.rstrip("*~#!%$@^-") in ("down", "drain",
                                                                                           "drng", "fail")]
            if broken:
                self.run("scontrol", "update", f"NodeName={','.join(broken)}", "State=RESUME", check=False)
            try:
                self.wait_idle(timeout=5)
                break
            except SlurmError:
                self.cancel_all()
        else:
            self.wait_idle(timeout=1)
        while (left := self.job_processes()) and time.monotonic() < deadline:
            time.sleep(0.3)
        if left:
            raise SlurmError(f"processes of ended jobs are still running: {_describe(left)}\n{self.log_tail(20)}")

    # -- faults ------------------------------------------------------------------------------------------------

    def step_processes(self, node: str) -> list[int]:
        """The slurmstepd processes ``node``'s slurmd started (job steps running there), without their trees."""
        table = _proc_table()
        return [pid for pid, (_, comm) in table.items() if comm.startswith("slurmstepd")
                and _environ(pid).get(TAG) == str(self.root) and _environ(pid).get(NODE_TAG) == node]

    def node_processes(self, node: str) -> list[int]:
        """The job steps on ``node`` with their whole process trees (what a job runs there)."""
        return _descendants(self.step_processes(node), _proc_table())

    def kill_node(self, node: str) -> list[int]:
        """SIGKILL every job step on ``node`` with its whole process tree (a node dying under its jobs).

        The node's slurmd itself lives on.  Returns the pids killed.
        """
        pids = self.node_processes(node)
        for pid in pids:  # stop first: a tree being killed top-down cannot fork new children meanwhile
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        return _sigkill(pids)

    def kill_slurmd(self, node: str) -> int:
        """SIGKILL ``node``'s slurmd (the steps it started live on: add :meth:`kill_node` for a whole node's
        death).  slurmctld marks the node DOWN after ``SlurmdTimeout`` (12 s); a requeueable batch job on it is
        requeued, a ``--no-requeue`` one ends ``NODE_FAIL``.  :meth:`reset` (the ``slurm`` fixture) restarts it.
        Returns its pid."""
        proc = self.slurmds[node]
        proc.kill()
        proc.wait(timeout=30)
        return proc.pid

    def log_tail(self, n: int = 40) -> str:
        """The last ``n`` lines of slurmctld's and every slurmd's log (for assertion messages)."""
        parts = []
        for name in ("slurmctld", *(f"slurmd-{node}" for node in self.nodes)):
            path = self.root / f"{name}.log"
            if not (path.exists() and path.stat().st_size):  # it died before opening its log: its stderr
                path = self.root / f"{name}.out"
            if path.exists() and path.stat().st_size:
                name = path.name
                lines = path.read_text(errors="replace").splitlines()[-n:]
                parts.append(f"--- {name} (last {len(lines)} lines)\n" + "\n".join(lines))
        return "\n".join(parts) or f"(no Slurm logs in {self.root})"
