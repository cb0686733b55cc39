"""~/.ssh/config import with Include chains, checked host by host against what the real ``ssh -G`` prints for the same
files; SkyPilot's generated entries recognised; the report's words for each file and skipped entry."""
import getpass
import io
import json
import os
import shutil
import subprocess

import pytest
from helpers.ssh_include_home import make_home, write

from ddpgui.cli import main
from ddpgui.core.hosts import HostProfile, HostStore
from ddpgui.core.hosts.ssh_config import profiles_from_ssh_config, read_ssh_config

if shutil.which("ssh") is None:  # the comparison needs the real client; say so loudly rather than pass
    subprocess.run(["apt-get", "install", "-y", "-q", "openssh-client"], check=False, capture_output=True)
SSH = shutil.which("ssh")
pytestmark = pytest.mark.skipif(SSH is None, reason="openssh-client is missing and could not be installed "
                                                    "(apt-get install openssh-client)")


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DDPGUI_CONFIG_DIR", str(tmp_path / "config"))
    return make_home(home)


def _ssh_g(config, host):
    """What the real ssh makes of ``host`` with this config: {option: [values]}."""
    out = subprocess.run([SSH, "-G", "-F", str(config), host], capture_output=True, text=True, check=True,
                         env=dict(os.environ), timeout=30).stdout
    options = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        options.setdefault(key, []).append(value)
    return options


def test_every_host_matches_what_ssh_G_prints(home):
    config = home / ".ssh" / "config"
    loaded = read_ssh_config(config)
    profiles, report = profiles_from_ssh_config(loaded, set())
    assert report.files == ["~/.ssh/config", "~/.sky/generated/ssh/dock", "~/.sky/generated/ssh/mycluster",
                            "~/.ssh/config.d/02-gw", "~/.ssh/config.d/10-lab", "~/.ssh/nested/level2",
                            "~/.ssh/nested/level3", "~/.ssh/work.inc"]  # lexical order inside each glob
    assert sorted(report.added) == ["deep2", "deep3", "gpu1", "gw", "lab1", "lab2", "mycluster",
                                    "mycluster-worker1", "work"]
    for profile in profiles:
        ssh = _ssh_g(config, profile.name)
        assert profile.hostname.lower() == ssh["hostname"][0], profile.name  # ssh lower-cases %h
        assert (profile.user or getpass.getuser()) == ssh["user"][0], profile.name
        assert profile.port == int(ssh["port"][0]), profile.name
        assert profile.proxy_jump == (ssh["proxyjump"][0].split(",") if "proxyjump" in ssh else []), profile.name
        assert profile.key_file == os.path.expanduser(ssh["identityfile"][0]), profile.name
        assert profile.auth == "key"
    by_name = {p.name: p for p in profiles}
    # the Include inside "Host work": its lines apply to work, its own "Host gpu1" never (ssh: hostname gpu1)
    assert (by_name["work"].hostname, by_name["work"].user, by_name["work"].port) == ("work.example", "worker", 1111)
    assert (by_name["gpu1"].hostname, by_name["gpu1"].user) == ("gpu1", "late")
    assert (by_name["deep3"].hostname, by_name["deep3"].proxy_jump) == ("10.0.0.3", ["gw"])  # 3 Includes deep


def test_a_skypilot_cluster_is_recognised_and_keeps_its_key(home):
    store = HostStore()
    report = store.import_ssh_config()
    assert "mycluster" in report.added
    for name in ("mycluster", "mycluster-worker1"):
        profile = HostStore().get(name)  # read back from hosts.json
        assert (profile.provider, profile.cluster) == ("skypilot", "mycluster")
        assert profile.key_file == str(home / ".ssh" / "sky-key") and profile.auth == "key"
        assert profile.notes == "SkyPilot cluster mycluster, imported from ~/.sky/generated/ssh/mycluster"
    assert (HostStore().get("gw").provider, HostStore().get("gw").cluster) == ("", "")
    saved = {h["name"]: h for h in json.loads(HostStore().path.read_text())["hosts"]}
    assert (saved["mycluster"]["provider"], saved["mycluster"]["cluster"]) == ("skypilot", "mycluster")
    assert "provider" not in saved["gw"]  # a plain host is written as before
    skipped = dict(report.skipped)
    assert skipped["dock"].startswith("uses ProxyCommand, which ddpgui does not run; use ProxyJump (SkyPilot cluster "
                                      "dock: ")


