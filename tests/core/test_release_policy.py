"""A host profile's release action (ddpgui/core/hosts/release.py): kept in hosts.json and read back, refused in
words where it cannot be (This computer, a Slurm cluster, a bad field), the providers' presets with a SkyPilot
cluster's name, and the host's release status said in words for each phase."""
import json
import time

import pytest

from ddpgui.core.hosts import LOCAL, HostError, HostProfile, HostStore, SlurmOptions
from ddpgui.core.hosts.release import (
    PRESETS,
    ReleasePolicy,
    countdown_text,
    preset_policy,
    status_text,
)


def test_a_release_action_is_kept_in_hosts_json_and_read_back(tmp_path):
    store = HostStore(tmp_path / "hosts.json")
    policy = ReleasePolicy("sudo shutdown -h now", after_min=20)
    store.add(HostProfile(name="gpu", hostname="10.0.0.5", release=policy))
    store.add(HostProfile(name="plain", hostname="10.0.0.6"))
    raw = json.loads((tmp_path / "hosts.json").read_text())
    by_name = {h["name"]: h for h in raw["hosts"]}
    assert by_name["gpu"]["release"] == {"command": "sudo shutdown -h now", "on": "host", "kind": "stop",
                                         "after_min": 20, "destroy_uncollected_after_h": None}
    assert "release" not in by_name["plain"]  # a file without one stays as older versions wrote it
    again = HostStore(tmp_path / "hosts.json")
    assert again.get("gpu").release == policy and again.get("plain").release is None


@pytest.mark.parametrize("fields, field, words", [
    (dict(name=LOCAL, hostname="localhost", python="", run_root=""), "release", "never released"),
    (dict(name="c", hostname="login", kind="slurm", slurm=SlurmOptions(partition="gpu")), "release",
     "Slurm frees their nodes"),
])
def test_no_release_where_there_is_nothing_to_release(fields, field, words):
    with pytest.raises(HostError) as caught:
        HostProfile(release=ReleasePolicy("sudo shutdown -h now"), **fields)
    assert caught.value.field == field and words in str(caught.value)


@pytest.mark.parametrize("fields, field, words", [
    (dict(command=""), "release.command", "one line"),
    (dict(command="a\nb"), "release.command", "one line"),
    (dict(command="x", on="moon"), "release.on", "host or local"),
    (dict(command="x", kind="explode"), "release.kind", "stop or terminate"),
    (dict(command="x", after_min=-1), "release.after_min", "minutes from 0"),
    (dict(command="x", after_min=True), "release.after_min", "minutes from 0"),
    (dict(command="x", destroy_uncollected_after_h=2), "release.destroy_uncollected_after_h",
     "only an action that destroys the disk"),
])
def test_a_bad_release_action_names_its_field(fields, field, words):
    with pytest.raises(HostError) as caught:
        ReleasePolicy(**fields)
    assert caught.value.field == field and words in str(caught.value)


def test_an_unknown_field_in_the_file_is_named(tmp_path):
    with pytest.raises(HostError) as caught:
        ReleasePolicy.from_json({"command": "x", "when": "later"})
    assert caught.value.field == "release.when"


def test_presets_in_the_providers_words():
    assert preset_policy("runpod-stop").command == "runpodctl stop pod $RUNPOD_POD_ID"
    assert preset_policy("vast-destroy").kind == "terminate"
    sky = preset_policy("sky-down", cluster="sky-3f2a", after_min=10)
    assert (sky.command, sky.on, sky.kind, sky.after_min) == ("sky down -y sky-3f2a", "local", "terminate", 10)
    with pytest.raises(HostError, match="SkyPilot cluster's name"):
        preset_policy("sky-stop")
    assert all(p.on in ("host", "local") and p.kind in ("stop", "terminate") for p in PRESETS.values())


def status(phase: str, **fields) -> dict:
    now = time.time()
    base = {"policy": {"command": "sudo shutdown -h now", "on": "host", "kind": "stop", "after_s": 1800},
            "phase": phase, "reasons": [], "idle_since": now - 600, "release_at": now + 1200, "watcher": 42,
            "last": None, "cancelled_at": None, "released_at": None}
    return dict(base, **fields)


def test_the_host_status_in_words_for_each_phase():
    now = time.time()
    assert countdown_text(status("idle"), now) == "releases in 20 min"
    assert countdown_text(status("idle", release_at=now + 42), now) == "releases in 42 s"
    busy = status_text(status("busy", reasons=["1 run not ended (r1)"]))
    assert busy[1] == "in use, no release: 1 run not ended (r1)"
    assert "keeps the disk" in busy[0] and "after 30 min idle" in busy[0]
    collecting = " ".join(status_text(status("collecting", reasons=["no client has collected every record of r1"])))
    assert "the release waits" in collecting and "ddpgui adopt" in collecting
    released = status_text(status("released", released_at=now - 7200,
                                  last={"at": now - 7200, "command": "sudo shutdown -h now", "ok": True,
                                        "exit_code": 0}), price_per_hour=2.0, now=now)
    assert "2 h of idle time saved since, 4.00 at 2/h" in released[-1]
    failed = " ".join(status_text(status("failed", attempts=1, last={
        "at": now - 60, "command": "sudo shutdown -h now", "ok": False, "exit_code": 1,
        "output": ["sudo: a password is required"]})))
    assert "FAILED" in failed and "exited with 1: sudo: a password is required" in failed
    assert "sudo needs a rule without a password" in failed
    assert "not running" in " ".join(status_text(status("idle", watcher=None)))
    assert status_text({"policy": None, "phase": "off"}) == ["no release action is set on the host"]
