"""Host keys as OpenSSH checks them: unknown → ask and save, changed → refuse with file and line."""
import subprocess

import paramiko
import pytest

from ddpgui.core.ssh.known_hosts import (
    HostKeyChanged,
    HostKeyRejected,
    HostKeyUnknown,
    KnownHosts,
    fingerprint,
    known_hosts_name,
)


def _ssh_keygen_fingerprint(pub) -> str:
    return subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)], capture_output=True, text=True,
                          check=True).stdout.split()[1]


def _connect(ssh_env, tmp_path, known, confirm=None):
    with ssh_env.target(tmp_path, known_hosts=known, confirm_host_key=confirm) as target:
        return target.exec(["echo", "ok"]).stdout


def test_unknown_key_is_shown_accepted_and_saved(ssh_env, tmp_path):
    known = ssh_env.known_hosts(tmp_path, trust=())
    asked = []

    def confirm(info):
        asked.append(info)
        return True

    assert _connect(ssh_env, tmp_path, known, confirm) == b"ok\n"
    [info] = asked
    assert (info.host, info.port, info.name) == ("127.0.0.1", ssh_env.server.port, f"[127.0.0.1]:{ssh_env.server.port}")
    pub = ssh_env.root / ("host_ed25519.pub" if info.key_type == "ssh-ed25519" else "host_ecdsa.pub")
    assert info.sha256_fingerprint == _ssh_keygen_fingerprint(pub)
    assert known.app_file.read_text() == f"[127.0.0.1]:{ssh_env.server.port} {pub.read_text().split()[0]} " \
                                         f"{pub.read_text().split()[1]}\n"
    assert _connect(ssh_env, tmp_path, known, confirm) == b"ok\n"
    assert len(asked) == 1  # the saved key is known now


def test_declined_or_unconfirmable_key_refuses_to_connect(ssh_env, tmp_path):
    known = ssh_env.known_hosts(tmp_path, trust=())
    with pytest.raises(HostKeyRejected, match="was not accepted"):
        _connect(ssh_env, tmp_path, known, lambda info: False)
    with pytest.raises(HostKeyUnknown, match=r"host key of \[127.0.0.1\]:\d+ \(SHA256:") as info:
        _connect(ssh_env, tmp_path, known, None)
    assert "known_hosts" in info.value.hint
    assert not known.app_file.exists()


def test_changed_key_is_refused_naming_file_and_line(ssh_env, tmp_path):
    shared = tmp_path / "known_hosts"
    impostor = (ssh_env.root / "jump_ed25519.pub").read_text().split()
    shared.write_text(f"# comment\nother.example ssh-ed25519 {impostor[1]}\n"
                      f"[127.0.0.1]:{ssh_env.server.port} ssh-ed25519 {impostor[1]}\n")
    known = KnownHosts(shared_files=[shared], app_file=tmp_path / "app")
    asked = []
    with pytest.raises(HostKeyChanged) as info:
        _connect(ssh_env, tmp_path, known, lambda i: asked.append(i) or True)
    message = str(info.value)
    assert "WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!" in message
    assert f"Offending ED25519 key in {shared}:3" in message
    assert _ssh_keygen_fingerprint(ssh_env.root / "host_ed25519.pub") in message
    assert f"remove line 3 of {shared}" in info.value.hint
    assert asked == [] and not known.app_file.exists()  # no prompt, no override


