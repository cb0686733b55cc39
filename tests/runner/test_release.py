"""Release when idle on this machine (remote_runner/release.py), its commands run as a client runs them: the
action fires once the host has been idle for the chosen time, never while a run is active, a queued cell waits
or (for an action that destroys the disk) a record is uncollected, unless the user chose to destroy after H
hours; a failed action is reported in words and tried again later; a cancel holds it until the host is used
again; clearing the policy ends the watcher.  Runs here are run directories with a status.json as the
supervisor writes it (a live pid for a running one): what the watcher reads."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.host_queue import release_watchers
from helpers.spools import wait_for

from ddpgui.core.hosts.release import ReleasePolicy, countdown_text, status_text

REPO = Path(__file__).resolve().parents[2]
POLL = "0.1"


def runner(*args: str, stdin: object = None) -> dict:
    proc = subprocess.run([sys.executable, "-m", "remote_runner", *args], cwd=REPO, capture_output=True, text=True,
                          input=None if stdin is None else json.dumps(stdin), timeout=60)
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def root(tmp_path):
    yield tmp_path / "root"
    for pid in release_watchers(tmp_path / "root"):
        os.kill(pid, signal.SIGKILL)


def policy(marker: Path, after_s: float = 1.0, **fields) -> dict:
    return dict({"command": f"echo releasing; date +%s.%N > '{marker}.new'; mv '{marker}.new' '{marker}'",
                 "on": "host", "kind": "stop",
                 "after_s": after_s}, **fields)


def set_policy(root: Path, body: dict | None) -> dict:
    return runner("release-set", str(root), "--poll", POLL, stdin={"policy": body})


def make_run(root: Path, run_id: str, state: str, pid: int | None = None, **fields) -> Path:
    run_dir = root / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps({"run_id": run_id, "keep_outputs": fields.pop("keep", False)}))
    status = dict({"schema": 1, "state": state, "pid": pid, "started_at": time.time()}, **fields)
    (run_dir / "status.json").write_text(json.dumps(status))
    return run_dir


def test_the_action_fires_after_the_idle_time_and_once(root):
    marker = root.parent / "released"
    set_at = time.time()
    reply = set_policy(root, policy(marker, after_s=1.5))
    assert reply["phase"] == "idle" and reply["watcher"] and reply["release_at"] >= set_at + 1.5
    assert countdown_text(reply).startswith("releases in ")
    assert wait_for(marker.exists, timeout=20)
    fired = float(marker.read_text())
    assert set_at + 1.5 <= fired <= set_at + 1.5 + 5
    status = wait_for_phase(root, "released")
    assert status["last"]["ok"] and status["last"]["exit_code"] == 0 and status["last"]["output"] == ["releasing"]
    time.sleep(0.5)
    assert float(marker.read_text()) == fired  # released once: nothing ran since, nothing fires again
    assert any("succeeded" in line for line in status_text(status, price_per_hour=2.5))


def wait_for_phase(root: Path, phase: str, timeout: float = 20) -> dict:
    seen = {}

    def reached() -> bool:
        seen.update(runner("release-status", str(root)))
        return seen["phase"] == phase

    assert wait_for(reached, timeout=timeout), seen
    return seen


def test_never_while_a_run_is_active_or_a_cell_waits(root, tmp_path):
    marker = tmp_path / "released"
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        make_run(root, "r1", "running", pid=sleeper.pid)
        status = set_policy(root, policy(marker, after_s=0.5))
        assert status["phase"] == "busy" and "1 run not ended (r1)" in status["reasons"][0]
        time.sleep(1.5)
        assert not marker.exists()
        # The run ends; a cell of the host queue waits (its queue process is not needed to hold the host).
        cells = root / "queue" / "cells"
        cells.mkdir(parents=True)
        (cells / "00000001.json").write_text(json.dumps({"seq": 1, "run_id": "r2", "state": "waiting"}))
        make_run(root, "r1", "finished", pid=sleeper.pid, ended_at=time.time())
        assert runner("release-status", str(root))["reasons"] == ["1 queued cell wait"]
        time.sleep(1.5)
        assert not marker.exists()
        (cells / "00000001.json").write_text(json.dumps({"seq": 1, "run_id": "r2", "state": "cancelled"}))
        idle_from = time.time()
        assert wait_for(marker.exists, timeout=20)
        assert float(marker.read_text()) >= idle_from + 0.5 - 0.2
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_destroying_action_waits_for_every_record_and_kept_output(root, tmp_path):
    marker = tmp_path / "released"
    run = make_run(root, "r1", "finished", ended_at=time.time(), keep=True)
    (run / "metrics.jsonl").write_text('{"seq": 1, "t": 1, "step": 1, "loss": 0.5}\n' * 3)
    status = set_policy(root, policy(marker, after_s=0.3, kind="terminate"))
    assert status["phase"] == "collecting"
    assert "no client has collected every record of r1" in status["reasons"][0]
    size = (run / "metrics.jsonl").stat().st_size
    assert runner("collected", str(run), stdin={"offsets": {"metrics.jsonl": size - 1}})["ok"]
    time.sleep(1)
    assert not marker.exists()  # one byte short
    runner("collected", str(run), stdin={"offsets": {"metrics.jsonl": size}})
    status = runner("release-status", str(root))
    assert status["phase"] == "collecting" and "outputs to keep of r1" in status["reasons"][0]
    assert runner("collected", str(run), stdin={"offsets": {"metrics.jsonl": 3}, "outputs": True})["collected"][
        "offsets"] == {"metrics.jsonl": size}  # offsets only grow
    assert wait_for(marker.exists, timeout=20)


def test_destroy_even_if_not_collected_after_the_chosen_time(root, tmp_path):
    marker = tmp_path / "released"
    run = make_run(root, "r1", "failed", ended_at=time.time())
    (run / "stdout.log").write_text("never read\n")
    started = time.time()
    status = set_policy(root, policy(marker, after_s=0.2, kind="terminate", destroy_uncollected_after_s=1.5))
    assert status["phase"] == "collecting" and status["release_at"] >= started + 1.5
    assert wait_for(marker.exists, timeout=20)
    assert float(marker.read_text()) >= started + 1.5


def test_a_stop_does_not_wait_for_collection(root, tmp_path):
    marker = tmp_path / "released"
    run = make_run(root, "r1", "finished", ended_at=time.time())
    (run / "metrics.jsonl").write_text('{"seq": 1}\n')
    set_policy(root, policy(marker, after_s=0.2))  # a stop keeps the disk: the records wait on it
    assert wait_for(marker.exists, timeout=20)


def test_a_failed_release_is_reported_in_words(root, tmp_path):
    status = set_policy(root, {"command": "echo 'sudo: a password is required' >&2; exit 1", "on": "host",
                               "kind": "stop", "after_s": 0.2})
    assert status["phase"] == "idle"
    status = wait_for_phase(root, "failed")
    assert status["attempts"] == 1 and status["last"]["exit_code"] == 1 and not status["last"]["ok"]
    words = " ".join(status_text(status))
    assert "FAILED" in words and "exited with 1" in words and "sudo: a password is required" in words
    assert status["release_at"] >= status["last"]["at"] + 60  # the next try after another idle period


def test_cancel_holds_until_the_host_is_used_again(root, tmp_path):
    marker = tmp_path / "released"
    set_policy(root, policy(marker, after_s=1.0))
    status = runner("release-cancel", str(root))
    assert status["phase"] == "cancelled"
    assert any("no release until the host is used again" in line for line in status_text(status))
    time.sleep(2)
    assert not marker.exists()
    make_run(root, "r9", "finished", ended_at=time.time() + 0.01)  # the host used again: a run ended after it
    assert wait_for(marker.exists, timeout=20)


def test_the_same_policy_again_keeps_its_clock_and_clearing_ends_the_watcher(root, tmp_path):
    marker = tmp_path / "released"
    first = set_policy(root, policy(marker, after_s=600))
    time.sleep(0.3)
    again = set_policy(root, policy(marker, after_s=600))
    assert again["release_at"] == first["release_at"] and again["watcher"] == first["watcher"]
    changed = set_policy(root, policy(marker, after_s=900))
    assert changed["release_at"] > first["release_at"] + 300
    assert set_policy(root, None)["phase"] == "off"
    assert wait_for(lambda: not release_watchers(root), timeout=10)


def test_a_launch_starts_the_watcher_again_after_a_reboot(root, tmp_path):
    """No watcher runs (the machine rebooted); the next queue-add (as any launch) starts it again."""
    set_policy(root, policy(tmp_path / "released", after_s=600))
    for pid in release_watchers(root):
        os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not release_watchers(root), timeout=10)
    assert runner("release-status", str(root))["watcher"] is None
    runner("queue-add", str(root), stdin={"cells": []})
    assert wait_for(lambda: release_watchers(root), timeout=10)


@pytest.mark.parametrize("body, words", [
    ({"command": "", "after_s": 1}, "command must be one line"),
    ({"command": "a\nb", "after_s": 1}, "command must be one line"),
    ({"command": "x", "after_s": -1}, "after_s must be seconds"),
    ({"command": "x", "after_s": 1, "on": "moon"}, "on must be host or local"),
    ({"command": "x", "after_s": 1, "kind": "explode"}, "kind must be stop or terminate"),
])
def test_a_bad_policy_is_refused_with_the_field(root, body, words):
    reply = runner("release-set", str(root), stdin={"policy": body})
    assert not reply["ok"] and words in reply["error"]


def test_the_profile_policy_as_the_host_reads_it():
    policy = ReleasePolicy("sky down -y c1", on="local", kind="terminate", after_min=15, destroy_uncollected_after_h=2)
    assert policy.for_host("gpu") == {"command": "sky down -y c1", "on": "local", "kind": "terminate",
                                      "after_s": 900.0, "destroy_uncollected_after_s": 7200.0, "profile": "gpu"}
    assert "destroys the disk" in policy.describe() and "after 2 h" in policy.describe()
