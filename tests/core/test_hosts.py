"""Host profiles: validation naming the field, the file, "This computer", rename/remove with secrets, ssh config."""
import json
import os
import subprocess

import keyring
import keyring.backends.fail
import pytest
from helpers.secrets_planted import KEYRING_PASSPHRASE, KEYRING_PASSWORD

from ddpgui.core.hosts import (
    LOCAL,
    HostError,
    HostNotFound,
    HostProfile,
    HostStore,
    parse_hop,
    secrets,
)
from ddpgui.core.paths import config_dir
from ddpgui.core.ssh.keys import KeyNeedsPassphrase, WrongPassphrase, key_is_encrypted, load_private_key


@pytest.fixture
def store(tmp_path):
    return HostStore(tmp_path / "hosts.json")


def gpu(name="gpu", **fields):
    return HostProfile(**{"name": name, "hostname": "gpu.example.org", **fields})


@pytest.mark.parametrize("fields, field, words", [
    ({"name": "has space"}, "name", "letters, digits"),
    ({"name": ""}, "name", "letters, digits"),
    ({"hostname": ""}, "hostname", "host name"),
    ({"hostname": "a b"}, "hostname", "has spaces in it"),
    ({"hostname": "-oProxyCommand=x"}, "hostname", "host name"),
    ({"port": 0}, "port", "1-65535"),
    ({"port": "22"}, "port", "1-65535"),
    ({"user": "a b"}, "user", "login name"),
    ({"auth": "kerberos"}, "auth", "one of agent, key, key_passphrase, password"),
    ({"auth": "key"}, "key_file", "needs a key file"),
    ({"proxy_jump": ["not a hop!"]}, "proxy_jump", "neither a profile name nor user@host:port"),
    ({"proxy_jump": ["gpu"]}, "proxy_jump", "its own jump host"),
    ({"python": ""}, "python", "remote Python interpreter"),
    ({"python": "a\nb"}, "python", "one line"),
    ({"run_root": "relative/dir"}, "run_root", "absolute path or start with ~/"),
    ({"price_per_hour": -1}, "price_per_hour", ">= 0"),
    ({"nccl_env": {"1BAD": "x"}}, "nccl_env", "environment variable names"),
    ({"rdzv_address": "user@host:1"}, "rdzv_address", "host or host:port"),
])
def test_validation_names_the_field(fields, field, words):
    with pytest.raises(HostError) as info:
        gpu(**fields)
    assert info.value.field == field and words in str(info.value) and str(info.value).startswith(field + ":")


def test_defaults_and_valid_values():
    p = gpu(auth="key", key_file="~/.ssh/id", proxy_jump=["bastion", "me@10.0.0.1:2222", "[::1]:22"],
            run_root="/scratch/runs", price_per_hour=2.5, nccl_env={"NCCL_IB_DISABLE": "1"}, rdzv_address="10.0.0.2:29500")
    assert (p.port, p.python, p.secret_kind) == (22, "python3", None)
    assert gpu().run_root == "~/.ddpgui" and gpu().auth == "agent"
    assert gpu(auth="password").secret_kind == "password" and gpu(auth="key_passphrase", key_file="k").secret_kind == "passphrase"


def test_local_always_exists_and_cannot_be_removed_or_renamed(store):
    assert store.names() == [LOCAL]
    local = store.get(LOCAL)
    assert local.is_local and local.display_name == "This computer"
    with pytest.raises(HostError, match="cannot be removed"):
        store.remove(LOCAL)
    with pytest.raises(HostError, match="cannot be renamed"):
        store.rename(LOCAL, "mine")
    with pytest.raises(HostError, match="exists already"):
        store.add(HostProfile(name=LOCAL, hostname="x"))
    with pytest.raises(HostError, match="not reached over SSH"):
        store.update(HostProfile(name=LOCAL, hostname="elsewhere", python="", run_root=""))
    store.update(HostProfile(name=LOCAL, hostname="localhost", python="/opt/venv/bin/python", run_root="",
                             notes="my venv"))
    assert HostStore(store.path).get(LOCAL).python == "/opt/venv/bin/python"


def test_file_is_readable_json_with_a_schema_written_atomically(store):
    store.add(gpu(notes="A100 × 8, ünïcode"))
    data = json.loads(store.path.read_text(encoding="utf-8"))
    assert data["schema"] == 1 and [h["name"] for h in data["hosts"]] == [LOCAL, "gpu"]
    assert "ünïcode" in store.path.read_text(encoding="utf-8") and "\n  " in store.path.read_text()
    assert oct(store.path.stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in store.path.parent.iterdir()) == ["hosts.json", "hosts.json.lock"]  # no temp file
    assert HostStore(store.path).get("gpu") == store.get("gpu")


