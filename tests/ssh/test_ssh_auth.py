"""Logging in: key, key with a passphrase (keyring or prompt), ssh-agent, password, jump hosts, and the errors."""
import os
import socket
import subprocess
import threading
import time

import paramiko
import pytest
import secretstorage
from helpers.secret_service import secret_service, secret_service_daemon  # noqa: F401
from helpers.secrets_planted import ACCOUNT_PASSWORD, KEY_PASSPHRASE

from ddpgui.core.hosts import secrets
from ddpgui.core.ssh.auth import AuthenticationFailed
from ddpgui.core.ssh.connection import HostUnreachable, SSHConnection
from ddpgui.core.targets.base import TargetError
from ddpgui.core.targets.ssh import SSHTarget


def _login(ssh_env, tmp_path, profile, **kwargs):
    target = ssh_env.target(tmp_path, profile, **kwargs)
    with target:
        assert target.exec(["id", "-un"]).stdout.decode().strip() == profile.user
        return target.connection.auth_used


def test_key_file(ssh_env, tmp_path):
    used = _login(ssh_env, tmp_path, ssh_env.profile(auth="key", key_file=str(ssh_env.key_plain)))
    assert used == f"key file {ssh_env.key_plain}"


def test_key_passphrase_comes_from_the_real_secret_service(ssh_env, tmp_path, secret_service):  # noqa: F811
    secrets.set_secret("box", secrets.PASSPHRASE, KEY_PASSPHRASE)
    with secretstorage.dbus_init() as bus:  # it really is in the Secret Service
        items = list(secretstorage.search_items(bus, {"service": "ddpgui", "username": "box:passphrase"}))
        assert [i.get_secret().decode() for i in items] == [KEY_PASSPHRASE]
    profile = ssh_env.profile(auth="key_passphrase", key_file=str(ssh_env.key_locked))
    asked = []
    used = _login(ssh_env, tmp_path, profile, ask_secret=asked.append)
    assert used == f"key file {ssh_env.key_locked}" and asked == []


def test_key_passphrase_is_asked_for_when_the_keyring_has_none(ssh_env, tmp_path):
    asked = []

    def ask(request):
        asked.append(request)
        return KEY_PASSPHRASE

    profile = ssh_env.profile(auth="key_passphrase", key_file=str(ssh_env.key_locked))
    assert _login(ssh_env, tmp_path, profile, ask_secret=ask) == f"key file {ssh_env.key_locked}"
    assert [(r.profile, r.kind) for r in asked] == [("box", "passphrase")]
    assert str(ssh_env.key_locked) in asked[0].prompt
    assert secrets.get_secret("box", secrets.PASSPHRASE) is None  # storing it is the caller's choice


def test_wrong_or_missing_passphrase_says_so(ssh_env, tmp_path):
    profile = ssh_env.profile(auth="key_passphrase", key_file=str(ssh_env.key_locked))
    secrets.set_secret("box", secrets.PASSPHRASE, "not the passphrase")
    with pytest.raises(TargetError, match="wrong passphrase for key file") as info:
        _login(ssh_env, tmp_path / "a", profile)
    assert "ddpgui hosts edit box --set-secret" in info.value.hint and info.value.field == "key_file"
    secrets.delete_secret("box", secrets.PASSPHRASE)
    with pytest.raises(TargetError, match="no passphrase for host profile 'box'"):
        _login(ssh_env, tmp_path / "b", profile, ask_secret=lambda request: None)


@pytest.fixture
def agent(tmp_path, monkeypatch):
    """A real ssh-agent on a private socket, as SSH_AUTH_SOCK."""
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not sock.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))

    def add(key):
        subprocess.run(["ssh-add", "-q", str(key)], check=True, env=dict(os.environ, SSH_AUTH_SOCK=str(sock)),
                       stdin=subprocess.DEVNULL, capture_output=True)

    yield add
    proc.terminate()
    proc.wait(timeout=10)


def test_ssh_agent(ssh_env, tmp_path, agent):
    agent(ssh_env.key_stranger)
    agent(ssh_env.key_plain)
    used = _login(ssh_env, tmp_path, ssh_env.profile(auth="agent", key_file=None))
    assert used.startswith("ssh-agent key ssh-ed25519 SHA256:")


