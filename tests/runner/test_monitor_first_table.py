"""The host monitor's first snapshot from nvidia-smi waits for a whole table: on a loaded host a snapshot
taken after the first line can catch nvidia-smi's first loop half printed (seen: 2 of 8 GPUs, so
``--gpus 9`` was refused listing GPUs 0, 1 only).  The lines are the real 8x GTX TITAN X capture, in the
fields the monitor asks for, as tests/fixtures/gpu/fake_nvidia_smi.py prints them."""
import importlib.util
import time

from helpers.gpu_fixtures import GPU_FIXTURES

from remote_runner.gpumonitor import SmiSource
from remote_runner.gpustate import GPU_FIELDS


def _capture_lines():
    spec = importlib.util.spec_from_file_location("fake_nvidia_smi", GPU_FIXTURES / "fake_nvidia_smi.py")
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    return [", ".join(row.get(field, "[N/A]") for field in GPU_FIELDS) for row in fake.captured_rows()]


def test_ready_only_once_the_first_table_is_whole():
    lines = _capture_lines()
    assert len(lines) == 8
    source = SmiSource("nvidia-smi", 2.0)  # not started: its lines are handed to it here
    for line in lines[:2]:
        source._on_gpu_line(line + "\n", time.monotonic())
    assert not source.ready()  # 2 of 8 rows: a snapshot now would show 2 GPUs
    for line in lines[2:]:
        source._on_gpu_line(line + "\n", time.monotonic())
    assert not source.ready()  # the table may still go on: nothing says it ended
    source._on_gpu_line(lines[0] + "\n", time.monotonic())  # the next loop began: the first table was whole
    assert source.ready()
    gpus, _, _ = source.sample()
    assert [gpu["index"] for gpu in gpus] == list(range(8))
    source.close()