def test_unreadable_file_and_other_schema_are_reported(tmp_path):
    path = tmp_path / "hosts.json"
    path.write_text("{not json")
    with pytest.raises(HostError, match="not valid JSON"):
        HostStore(path)
    path.write_text(json.dumps({"schema": 99, "hosts": []}))
    with pytest.raises(HostError, match="schema 99") as info:
        HostStore(path)
    assert info.value.field == "schema"
    path.write_text(json.dumps({"schema": 1, "hosts": [{"name": "a", "hostname": "h", "colour": "red"}]}))
    with pytest.raises(HostError) as info:
        HostStore(path)
    assert info.value.field == "colour"


def test_edit_rename_and_remove(store):
    store.add(gpu())
    with pytest.raises(HostError, match="exists already"):
        store.add(gpu())
    store.update(gpu(port=2222))
    assert store.get("gpu").port == 2222
    store.rename("gpu", "gpu2")
    assert "gpu" not in store and store.get("gpu2").port == 2222
    store.remove("gpu2")
    with pytest.raises(HostNotFound, match="no host profile named 'gpu2'"):
        store.get("gpu2")
    assert HostStore(store.path).names() == [LOCAL]


def test_rename_and_remove_move_and_delete_secrets(store, memory_keyring):
    store.add(gpu(auth="password"))
    secrets.set_secret("gpu", "password", KEYRING_PASSWORD)
    secrets.set_secret("gpu", "passphrase", KEYRING_PASSPHRASE)
    store.rename("gpu", "renamed")
    assert secrets.get_secret("gpu", "password") is None and secrets.get_secret("gpu", "passphrase") is None
    assert secrets.get_secret("renamed", "password") == KEYRING_PASSWORD
    assert secrets.get_secret("renamed", "passphrase") == KEYRING_PASSPHRASE
    store.remove("renamed")
    assert memory_keyring.entries == {}


def test_changing_the_auth_method_drops_the_secret_it_no_longer_needs(store):
    store.add(gpu(auth="password"))
    secrets.set_secret("gpu", "password", KEYRING_PASSWORD)
    store.update(gpu(auth="agent"))
    assert secrets.get_secret("gpu", "password") is None


def test_the_profiles_file_never_holds_a_secret(memory_keyring):
    store = HostStore()  # the app's real file in the session's config dir (checked again in tests/zz_last)
    for name in ("leak-pw", "leak-pp"):
        if name in store:
            store.remove(name)
    store.add(gpu("leak-pw", auth="password", notes="password in the keyring"))
    store.add(gpu("leak-pp", auth="key_passphrase", key_file="~/.ssh/id_locked"))
    secrets.set_secret("leak-pw", "password", KEYRING_PASSWORD)
    secrets.set_secret("leak-pp", "passphrase", KEYRING_PASSPHRASE)
    store.update(gpu("leak-pw", auth="password", notes="edited"))
    store.rename("leak-pp", "leak-pp2")
    text = (config_dir() / "hosts.json").read_bytes()
    assert b"leak-pw" in text and b"leak-pp2" in text
    for secret in (KEYRING_PASSWORD, KEYRING_PASSPHRASE):
        assert secret.encode() not in text
    assert sorted(memory_keyring.entries) == [("ddpgui", "leak-pp2:passphrase"), ("ddpgui", "leak-pw:password")]


def test_route_expands_jump_hosts_recursively_and_detects_loops(store):
    store.add(gpu("bastion", user="ops", auth="key", key_file="~/.ssh/ops"))
    store.add(gpu("inner", hostname="10.0.0.5", proxy_jump=["bastion"]))
    store.add(gpu("deep", hostname="10.0.1.9", user="me", auth="key", key_file="~/.ssh/me",
                  proxy_jump=["inner", "admin@gw.lab:2200"]))
    route = store.route("deep")
    assert [(h.label, h.hostname, h.port, h.user, h.auth) for h in route] == [
        ("bastion", "gpu.example.org", 22, "ops", "key"),
        ("inner", "10.0.0.5", 22, "", "agent"),
        ("admin@gw.lab:2200", "gw.lab", 2200, "admin", "agent"),
        ("deep", "10.0.1.9", 22, "me", "key"),
    ]
    assert route[2].key_file == "~/.ssh/me" and route[2].secrets_profile == "deep"
    with pytest.raises(HostError, match="loop: bastion → inner → bastion") as info:
        store.update(gpu("bastion", proxy_jump=["inner"]))
    assert info.value.field == "proxy_jump"
    assert store.get("bastion").proxy_jump == []  # refused changes are not kept