def test_ssh_agent_without_a_usable_key_lists_what_was_tried(ssh_env, tmp_path, agent):
    agent(ssh_env.key_stranger)
    with pytest.raises(AuthenticationFailed) as info:
        _login(ssh_env, tmp_path, ssh_env.profile(auth="agent", key_file=None))
    message = str(info.value)
    assert "ssh-agent key ssh-ed25519 SHA256:" in message and "(rejected)" in message
    assert "the server accepts: publickey" in message and "ssh-add" in info.value.hint


def test_ssh_agent_not_running(ssh_env, tmp_path, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    with pytest.raises(AuthenticationFailed, match="SSH_AUTH_SOCK is not set"):
        _login(ssh_env, tmp_path, ssh_env.profile(auth="agent", key_file=None))


def test_unauthorized_key_lists_the_methods_tried(ssh_env, tmp_path):
    profile = ssh_env.profile(auth="key", key_file=str(ssh_env.key_stranger))
    with pytest.raises(AuthenticationFailed) as info:
        _login(ssh_env, tmp_path, profile)
    assert f"tried: key file {ssh_env.key_stranger} (rejected)" in str(info.value)
    assert "authorized_keys" in info.value.hint


class _PasswordServer(paramiko.ServerInterface):
    """paramiko's server: used for password auth only where no throwaway account can be made."""

    def __init__(self, user, password):
        self.user, self.password = user, password
        self.exec_requested = threading.Event()

    def get_allowed_auths(self, username):
        return "password"

    def check_auth_password(self, username, password):
        ok = (username, password) == (self.user, self.password)
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        if command != b"id -un":
            return False
        self.exec_requested.set()
        return True

    def answer(self, channel):
        """What ``id -un`` prints, sent once the exec request has been granted."""
        self.exec_requested.wait(10)
        time.sleep(0.05)  # let the transport send the reply to the request first
        channel.sendall(self.user.encode() + b"\n")
        channel.send_exit_status(0)
        channel.close()


@pytest.fixture
def password_server(ssh_env, tmp_path):
    """(host, port, known_hosts) of a server that takes the account's password."""
    if ssh_env.account.password is not None:
        yield "127.0.0.1", ssh_env.server.port, ssh_env.known_hosts(tmp_path)
        return
    print("NOTE: no throwaway account (not root): password auth is tested against paramiko's server")
    host_key = paramiko.Ed25519Key.from_private_key_file(str(ssh_env.root / "jump_ed25519"))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # the listener was closed: the test is over
                return
            transport = paramiko.Transport(conn)
            transport.add_server_key(host_key)
            server = _PasswordServer(ssh_env.account.user, ACCOUNT_PASSWORD)
            transport.start_server(server=server)
            channel = transport.accept(10)
            if channel is not None:
                server.answer(channel)

    threading.Thread(target=serve, daemon=True).start()
    ssh_env.account.password = ACCOUNT_PASSWORD
    known = tmp_path / "pw_known_hosts"
    known.write_text(f"[127.0.0.1]:{port} ssh-ed25519 {host_key.get_base64()}\n")
    from ddpgui.core.ssh.known_hosts import KnownHosts

    yield "127.0.0.1", port, KnownHosts(shared_files=[known], app_file=tmp_path / "app_known")
    ssh_env.account.password = None
    listener.close()


def test_password_from_the_keyring(ssh_env, tmp_path, password_server):
    host, port, known = password_server
    profile = ssh_env.profile(auth="password", key_file=None, hostname=host, port=port)
    secrets.set_secret("box", secrets.PASSWORD, ACCOUNT_PASSWORD)
    assert _login(ssh_env, tmp_path, profile, known_hosts=known) == "password"


def test_wrong_password_is_rejected_with_a_hint(ssh_env, tmp_path, password_server):
    host, port, known = password_server
    profile = ssh_env.profile(auth="password", key_file=None, hostname=host, port=port)
    secrets.set_secret("box", secrets.PASSWORD, "wrong-password")
    with pytest.raises(AuthenticationFailed, match=r"tried: password \(rejected\)") as info:
        _login(ssh_env, tmp_path, profile, known_hosts=known)
    assert "--set-secret" in info.value.hint


def test_proxy_jump_through_a_profile(ssh_env, tmp_path):
    jump = ssh_env.profile("hop", port=ssh_env.jump.port)
    target = ssh_env.profile("inner", proxy_jump=["hop"])
    store = ssh_env.store(tmp_path, jump, target)
    logins_before = ssh_env.jump.log.read_text().count("Accepted publickey")
    with ssh_env.target(tmp_path, target, store=store) as t:
        assert t.exec(["echo", "through"]).stdout == b"through\n"
        assert t.connection.alive()
    assert ssh_env.jump.log.read_text().count("Accepted publickey") == logins_before + 1


def test_proxy_jump_ad_hoc_hop_string(ssh_env, tmp_path):
    hop = f"{ssh_env.account.user}@127.0.0.1:{ssh_env.jump.port}"
    target = ssh_env.profile("inner", proxy_jump=[hop])
    logins_before = ssh_env.jump.log.read_text().count("Accepted publickey")
    with ssh_env.target(tmp_path, target) as t:
        assert t.exec(["echo", "through"]).stdout == b"through\n"
    assert ssh_env.jump.log.read_text().count("Accepted publickey") == logins_before + 1


def test_failing_jump_host_is_named(ssh_env, tmp_path):
    jump = ssh_env.profile("hop", port=ssh_env.jump.port, key_file=str(ssh_env.key_stranger))
    target = ssh_env.profile("inner", proxy_jump=["hop"])
    with pytest.raises(AuthenticationFailed, match=r"jump host hop \(hop 1 of 1 on the way to inner\) failed") as info:
        ssh_env.target(tmp_path, target, store=ssh_env.store(tmp_path, jump, target)).exec(["true"])
    assert info.value.field == "proxy_jump"


def test_jump_host_that_cannot_reach_the_target(ssh_env, tmp_path):
    closed_port = _closed_port()
    jump = ssh_env.profile("hop", port=ssh_env.jump.port)
    target = ssh_env.profile("inner", port=closed_port, proxy_jump=["hop"])
    with pytest.raises(HostUnreachable, match=f"jump host hop could not reach 127.0.0.1:{closed_port}"):
        ssh_env.target(tmp_path, target, store=ssh_env.store(tmp_path, jump, target)).exec(["true"])


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dns_failure(ssh_env, tmp_path):
    profile = ssh_env.profile(hostname="no-such-host.invalid")
    with pytest.raises(TargetError, match="cannot resolve the host name 'no-such-host.invalid'") as info:
        ssh_env.target(tmp_path, profile).exec(["true"])
    assert info.value.field == "hostname" and "spelling" in info.value.hint
    assert not isinstance(info.value, HostUnreachable)  # not retried: a typo does not heal


def test_connection_refused(ssh_env, tmp_path):
    port = _closed_port()
    with pytest.raises(HostUnreachable, match=f"127.0.0.1:{port} refused the connection") as info:
        ssh_env.target(tmp_path, ssh_env.profile(port=port)).exec(["true"])
    assert info.value.field == "port" and "sshd" in info.value.hint


def test_a_port_that_does_not_speak_ssh_times_out(ssh_env, tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))  # accepts, never says a word
    port = listener.getsockname()[1]
    try:
        with pytest.raises(HostUnreachable, match=f"127.0.0.1:{port} accepted the connection but sent no SSH banner"):
            ssh_env.target(tmp_path, ssh_env.profile(port=port), connect_timeout=1).exec(["true"])
    finally:
        listener.close()


def test_unreadable_key_file(ssh_env, tmp_path):
    profile = ssh_env.profile(key_file=str(tmp_path / "missing_key"))
    with pytest.raises(TargetError, match="missing_key: No such file") as info:
        ssh_env.target(tmp_path, profile).exec(["true"])
    assert info.value.field == "key_file"


def test_connection_is_a_lazy_context_manager(ssh_env, tmp_path):
    store = ssh_env.store(tmp_path, ssh_env.profile())
    connection = SSHConnection(store.route("box"), known_hosts=ssh_env.known_hosts(tmp_path))
    assert not connection.alive()  # nothing opened yet
    with connection:
        assert connection.run(["echo", "hi"]).stdout == b"hi\n"
        assert connection.alive()
    assert not connection.alive()
    with SSHTarget(store.get("box"), connection) as target:  # reopens after close
        assert target.exec(["echo", "again"]).stdout == b"again\n"
    assert not connection.alive()
