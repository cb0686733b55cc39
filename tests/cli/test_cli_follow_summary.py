"""``ddpgui follow``'s closing summary comes from the store: real CLI processes following one real torchrun run."""
import json
import os

import pytest
from helpers.cli_process import start_cli

from ddpgui.core.runs.live import format_duration
from ddpgui.core.store import RunStore


def _summary(out: str) -> list[str]:
    """The lines from ``run ... after ...`` on (the live lines before it differ by when each follower looked)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("run ") and " after " in line)
    return lines[start:]


@pytest.mark.slow
def test_concurrent_and_late_followers_print_the_same_summary_as_the_store(tmp_path):
    env = dict(os.environ, DDPGUI_DATA_DIR=str(tmp_path / "data"), DDPGUI_CONFIG_DIR=str(tmp_path / "config"))
    launch = start_cli(["launch", "local", "--workload", "linear", "--steps", "3000", "--log-every", "1",
                   "--warmup-steps", "5", "--batch-size", "8", "--nproc", "2", "--name", "followed"], env)
    out, err = launch.communicate(timeout=120)
    assert launch.returncode == 0, out + err
    run_id = json.loads(out)["run_id"]

    followers = [start_cli(["follow", run_id], env) for _ in range(2)]
    outputs = []
    for follower in followers:
        out, err = follower.communicate(timeout=600)
        assert follower.returncode == 0, out + err
        outputs.append(out)
    late = start_cli(["follow", run_id], env)
    out, err = late.communicate(timeout=120)
    assert late.returncode == 0, out + err
    outputs.append(out)

    with RunStore(tmp_path / "data" / "runs.sqlite3") as store:
        run = store.get_run(run_id)
        loss = store.series(run_id, keys=["loss"])["loss"][-1]
    assert run.state == "finished" and run.last_step == 3000
    expected_head = f"run finished after {format_duration(run.ended_at - run.started_at)}: 3000 steps"
    summaries = [_summary(o) for o in outputs]
    assert summaries[0][0] == expected_head, summaries
    assert summaries[0] == summaries[1] == summaries[2]
    final_loss = run.summary.get("final_loss", loss)
    assert f"  final loss          {final_loss:.4f}" in summaries[0]
