"""Launch → follow over SSH end to end, with the real runner and torchrun (gloo, CPU).

These log in as the user running the tests (root on CI), whose Python has torch.
"""
import getpass
import posixpath
import sys
import time
import uuid

import pytest

from ddpgui.core.runs.protocol import Chunk, End, parse_records
from ddpgui.core.targets.base import ConnectionLost
from ddpgui.core.targets.zipapp import build_runner
from remote_runner.config import RunConfig

pytestmark = pytest.mark.slow


@pytest.fixture
def target(ssh_env, tmp_path):
    profile = ssh_env.profile("self", user=getpass.getuser(), python=sys.executable,
                              run_root=str(tmp_path / "run root ✓"))
    with ssh_env.target(tmp_path, profile) as t:
        yield t


def _config(steps: int) -> RunConfig:
    return RunConfig(run_id="r-" + uuid.uuid4().hex[:8], name="ssh e2e; $(touch /tmp/x)", workload="mlp",
                     nproc_per_node=2, device="cpu", backend="gloo", steps=steps, batch_size=8,
                     telemetry_interval_s=0.5)


def _metrics(messages) -> list[dict]:
    data = b"".join(m.data for m in messages if isinstance(m, Chunk) and m.spool == "metrics.jsonl")
    return parse_records(data)[0]


def test_launch_and_follow_over_ssh(target):
    package = build_runner()
    started = time.perf_counter()
    uploaded = target.deploy(package)
    upload_s = time.perf_counter() - started
    launched = time.perf_counter()
    result = target.launch(_config(steps=10))
    first_metric_s = None
    messages = []
    for message in target.follow(result.run_dir):
        messages.append(message)
        if first_metric_s is None and _metrics([message]):
            first_metric_s = time.perf_counter() - launched
    print(f"\nrunner upload {uploaded} B in {upload_s:.2f} s; launch → first metric over SSH {first_metric_s:.2f} s")
    end = messages[-1]
    assert isinstance(end, End) and end.ended and end.status["state"] == "finished"
    steps = [r["step"] for r in _metrics(messages)]
    assert steps and steps == sorted(set(steps))
    assert target.status(result.run_dir)["state"] == "finished"
    assert target.deploy(package) == 0


def test_follow_resumes_after_a_dropped_link_without_losing_a_record(target, ssh_env):
    target.deploy(build_runner())
    result = target.launch(_config(steps=30))
    offsets: dict[str, int] = {}
    got: list = []
    dropped = False
    while True:
        try:
            for message in target.follow(result.run_dir, offsets):
                if isinstance(message, Chunk):
                    assert offsets.get(message.spool, 0) == message.start  # no gap, no overlap
                    offsets[message.spool] = message.end
                    got.append(message)
                    if not dropped and _metrics(got):
                        dropped = ssh_env.server.drop_connections() > 0
                elif isinstance(message, End):
                    break
            break
        except ConnectionLost:
            continue
    assert dropped
    steps = [r["step"] for r in _metrics(got)]
    assert steps == sorted(set(steps)) and len(steps) >= 2
    whole = target.read_file(posixpath.join(result.run_dir, "metrics.jsonl"))
    assert b"".join(m.data for m in got if m.spool == "metrics.jsonl") == whole