def test_old_hosts_files_load_without_the_provider_fields(tmp_path):
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps({"schema": 1, "hosts": [{"name": "old", "hostname": "old.example", "port": 22}]}))
    old = HostStore(path).get("old")
    assert (old.provider, old.cluster) == ("", "")
    with pytest.raises(ValueError, match="cluster"):
        HostProfile(name="x", hostname="x", provider="skypilot")
    with pytest.raises(ValueError, match="provider"):
        HostProfile(name="x", hostname="x", provider="runpod", cluster="c")


def test_the_report_says_why_in_words_that_fit(home):
    _, report = profiles_from_ssh_config(read_ssh_config(home / ".ssh" / "config"), {"gw"})
    skipped = dict(report.skipped)
    assert skipped["*"].startswith("Host * is the default block for every host, not a host itself")
    assert skipped["*.internal"].startswith("a wildcard pattern, not one host")
    assert skipped["!never"].startswith("a negated pattern: it keeps its Host block from applying to never")
    assert skipped["Match user nobody-at-all"].startswith("a Match block (~/.ssh/config line 17)")
    assert skipped["gw"] == "a host profile with this name exists already"
    assert report.notes == [
        "Include ~/.ssh/missing.conf (~/.ssh/config line 5) matches no file; ssh passes over it too",
        "Include nothing-here/* (~/.ssh/config line 5) matches no file; ssh passes over it too"]


def test_a_host_included_under_a_block_that_excludes_it_is_said_so(home):
    config = home / ".ssh" / "only"
    write(config, "Host work\n  Include inner.conf\n")
    write(home / ".ssh" / "inner.conf", "Host inner\n  HostName inner.example\n")
    _, report = profiles_from_ssh_config(read_ssh_config(config), set())
    assert report.added == ["work"]
    assert dict(report.skipped)["inner"] == (
        "its Host line (~/.ssh/inner.conf line 1) is in a file included inside Host work (~/.ssh/only line 1); ssh "
        "uses it only for names that block matches too, so 'ssh inner' does not")
    assert _ssh_g(config, "inner")["hostname"] == ["inner"]  # ssh indeed ignores the block


def test_files_ssh_refuses_are_named_with_what_ssh_says(home):
    ssh_dir = home / ".ssh"
    config = ssh_dir / "bad"
    os.symlink("loop-b", ssh_dir / "loop-a")
    os.symlink("loop-a", ssh_dir / "loop-b")
    write(ssh_dir / "writable", "Host shared\n  HostName shared.example\n", mode=0o666)
    write(ssh_dir / "self", "Include self\n")
    write(config, "Include loop-a\nInclude writable\nInclude self\nHost fine\n  HostName fine.example\n")
    _, report = profiles_from_ssh_config(read_ssh_config(config), set())
    assert report.added == ["shared", "fine"]
    loop, writable, deep = report.notes
    assert loop == "~/.ssh/loop-a could not be read (Too many levels of symbolic links); ssh stops with an error on " \
                   "it too"
    assert writable.startswith("ssh refuses ~/.ssh/writable ('Bad owner or permissions'): ") and "0666" in writable
    assert deep.startswith("Include self (~/.ssh/self line 1) not followed: Includes nest more than 16 deep")
    for name, words in (("loop-a", "Too many levels of symbolic links"), ("writable", "Bad owner or permissions"),
                        ("self", "Too many recursive configuration includes")):
        write(config, f"Include {name}\n")
        ran = subprocess.run([SSH, "-G", "-F", str(config), "fine"], capture_output=True, text=True, timeout=30)
        assert ran.returncode != 0 and words in ran.stderr, (name, ran.stderr)


def test_the_cli_names_the_files_and_the_reasons(home, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["hosts", "import-ssh-config"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["read ~/.ssh/config", "read ~/.sky/generated/ssh/dock", "read ~/.sky/generated/ssh/mycluster"]
    assert "note: Include ~/.ssh/missing.conf (~/.ssh/config line 5) matches no file; ssh passes over it too" in out
    assert "added mycluster (SkyPilot cluster mycluster)" in out and "added gw" in out
    assert any(line.startswith("skipped *: Host * is the default block for every host") for line in out)
    assert main(["hosts", "show", "mycluster"]) == 0
    assert "SkyPilot cluster:  mycluster" in capsys.readouterr().out
