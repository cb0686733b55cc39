"""launch / status / stop / follow end to end: real supervisor, real torchrun with gloo on CPU."""
import dataclasses
import json
import os
import socket
import subprocess
import sys
import venv

import pytest
from helpers.spools import wait_for

from ddpgui.core.runs.config import make_config
from ddpgui.core.runs.protocol import Chunk, End, parse_records
from ddpgui.core.targets.base import TargetError
from ddpgui.core.targets.local import LocalTarget
from ddpgui.core.targets.zipapp import build_runner

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def target(tmp_path):
    t = LocalTarget(run_root=str(tmp_path / "root"))
    t.deploy(build_runner(tmp_path / "pkg"))
    return t


def _follow_all(target, run_dir, offsets=None):
    records = {"metrics.jsonl": [], "telemetry.jsonl": [], "events.jsonl": []}
    logs = b""
    end = None
    for message in target.follow(run_dir, offsets or {}):
        if isinstance(message, Chunk):
            if message.spool in records:
                records[message.spool] += parse_records(message.data)[0]
            else:
                logs += message.data
        elif isinstance(message, End):
            end = message
    return records, logs, end


def _run_processes(run_dir):
    """Processes whose command line names the run directory."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if run_dir.encode() in fh.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found


def _no_process_left(run_dir):
    """The supervisor exits a moment after it wrote the final status: allow it a few seconds."""
    return wait_for(lambda: _run_processes(run_dir) == [], 30)


def test_two_process_run_through_the_zipapp(target):
    cfg = make_config({"workload": "mlp", "nproc_per_node": 2, "steps": 30, "warmup_steps": 5,
                       "telemetry_interval_s": 0.25})
    assert target.deploy(build_runner()) == 0  # deployed by the fixture: nothing to upload again
    result = target.launch(cfg)
    records, logs, end = _follow_all(target, result.run_dir)
    assert end.ended and end.status["state"] == "finished", end.status
    steps = [r["step"] for r in records["metrics.jsonl"]]
    assert steps == list(range(1, 31))
    assert all(r["world_size"] == 2 for r in records["metrics.jsonl"])
    for spool in records.values():
        assert [r["seq"] for r in spool] == list(range(len(spool)))
    events = [r["event"] for r in records["events.jsonl"]]
    assert events[0] == "started" and events[-1] == "finished" and "summary" in events
    cpu = [r for r in records["telemetry.jsonl"] if r["kind"] == "cpu"]
    assert cpu and any(r["rss_gib"] for r in cpu)
    assert oct(os.stat(result.run_dir).st_mode & 0o777) == "0o700"
    assert _no_process_left(result.run_dir), _run_processes(result.run_dir)


def test_stop_leaves_no_process(target):
    cfg = make_config({"workload": "mlp", "nproc_per_node": 2, "minutes": 10.0, "num_workers": 1,
                       "stop_grace_s": 5.0})
    run_dir = target.launch(cfg).run_dir
    assert wait_for(lambda: os.path.exists(os.path.join(run_dir, "metrics.jsonl"))), "no metrics within 2 min"
    assert len(_run_processes(run_dir)) >= 3  # supervisor, torchrun and the ranks (and DataLoader workers)
    status = target.stop(run_dir)
    assert status["state"] == "stopped" and status["remaining_pids"] == []
    assert _no_process_left(run_dir), _run_processes(run_dir)
    records, _, end = _follow_all(target, run_dir)
    assert end.status["state"] == "stopped"
    assert records["events.jsonl"][-1]["event"] == "stopped"


def test_one_rank_failing_ends_the_run_with_its_rank_named(target):
    cfg = make_config({"workload": "linear", "nproc_per_node": 2, "steps": 500,
                       "env": {"DDPGUI_TEST_FAIL_RANK": "1", "DDPGUI_TEST_FAIL_STEP": "5"}})
    run_dir = target.launch(cfg).run_dir
    records, logs, end = _follow_all(target, run_dir)
    status = end.status
    assert status["state"] == "failed"
    assert status["failure"] == "rank_died" and status["failed_rank"] == 1
    assert "injected failure" in status["message"] and status["hint"]
    assert _no_process_left(run_dir), _run_processes(run_dir)


def test_nccl_without_cuda_fails_with_a_hint(target):
    cfg = make_config({"workload": "linear", "nproc_per_node": 1, "steps": 5, "backend": "nccl"})
    run_dir = target.launch(cfg).run_dir
    _, _, end = _follow_all(target, run_dir)
    assert end.status["state"] == "failed" and end.status["failure"] == "nccl_unavailable"
    assert "gloo" in end.status["hint"]


def test_a_busy_default_port_does_not_fail_the_run(target):
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            busy.bind(("0.0.0.0", 29500))
        except OSError:
            pass  # already taken by someone else: just as good for this test
        busy.listen()
        cfg = make_config({"workload": "linear", "nproc_per_node": 2, "steps": 5})
        _, _, end = _follow_all(target, target.launch(cfg).run_dir)
    assert end.status["state"] == "finished" and end.status["rdzv_port"] != 29500


def test_bad_config_is_refused_before_anything_starts(target):
    run_dir = target.run_dir("bad-config")
    target.makedirs(run_dir)
    target.write_file(os.path.join(run_dir, "config.json"), json.dumps({"workload": "mlp", "batch_size": "8"}).encode())
    with pytest.raises(TargetError) as info:
        target._runner_json("launch", run_dir)
    assert info.value.field == "batch_size" and "expected an integer" in str(info.value)
    assert not os.path.exists(os.path.join(run_dir, "status.json"))


def test_launching_twice_is_refused(target):
    cfg = make_config({"workload": "linear", "steps": 3})
    run_dir = target.launch(cfg).run_dir
    written = open(os.path.join(run_dir, "config.json"), "rb").read()
    with pytest.raises(TargetError, match="already exists: another launch chose the same run id") as info:
        target.launch(dataclasses.replace(cfg, steps=5))
    assert "rerun" in info.value.hint
    assert open(os.path.join(run_dir, "config.json"), "rb").read() == written  # not overwritten
    _follow_all(target, run_dir)


def test_wrong_interpreter_says_what_to_do(tmp_path):
    t = LocalTarget(python=str(tmp_path / "no" / "python3"), run_root=str(tmp_path / "root"))
    with pytest.raises(TargetError) as info:
        t.deploy(build_runner(tmp_path / "pkg"))
    assert "was not found" in str(info.value) and "interpreter" in info.value.hint


def test_interpreter_without_torch_is_refused_with_a_hint(tmp_path):
    venv.create(tmp_path / "venv", with_pip=False)
    t = LocalTarget(python=str(tmp_path / "venv" / "bin" / "python"), run_root=str(tmp_path / "root"))
    t.deploy(build_runner(tmp_path / "pkg"))
    with pytest.raises(TargetError) as info:
        t.launch(make_config({"workload": "linear", "steps": 3}))
    assert "PyTorch is not installed" in str(info.value) and "pip install torch" in info.value.hint


def test_status_of_a_run_whose_supervisor_was_killed(target):
    cfg = make_config({"workload": "mlp", "minutes": 10.0})
    result = target.launch(cfg)
    assert wait_for(lambda: os.path.exists(os.path.join(result.run_dir, "metrics.jsonl")))
    os.kill(result.pid, 9)
    assert wait_for(lambda: target.status(result.run_dir)["state"] == "failed", 30)
    assert target.status(result.run_dir)["failure"] == "supervisor_lost"
    target.stop(result.run_dir)  # the orphaned ranks are found through their pid files
    assert _no_process_left(result.run_dir), _run_processes(result.run_dir)


def test_runner_module_cli_prints_probe_json():
    out = subprocess.run([sys.executable, "-m", "remote_runner", "probe"], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    report = json.loads(out.stdout)
    assert out.returncode == 0 and report["schema"] == 1 and report["torch"]["version"]
    assert isinstance(report["problems"], list)