def test_jump_host_references_follow_a_rename_and_block_a_remove(store):
    store.add(gpu("bastion"))
    store.add(gpu("inner", proxy_jump=["bastion"]))
    with pytest.raises(HostError, match="jump host of inner"):
        store.remove("bastion")
    store.rename("bastion", "gateway")
    assert HostStore(store.path).get("inner").proxy_jump == ["gateway"]


def test_parse_hop():
    assert parse_hop("gw") == ("", "gw", 22)
    assert parse_hop("me@gw.lab:2200") == ("me", "gw.lab", 2200)
    assert parse_hop("[fe80::1]:2222") == ("", "fe80::1", 2222)
    with pytest.raises(HostError, match="not 1-65535"):
        parse_hop("gw:70000")


def _keygen(path, passphrase=""):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(path)], check=True)
    return path


def test_import_ssh_config(store, tmp_path):
    plain = _keygen(tmp_path / "id_plain")
    locked = _keygen(tmp_path / "id_locked", passphrase=KEYRING_PASSPHRASE)
    config = tmp_path / "config"
    config.write_text(f"""
Host bastion
    HostName bastion.example.org
    User ops
    IdentityFile {plain}

Host gpu-a gpu-b
    HostName %h.cluster.lab
    Port 2222
    ProxyJump bastion,me@gw.lab:2200
    IdentityFile {locked}

Host *.internal
    User nobody

Host legacy
    ProxyCommand nc %h %p

Host !never

Host has_bad$name
    HostName x

Host existing
    HostName other

Host *
    ServerAliveInterval 30
""")
    store.add(gpu("existing"))
    report = store.import_ssh_config(config)
    assert report.added == ["bastion", "gpu-a", "gpu-b"]
    skipped = dict(report.skipped)
    assert skipped["*"].startswith("Host * is the default block") and skipped["*.internal"].startswith("a wildcard")
    assert skipped["!never"].startswith("a negated pattern")
    assert "ProxyCommand" in skipped["legacy"] and "exists already" in skipped["existing"]
    assert skipped["has_bad$name"].startswith("name:")
    bastion, gpu_a = store.get("bastion"), store.get("gpu-a")
    assert (bastion.hostname, bastion.user, bastion.port, bastion.auth, bastion.key_file) == (
        "bastion.example.org", "ops", 22, "key", str(plain))
    assert (gpu_a.hostname, gpu_a.port, gpu_a.auth, gpu_a.proxy_jump) == (
        "gpu-a.cluster.lab", 2222, "key_passphrase", ["bastion", "me@gw.lab:2200"])
    assert [h.label for h in store.route("gpu-b")] == ["bastion", "me@gw.lab:2200", "gpu-b"]
    assert "gpu-a" in HostStore(store.path)


def test_private_key_loading_says_what_is_wrong(tmp_path):
    plain = _keygen(tmp_path / "plain")
    locked = _keygen(tmp_path / "locked", passphrase=KEYRING_PASSPHRASE)
    assert load_private_key(str(plain)).get_name() == "ssh-ed25519"
    assert load_private_key(str(locked), KEYRING_PASSPHRASE).get_name() == "ssh-ed25519"
    with pytest.raises(KeyNeedsPassphrase):
        load_private_key(str(locked))
    with pytest.raises(WrongPassphrase):
        load_private_key(str(locked), "wrong")
    assert key_is_encrypted(str(locked)) and not key_is_encrypted(str(plain))
    assert not key_is_encrypted(os.path.join(tmp_path, "missing"))


def test_without_any_keyring_profiles_can_still_be_renamed_and_removed(store):
    store.add(gpu(auth="password"))
    keyring.set_keyring(keyring.backends.fail.Keyring())
    store.rename("gpu", "gpu2")
    store.update(gpu("gpu2", auth="agent"))
    store.remove("gpu2")
    assert HostStore(store.path).names() == [LOCAL]


def test_a_locked_keyring_stops_a_rename_before_anything_changes(store, monkeypatch):
    store.add(gpu(auth="password"))

    def locked(*args):
        raise secrets.SecretsUnavailable("the keyring is locked", "unlock your keyring and try again")

    monkeypatch.setattr(secrets, "move_secrets", locked)
    with pytest.raises(secrets.SecretsUnavailable, match="locked"):
        store.rename("gpu", "gpu2")
    assert store.names() == [LOCAL, "gpu"] and HostStore(store.path).names() == [LOCAL, "gpu"]