def test_hashed_openssh_entries_are_matched(ssh_env, tmp_path):
    shared = tmp_path / "known_hosts"
    shared.write_text(ssh_env.server.known_hosts_lines())
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(shared)], check=True, capture_output=True)
    assert shared.read_text().startswith("|1|") and "127.0.0.1" not in shared.read_text()
    known = KnownHosts(shared_files=[shared], app_file=tmp_path / "app")
    assert _connect(ssh_env, tmp_path, known, None) == b"ok\n"
    # the same hashed file with a wrong key on line 1 is a changed key at line 1
    impostor = (ssh_env.root / "jump_ed25519.pub").read_text().split()[1]
    lines = shared.read_text().splitlines()
    ed_line = next(i for i, line in enumerate(lines) if " ssh-ed25519 " in line)
    hashed_name = lines[ed_line].split()[0]
    shared.write_text(f"{hashed_name} ssh-ed25519 {impostor}\n")
    with pytest.raises(HostKeyChanged, match=f"{shared}:1"):
        _connect(ssh_env, tmp_path, known, None)


def test_a_host_known_by_another_key_type_is_not_asked_again(ssh_env, tmp_path):
    shared = tmp_path / "known_hosts"
    ecdsa = (ssh_env.root / "host_ecdsa.pub").read_text().split()
    shared.write_text(f"[127.0.0.1]:{ssh_env.server.port} {ecdsa[0]} {ecdsa[1]}\n")
    known = KnownHosts(shared_files=[shared], app_file=tmp_path / "app")
    assert _connect(ssh_env, tmp_path, known, None) == b"ok\n"  # negotiated the ECDSA key on record


def test_revoked_key_is_refused(ssh_env, tmp_path):
    shared = tmp_path / "known_hosts"
    lines = ssh_env.server.known_hosts_lines().splitlines()
    shared.write_text("".join(f"@revoked {line}\n" for line in lines))
    known = KnownHosts(shared_files=[shared], app_file=tmp_path / "app")
    with pytest.raises(HostKeyChanged, match="revoked"):
        _connect(ssh_env, tmp_path, known, lambda info: True)


def test_jump_host_key_is_checked_too(ssh_env, tmp_path):
    jump = ssh_env.profile("hop", port=ssh_env.jump.port)
    inner = ssh_env.profile("inner", proxy_jump=["hop"])
    known = ssh_env.known_hosts(tmp_path, trust=(ssh_env.server,))  # the jump host is not known
    asked = []
    with pytest.raises(HostKeyRejected, match=r"jump host hop \(hop 1 of 1"):
        ssh_env.target(tmp_path, inner, store=ssh_env.store(tmp_path, jump, inner), known_hosts=known,
                       confirm_host_key=lambda i: asked.append(i) or False).exec(["true"])
    assert [i.port for i in asked] == [ssh_env.jump.port]


# ---- no server needed ------------------------------------------------------------------------

@pytest.fixture
def key(tmp_path):
    path = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return paramiko.Ed25519Key.from_private_key_file(str(path))


def test_known_hosts_names_follow_openssh():
    assert known_hosts_name("Host.Example", 22) == "host.example"
    assert known_hosts_name("10.0.0.1", 2222) == "[10.0.0.1]:2222"


def test_patterns_wildcards_and_negation(tmp_path, key):
    shared = tmp_path / "known_hosts"
    shared.write_text(f"*.lab,!bad.lab,[gpu?.lab]:2222 ssh-ed25519 {key.get_base64()}\n"
                      f"@cert-authority *.lab ssh-ed25519 {key.get_base64()}\n")
    known = KnownHosts(shared_files=[shared], app_file=tmp_path / "app")
    assert [e.line for e in known.lookup("a.lab", 22)] == [1, 2]
    assert [e.line for e in known.lookup("bad.lab", 22)] == [2]
    assert [e.line for e in known.lookup("gpu1.lab", 2222)] == [1]
    assert known.lookup("gpu1.lab", 2223) == []
    known.verify("a.lab", 22, key, None)  # known: no callback needed
    assert known.preferred_algorithms("a.lab", 22) == ["ssh-ed25519"]


def test_fingerprint_matches_ssh_keygen(tmp_path, key):
    (tmp_path / "k.pub").write_text(f"ssh-ed25519 {key.get_base64()}\n")
    assert fingerprint(key) == _ssh_keygen_fingerprint(tmp_path / "k.pub")
