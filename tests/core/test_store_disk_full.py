"""The client's own disk fills up while it follows a run (issue 23, item 5): a real small tmpfs holds the run
store (DDPGUI_DATA_DIR); the run writes on another disk, through the runner's real follow stream.

Following says once why nothing is stored (the store's path and the bytes free), keeps the offsets where they
were, retries, and goes on by itself once there is space again: every record arrives, exactly once.
"""
import json
import logging
import os
import subprocess
import threading

import pytest
from helpers.cli_process import start_cli
from helpers.small_disk import fill, small_tmpfs
from helpers.spools import host_records, wait_for

from ddpgui.core.hosts import HostStore
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import STORE_FILE, RunStore
from ddpgui.core.targets.factory import open_target
from remote_runner.spools import EVENTS, METRICS
from remote_runner.status import write_status

FULL = "the disk of the run store is full"


@pytest.fixture
def data(tmp_path):
    """The data folder on a small disk of its own, and a live process standing for the run's supervisor."""
    with small_tmpfs(tmp_path / "small disk", size="4m") as disk:
        sleeper = subprocess.Popen(["sleep", "600"])
        try:
            yield disk / "data", sleeper
        finally:
            sleeper.kill()
            sleeper.wait()


def _records(first, n):
    # ~300 bytes a record: a chunk of them needs more room in the store's WAL than a full disk leaves
    return [{"seq": i, "t": float(i), "step": i, "loss": 1.0 / (i + 1), "note": "x" * 250} for i in range(first, n)]


def _append(run_dir, records):
    with open(run_dir / METRICS, "ab") as fh:
        fh.write(b"".join(json.dumps(r).encode() + b"\n" for r in records))


def running_run(store, run_dir, supervisor_pid):
    """A run that is running on this computer (its supervisor alive), in the store as launched."""
    run_dir.mkdir(parents=True)
    (run_dir / EVENTS).write_bytes(json.dumps({"seq": 0, "t": 0.0, "event": "started"}).encode() + b"\n")
    _append(run_dir, _records(0, 10))
    write_status(str(run_dir), state="running", pid=supervisor_pid)
    store.create_run("r", hosts=["local"], run_dirs={0: str(run_dir)}, state="running")


def _free(disk):
    for name in ("filler.bin", "filler-tail.bin"):
        (disk / name).unlink()


def _end(run_dir):
    with open(run_dir / EVENTS, "ab") as fh:
        fh.write(json.dumps({"seq": 1, "t": 9.0, "event": "finished"}).encode() + b"\n")
    write_status(str(run_dir), state="finished", exit_code=0, ended_at=9.0)


class _Retries(logging.Handler):
    """Counts the follower's retries on a store that cannot be written."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record):
        if FULL in record.getMessage():
            self.count += 1


def test_following_waits_on_a_full_store_disk_says_so_once_and_goes_on_when_there_is_space(data, tmp_path,
                                                                                          monkeypatch):
    folder, sleeper = data
    folder.mkdir()
    monkeypatch.setenv("DDPGUI_DATA_DIR", str(folder))
    hosts = HostStore(tmp_path / "hosts.json")
    store = RunStore()
    retries = _Retries()
    logging.getLogger("ddpgui.core.runs.follower").addHandler(retries)
    manager = RunManager(store, hosts, lambda name: open_target(name, hosts))
    said = []
    manager.subscribe(lambda update: said.append(update.store) if update.store is not None else None)
    run_dir = tmp_path / "runs" / "r"
    try:
        running_run(store, run_dir, sleeper.pid)
        manager.follow("r")
        assert wait_for(lambda: len(store.records("r")) == 10, timeout=120)
        fill(folder.parent)
        _append(run_dir, _records(10, 3000))
        assert wait_for(lambda: retries.count >= 3, timeout=120)  # it tried again, and again
        assert store.offsets("r")[METRICS] == len(b"".join(json.dumps(r).encode() + b"\n" for r in _records(0, 10)))
        [full] = said  # said once, however often it was tried
        assert full.startswith(f"{FULL} ({folder / STORE_FILE}, ") and " bytes free)" in full
        _free(folder.parent)
        _end(run_dir)
        record = manager.wait("r", timeout=120)
    finally:
        logging.getLogger("ddpgui.core.runs.follower").removeHandler(retries)
        manager.close()
    assert record.state == "finished"
    assert said == [full, ""]  # and once more when it works again
    assert store.records("r") == host_records(run_dir, METRICS)  # every record, exactly once
    assert store.offsets("r")[METRICS] == os.path.getsize(run_dir / METRICS)
    store.close()


def test_ddpgui_follow_says_the_full_disk_in_one_line_and_ends_with_every_record(data, tmp_path):
    folder, sleeper = data
    env = dict(os.environ, DDPGUI_DATA_DIR=str(folder), DDPGUI_CONFIG_DIR=str(tmp_path / "config"))
    run_dir = tmp_path / "runs" / "r"
    folder.mkdir()
    with RunStore(folder / STORE_FILE) as store:
        running_run(store, run_dir, sleeper.pid)
    proc = start_cli(["follow", "r"], env)
    lines, full = [], threading.Event()

    def read_stderr():
        for line in proc.stderr:
            lines.append(line)
            if FULL in line:
                full.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        with RunStore(folder / STORE_FILE) as store:
            assert wait_for(lambda: len(store.records("r")) == 10, timeout=120)
        fill(folder.parent)
        _append(run_dir, _records(10, 3000))
        assert full.wait(timeout=120), "".join(lines)
        _free(folder.parent)
        _end(run_dir)
        out = proc.stdout.read()
        assert proc.wait(timeout=120) == 0, out + "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=30)
    said = [line for line in lines if FULL in line]
    assert len(said) == 1 and said[0].startswith(f"ddpgui: {FULL} ({folder / STORE_FILE}, "), lines
    assert "Traceback" not in "".join(lines), lines
    assert any("the run store works again" in line for line in lines), lines
    with RunStore(folder / STORE_FILE) as store:
        assert store.records("r") == host_records(run_dir, METRICS)
        assert store.get_run("r").state == "finished"
