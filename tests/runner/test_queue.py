"""The host-side queue on this machine (remote_runner/queue.py), its commands run as a client runs them, one
process per command: cells run in order one at a time and the queue process ends; a second queue-add starts no
second queue process; queue-stop cancels the waiting cells and stops the running run; a queue process killed
mid-run is taken over, and its launched run is not started twice."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.host_queue import queue_processes
from helpers.spools import wait_for

REPO = Path(__file__).resolve().parents[2]


def runner(*args: str, stdin: object = None) -> dict:
    proc = subprocess.run([sys.executable, "-m", "remote_runner", *args], cwd=REPO, capture_output=True, text=True,
                          input=None if stdin is None else json.dumps(stdin), timeout=120)
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cells(prefix: str, n: int, steps: int = 2, sweep: str = "s1") -> list[dict]:
    return [{"run_id": f"{prefix}{i}", "index": i, "sweep_id": sweep,
             "config": json.dumps({"workload": "linear", "steps": steps, "run_id": f"{prefix}{i}"})} for i in range(n)]


def status_of(root: Path, run_id: str) -> dict:
    path = root / "runs" / run_id / "status.json"
    return json.loads(path.read_text()) if path.exists() else {}


@pytest.fixture
def root(tmp_path):
    yield tmp_path
    for pid in queue_processes(tmp_path):  # a test that failed midway leaves nothing running
        os.kill(pid, signal.SIGKILL)
    for run in (tmp_path / "runs").glob("*"):
        if status_of(tmp_path, run.name).get("state") not in (None, "finished", "failed", "stopped"):
            runner("stop", str(run))


def test_cells_run_in_order_one_at_a_time_and_the_queue_ends(root):
    reply = runner("queue-add", str(root), "--profile", "box", stdin={"cells": cells("a", 3), "sweep": {"id": "s1"}})
    assert reply["ok"] and reply["started"] and reply["added"] == ["a0", "a1", "a2"]
    again = runner("queue-add", str(root), stdin={"cells": cells("a", 3)})  # a second client, the same cells
    assert again["added"] == [] and not again["started"] and again["queue_pid"] == reply["queue_pid"]
    assert wait_for(lambda: not runner("queue-status", str(root))["running"], timeout=240)
    state = runner("queue-status", str(root), "--sweeps")
    assert [(c["run_id"], c["state"]) for c in state["cells"]] == [("a0", "launched"), ("a1", "launched"),
                                                                  ("a2", "launched")]
    assert state["sweeps"] == {"s1": {"id": "s1"}} and state["pid"] is None
    runs = [status_of(root, f"a{i}") for i in range(3)]
    assert [r["state"] for r in runs] == ["finished"] * 3 and all(r["profile"] == "box" for r in runs)
    for before, after in zip(runs, runs[1:]):
        assert after["started_at"] >= before["ended_at"]  # one at a time, in the order given


def test_a_second_queue_add_while_it_runs_starts_no_second_queue(root):
    first = runner("queue-add", str(root), stdin={"cells": cells("b", 1, steps=100000)})
    assert wait_for(lambda: status_of(root, "b0").get("state") == "running")
    second = runner("queue-add", str(root), stdin={"cells": cells("c", 2, sweep="s2")})
    assert second["added"] == ["c0", "c1"] and not second["started"] and second["queue_pid"] == first["queue_pid"]
    assert queue_processes(root) == [first["queue_pid"]]
    stopped = runner("queue-stop", str(root), "--sweep", "s2")  # only the second sweep's waiting cells
    assert stopped["cancelled"] == ["c0", "c1"] and stopped["stopped"] == []
    assert status_of(root, "b0")["state"] == "running"
    stopped = runner("queue-stop", str(root))
    assert stopped["cancelled"] == [] and stopped["stopped"] == [{"run_id": "b0", "state": "stopped", "ok": True}]
    assert wait_for(lambda: not queue_processes(root), timeout=30)
    state = runner("queue-status", str(root))
    assert [(c["run_id"], c["state"]) for c in state["cells"]] == [("b0", "launched"), ("c0", "cancelled"),
                                                                  ("c1", "cancelled")]
    assert not (root / "runs" / "c0").exists() and not state["running"]


def test_a_killed_queue_process_is_taken_over_and_launches_nothing_twice(root):
    first = runner("queue-add", str(root), stdin={"cells": cells("d", 2, steps=100000)})
    assert wait_for(lambda: status_of(root, "d0").get("state") == "running")
    os.kill(first["queue_pid"], signal.SIGKILL)
    assert wait_for(lambda: not queue_processes(root), timeout=10)
    assert runner("queue-status", str(root))["running"] is False  # its lock went with it
    taken = runner("queue-add", str(root), stdin={"cells": cells("d", 2, steps=100000)})
    assert taken["started"] and taken["added"] == [] and queue_processes(root) == [taken["queue_pid"]]
    runner("stop", str(root / "runs" / "d0"))  # the run the dead queue launched: the new one waits for it
    assert wait_for(lambda: status_of(root, "d1").get("state") == "running")
    assert sorted(os.listdir(root / "runs")) == ["d0", "d1"]
    assert status_of(root, "d0")["state"] == "stopped"
    runner("queue-stop", str(root))
    assert wait_for(lambda: not queue_processes(root), timeout=30)


def test_bad_cells_are_refused_and_nothing_is_queued(root):
    bad = cells("e", 2)
    bad[1]["config"] = json.dumps({"workload": "linear", "steps": "many", "run_id": "e1"})
    reply = runner("queue-add", str(root), stdin={"cells": bad})
    assert not reply["ok"] and "cell 1 (e1)" in reply["error"] and "steps" in reply["error"]
    bad[1]["config"] = json.dumps({"workload": "linear", "run_id": "other"})
    assert "is not the cell's" in runner("queue-add", str(root), stdin={"cells": bad})["error"]
    assert runner("queue-status", str(root))["cells"] == []
