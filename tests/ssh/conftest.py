"""A real OpenSSH server (and a second one as jump host) on 127.0.0.1 for the SSH tests.

Both sshd run as this user (root on CI) from a private config: temp host keys,
a temp authorized_keys, ``UsePAM no``, ``StrictModes no``.  When the tests run
as root they log in to a throwaway account made with ``useradd`` (home in a
temp dir, password set with ``chpasswd``): password auth is tested for real and
hostile text can only ever hurt that account's temp home.
"""
from __future__ import annotations

import dataclasses
import getpass
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers.secrets_planted import ACCOUNT_PASSWORD, KEY_PASSPHRASE
from helpers.slurm_cluster import SlurmCluster
from helpers.system_lock import system_lock

from ddpgui.core.hosts import HostProfile, HostStore
from ddpgui.core.hosts.slurm_options import SlurmOptions
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.ssh.connection import SSHConnection
from ddpgui.core.ssh.known_hosts import KnownHosts
from ddpgui.core.store import RunStore
from ddpgui.core.targets.slurm import SlurmTarget
from ddpgui.core.targets.ssh import SSHTarget

SSHD = "/usr/sbin/sshd"
IS_ROOT = os.geteuid() == 0


def _ensure_openssh() -> None:
    if os.path.exists(SSHD) and shutil.which("ssh-keygen"):
        return
    if IS_ROOT and shutil.which("apt-get"):
        with system_lock():
            subprocess.run(["apt-get", "install", "-y", "-q", "openssh-server", "openssh-client"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    if not os.path.exists(SSHD):
        pytest.skip("SKIPPED LOUDLY: the SSH tests need a real OpenSSH server and it could not be installed: "
                    "run `apt-get install -y openssh-server openssh-client` (as root) and run the tests again")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path, kind: str = "ed25519", passphrase: str = "") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", passphrase, "-C", path.name, "-f", str(path)], check=True)
    return path


@dataclass
class Account:
    """Who the tests log in as."""

    user: str
    home: Path
    password: str | None  # None: no account with a password could be made
    python: str  # an interpreter this account can run
    sacrificial: bool  # a throwaway account whose home is a temp dir


@dataclass
class SSHServer:
    """One running sshd."""

    name: str
    port: int
    config: Path
    log: Path
    host_keys: list[Path]
    proc: subprocess.Popen | None = None
    host: str = "127.0.0.1"

    def start(self) -> None:
        self.proc = subprocess.Popen([SSHD, "-D", "-f", str(self.config), "-E", str(self.log)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd {self.name} exited: {self.log.read_text(errors='replace')}")
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd {self.name} did not listen on {self.port}: {self.log.read_text(errors='replace')}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.drop_connections()  # none may outlive the listener, frozen ones included
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def connection_processes(self) -> list[int]:
        """The per-connection sshd processes (monitor and its unprivileged child) under the listener."""
        parents: dict[int, list[tuple[int, str]]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            parents.setdefault(ppid, []).append((int(entry.name), comm))
        found, todo = [], [self.proc.pid]
        while todo:
            for pid, comm in parents.get(todo.pop(), []):
                if comm == "sshd":
                    found.append(pid)
                    todo.append(pid)
        return found

    def drop_connections(self) -> int:
        """SIGKILL every per-connection sshd: the clients see their link drop. Returns how many were killed."""
        pids = self.connection_processes()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)

    def freeze_connections(self) -> list[int]:
        """SIGSTOP every per-connection sshd: the link goes silent but stays open, like a dead route."""
        frozen = []
        for pid in self.connection_processes():
            try:
                os.kill(pid, signal.SIGSTOP)
                frozen.append(pid)
            except ProcessLookupError:  # a connection that was closing anyway
                pass
        return frozen

    def known_hosts_lines(self) -> str:
        name = f"[{self.host}]:{self.port}"
        return "".join(f"{name} {(k.with_suffix('.pub')).read_text().split()[0]} "
                       f"{(k.with_suffix('.pub')).read_text().split()[1]}\n" for k in self.host_keys)


@dataclass
class SSHEnv:
    root: Path
    server: SSHServer
    jump: SSHServer
    account: Account
    key_plain: Path
    key_locked: Path  # protected by KEY_PASSPHRASE
    key_stranger: Path  # not in authorized_keys
    extra: dict = field(default_factory=dict)

    def known_hosts(self, directory: Path, *, trust: tuple[SSHServer, ...] | None = None) -> KnownHosts:
        """A KnownHosts whose OpenSSH-side file (in ``directory``) trusts ``trust`` (default: both servers)."""
        shared = directory / "ssh_known_hosts"
        shared.write_text("".join(s.known_hosts_lines() for s in (trust if trust is not None
                                                                   else (self.server, self.jump))))
        return KnownHosts(shared_files=[shared], app_file=directory / "app_known_hosts")

    def run_root(self, label: str) -> str:
        """Under the account's home (``~/``) when it is a throwaway one; else in the temp dir."""
        return f"~/{label}" if self.account.sacrificial else str(self.root / label)

    def profile(self, name: str = "box", **fields) -> HostProfile:
        values = dict(name=name, hostname="127.0.0.1", port=self.server.port, user=self.account.user,
                      auth="key", key_file=str(self.key_plain), python=self.account.python,
                      run_root=self.run_root(f"ddpgui root {name} ✓"))
        values.update(fields)
        return HostProfile(**values)

    def store(self, directory: Path, *profiles: HostProfile) -> HostStore:
        store = HostStore(directory / "hosts.json")
        for profile in profiles:
            (store.update if profile.name in store else store.add)(profile)
        return store

    def target(self, directory: Path, profile: HostProfile | None = None, *, store: HostStore | None = None,
               **kwargs) -> SSHTarget:
        profile = profile or self.profile()
        store = store or self.store(directory, profile)
        if "known_hosts" not in kwargs:
            kwargs["known_hosts"] = self.known_hosts(directory)
        kwargs.setdefault("reconnect_attempts", 3)
        kwargs.setdefault("backoff_s", 0.2)
        return SSHTarget(profile, SSHConnection(store.route(profile.name), **kwargs))


def _sshd_config(root: Path, name: str, port: int, host_keys: list[Path], *, sftp: bool = True,
                 extra_lines: tuple[str, ...] = ()) -> Path:
    """A private sshd config; ``sftp=False`` leaves out the ``Subsystem sftp`` line (rental gateways, dropbear);
    ``extra_lines`` are added as they are (e.g. ``SetEnv …``)."""
    config = root / f"sshd_{name}.conf"
    config.write_text("\n".join([
        f"Port {port}",
        "ListenAddress 127.0.0.1",
        *(f"HostKey {k}" for k in host_keys),
        f"AuthorizedKeysFile {root / 'authorized_keys'}",
        "UsePAM no",
        "StrictModes no",
        "PasswordAuthentication yes",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "AllowTcpForwarding yes",
        "PidFile none",
        "MaxSessions 64",
        "MaxStartups 64",
        "LogLevel VERBOSE",
        *(["Subsystem sftp internal-sftp"] if sftp else []),
        *extra_lines,
        "",
    ]))
    subprocess.run([SSHD, "-t", "-f", str(config)], check=True)
    return config


def _make_account(root: Path, shell: str = "/bin/sh", home_name: str = "home") -> Account:
    """A throwaway account (login shell ``shell``, home ``root/home_name``) with a password when we are root; else
    ourselves, without a password."""
    if IS_ROOT and shutil.which("useradd") and shutil.which("chpasswd"):
        user = "ddpgt" + secrets.token_hex(4)
        home = root / home_name
        with system_lock():  # another test process may be adding or removing its account
            made = subprocess.run(["useradd", "-M", "-d", str(home), "-s", shell, user], capture_output=True)
            if made.returncode == 0:
                subprocess.run(["chpasswd"], input=f"{user}:{ACCOUNT_PASSWORD}".encode(), check=True)
        if made.returncode == 0:
            home.mkdir()
            shutil.chown(home, user, user)
            python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else "python3"
            return Account(user, home, ACCOUNT_PASSWORD, python, sacrificial=True)
    return Account(getpass.getuser(), Path.home(), None, sys.executable, sacrificial=False)


def _remove_account(account: Account) -> None:
    """End what a throwaway account left running and remove it (a warning when userdel refuses)."""
    _kill_processes_of(account.user)
    with system_lock():
        removed = subprocess.run(["userdel", account.user], capture_output=True, text=True)
    if removed.returncode != 0:
        print(f"WARNING: could not remove the test account {account.user}: {removed.stderr}")


def _kill_processes_of(user: str) -> None:
    """SIGKILL, by pid, what the tests left running as the throwaway account (userdel refuses otherwise)."""
    import pwd

    uid = pwd.getpwnam(user).pw_uid
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and entry.stat().st_uid == uid \
                        and (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    pids.append(int(entry.name))
            except OSError:
                continue
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _start_server(root: Path, name: str, keys: list[Path], *, sftp: bool = True,
                  extra_lines: tuple[str, ...] = ()) -> SSHServer:
    """An sshd on a free port (retried: a port picked free can be taken before sshd binds it)."""
    for _ in range(5):
        port = _free_port()
        config = _sshd_config(root, name, port, keys, sftp=sftp, extra_lines=extra_lines)
        server = SSHServer(name, port, config, root / f"sshd_{name}.log", keys)
        try:
            server.start()
            return server
        except RuntimeError:
            server.stop()
    raise RuntimeError(f"sshd {name} could not start: {server.log.read_text(errors='replace')}")


@pytest.fixture(scope="session")
def ssh_env():
    """Two sshd (target and jump host), client keys, and the account to log in to."""
    _ensure_openssh()
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="ddpgui-sshd-"))
    root.chmod(0o755)  # the throwaway account must read authorized_keys and reach its home
    key_plain = _keygen(root / "id_plain")
    key_locked = _keygen(root / "id_locked", passphrase=KEY_PASSPHRASE)
    key_stranger = _keygen(root / "id_stranger")
    (root / "authorized_keys").write_text(
        key_plain.with_suffix(".pub").read_text() + key_locked.with_suffix(".pub").read_text())
    (root / "authorized_keys").chmod(0o644)
    server_keys = [_keygen(root / "host_ed25519"), _keygen(root / "host_ecdsa", "ecdsa")]
    jump_keys = [_keygen(root / "jump_ed25519")]
    servers = [_start_server(root, name, keys) for name, keys in (("target", server_keys), ("jump", jump_keys))]
    account = _make_account(root)
    env = SSHEnv(root, servers[0], servers[1], account, key_plain, key_locked, key_stranger)
    try:
        yield env
    finally:
        for server in servers:
            server.stop()
        if account.sacrificial:
            _remove_account(account)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def no_sftp_env(ssh_env: SSHEnv):
    """The SSH env with its target replaced by an sshd whose config has no ``Subsystem sftp`` line.

    Same account, keys and jump host; ``server`` is the sshd without SFTP (``profile()`` and
    ``target()`` point at it), ``extra["sftp_server"]`` the ordinary one.
    """
    server = _start_server(ssh_env.root, "nosftp", [_keygen(ssh_env.root / "nosftp_ed25519")], sftp=False)
    try:
        yield dataclasses.replace(ssh_env, server=server, extra={"sftp_server": ssh_env.server})
    finally:
        server.stop()


@pytest.fixture(scope="session")
def make_account(ssh_env: SSHEnv):
    """``make_account(shell, home_name)``: one more throwaway account on the session's sshd (its keys log in to it),
    with login shell ``shell`` and home ``ssh_env.root / home_name``; all removed at the end of the session."""
    if not (IS_ROOT and shutil.which("useradd")):
        pytest.skip("SKIPPED LOUDLY: these tests make throwaway users (useradd), which needs root; CI runs as root")
    made: list[Account] = []

    def make(shell: str, home_name: str) -> Account:
        account = _make_account(ssh_env.root, shell, home_name)
        assert account.sacrificial, f"useradd could not make an account with the login shell {shell}"
        made.append(account)
        return account

    try:
        yield make
    finally:
        for account in made:
            _remove_account(account)


@pytest.fixture
def sacrificial(ssh_env: SSHEnv) -> SSHEnv:
    """The SSH env, only where its account is a throwaway one (hostile text must not meet a real home)."""
    if not ssh_env.account.sacrificial:
        pytest.skip("SKIPPED LOUDLY: hostile-text tests run only against a throwaway account, which needs root "
                    "(useradd); CI runs as root")
    return ssh_env


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real two-node Slurm cluster on this machine (tests/helpers/slurm_cluster.py), idle, stopped at the end.

    Tests should take ``slurm`` instead, which puts the cluster back to idle after each test.
    """
    # A requeued job becomes eligible cred_expire + 1 s later (120 s by default): 30 s keeps the requeue test short
    # while leaving a loaded machine time to launch each job step with its credential.
    cluster = SlurmCluster(options={"AuthInfo": "cred_expire=30"})
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster):
    """The session's Slurm cluster, idle with an empty queue; after the test every job is cancelled, nodes the
    test took down or drained are resumed, and the cluster is idle again (no test leaks into the next)."""
    slurm_cluster.reset()
    yield slurm_cluster
    slurm_cluster.reset()


@dataclass
class SlurmLogin:
    """The cluster's login node: an sshd on 127.0.0.1 whose sessions get ``SLURM_CONF`` of the test cluster
    (``SetEnv`` in its config), so Slurm commands over SSH reach it as on a real cluster's login shell.
    It logs in as this user (root on CI: the cluster's jobs run as whoever submits them)."""

    env: SSHEnv
    server: SSHServer
    cluster: SlurmCluster

    def profile_fields(self, tmp_path: Path) -> dict:
        """Connection fields of a HostProfile for this login node (add ``name`` and the Slurm settings)."""
        return dict(hostname=self.server.host, port=self.server.port, user=getpass.getuser(), auth="key",
                    key_file=str(self.env.key_plain), python=sys.executable,
                    run_root=str(tmp_path / "cluster root"))

    def known_hosts(self, directory: Path) -> KnownHosts:
        """A KnownHosts that trusts this login node's sshd."""
        return self.env.known_hosts(directory, trust=(self.server,))

    def ssh(self, command: str, *, timeout: float = 60) -> subprocess.CompletedProcess:
        """``command`` run over OpenSSH on the login node (for checks; the app under test brings its own)."""
        known = self.env.root / "slurm_login_known_hosts"
        known.write_text(self.server.known_hosts_lines())
        return subprocess.run(["ssh", "-p", str(self.server.port), "-i", str(self.env.key_plain),
                               "-o", f"UserKnownHostsFile={known}", "-o", "GlobalKnownHostsFile=/dev/null",
                               "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                               f"{getpass.getuser()}@{self.server.host}", command],
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def slurm_login(ssh_env: SSHEnv, slurm_cluster: SlurmCluster):
    """An sshd as the Slurm cluster's login node (see :class:`SlurmLogin`)."""
    server = _start_server(ssh_env.root, "slurm_login", [_keygen(ssh_env.root / "slurm_login_ed25519")],
                           extra_lines=(f"SetEnv SLURM_CONF={slurm_cluster.conf}",))
    try:
        yield SlurmLogin(ssh_env, server, slurm_cluster)
    finally:
        server.stop()


@pytest.fixture
def cluster(slurm_login, slurm, tmp_path):
    """make(**slurm options) → a RunManager whose host "cluster" is the test cluster's login node
    (tests/ssh/test_slurm_runs.py and test_slurm_faults.py)."""
    made = []

    def make(poll_s: float = 2.0, **options):
        profile = HostProfile(name="cluster", kind="slurm", slurm=SlurmOptions(**{"partition": "debug", **options}),
                              **slurm_login.profile_fields(tmp_path))
        hosts = HostStore(tmp_path / "hosts.json")
        (hosts.update if "cluster" in hosts else hosts.add)(profile)
        known = slurm_login.known_hosts(tmp_path)

        def open_target(name):
            return SlurmTarget(hosts.get(name), SSHConnection(hosts.route(name), known_hosts=known,
                                                              reconnect_attempts=3, backoff_s=0.2))

        store = RunStore(tmp_path / "runs.sqlite3")
        manager = RunManager(store, hosts, open_target)
        manager.slurm.poll_s = manager.slurm.running_poll_s = poll_s  # the suite waits less; the app keeps 10/30 s
        manager.slurm.end_grace_s = 5.0
        made.append((manager, store))
        return manager

    yield make
    for manager, store in made:
        manager.close()
        store.close()


@pytest.fixture
def own_server(ssh_env: SSHEnv):
    """An sshd of this test's own (same account and keys), one a test may kill as a host that goes away does: a
    release action shutting the instance down."""
    name = f"own{secrets.token_hex(3)}"
    server = _start_server(ssh_env.root, name, [_keygen(ssh_env.root / f"{name}_ed25519")])
    try:
        yield server
    finally:
        server.stop()
