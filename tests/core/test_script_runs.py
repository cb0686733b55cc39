"""Users' own scripts through script mode on this computer: real supervisor, real torchrun (gloo, 2 CPU
processes), real run store, real CLI; the script is tests/fixtures/scripts/gptlike (modelled on nanoGPT)."""
import os
import shutil

import pytest

from ddpgui.cli import main as cli_main
from ddpgui.core.runs.live import LiveRun, progress_line

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPTLIKE = os.path.join(REPO, "tests", "fixtures", "scripts", "gptlike")


def run_script(manager, *args, **settings):
    record = manager.launch("local", dict({"mode": "script", "nproc_per_node": 2,
                                           "script": {"dir": GPTLIKE, "entry": "train.py", "args": list(args)}},
                                          **settings))
    return manager.wait(record.id, timeout=300)


def live_from_store(manager, record):
    """The live numbers of a stored run, as ``ddpgui follow`` builds them."""
    live = LiveRun(total_steps=record.total_steps, total_minutes=record.config.get("minutes"))
    for spool in ("metrics.jsonl", "events.jsonl"):
        for rec in manager.store.records(record.id, spool):
            live.add(spool, rec)
    return live


def test_a_nanogpt_style_ddp_script_finishes_every_time_with_its_metrics(manager, capsys):
    for _ in range(3):  # the teardown abort came in about 1 run of 4: a few runs, each must finish
        final = run_script(manager, "--max_iters=8")
        assert final.state == "finished", (final.message, final.hint,
                                           manager.store.log_tail(final.id, "stderr.log")[-3000:])
        iters = [r for r in manager.store.records(final.id) if "mfu" in r]  # "iter N: loss X, time Yms, mfu Z%"
        assert [r["step"] for r in iters] == list(range(9))
        assert all(r["loss"] > 0 and r["step_time_ms"] > 0 and r["world_size"] == 2 for r in iters)
        assert final.last_step == 8
        assert b"terminate called" not in manager.store.log_tail(final.id, "stderr.log")
    # its length is unknown: no total from the built-in default, no ETA; steps and a rate instead
    assert final.total_steps is None and final.config["steps"] is None
    line = progress_line(live_from_store(manager, final))
    assert line.startswith("step 8  loss ") and "/" not in line.split("loss")[0], line
    assert "steps/s" in line and "ETA" not in line and "samples/s" not in line, line
    capsys.readouterr()
    assert cli_main(["show", final.id]) == 0
    shown = capsys.readouterr().out
    assert "  settings    script train.py ×2 (args --max_iters=8)\n" in shown, shown
    assert "  steps       8\n" in shown and "mlp" not in shown, shown


def test_a_script_given_a_length_shows_it(manager):
    final = run_script(manager, "--max_iters=8", steps=8)
    assert final.state == "finished" and final.total_steps == 8
    line = progress_line(live_from_store(manager, final))
    assert "step 8/8" in line and "ETA" in line, line


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host has an NVIDIA driver")
def test_a_cuda_nccl_script_on_a_cpu_host_fails_saying_it_needs_a_gpu(manager):
    final = run_script(manager, "--backend=nccl", "--device=cuda")  # nanoGPT's own defaults
    assert (final.state, final.failure) == ("failed", "needs_gpu"), (final.message, final.hint)
    assert "needs an NVIDIA GPU" in final.message and "NCCL" in final.message
    assert final.hint.startswith("this host has no NVIDIA GPU (its probe finds no NVIDIA driver or GPU): run it on "
                                 "a host with an NVIDIA GPU, or make it run on the CPU: device cpu and backend gloo")
