"""``ddpgui follow`` says a stall once: a real CLI process following a real run of tests/fixtures/scripts/stalling
(it trains, sleeps silently, trains, announces an evaluation, trains), thresholds from the config folder's
stalls.json made small for the test."""
import json
import os
from pathlib import Path

import pytest
from helpers.cli_process import cli_env, run_cli

from ddpgui.cli.render import STALLS_FILE, stall_policy
from ddpgui.core.runs.stalls import StallPolicy

STALLING = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "scripts",
                        "stalling")


def write_policy(env, text: str) -> None:
    folder = Path(env["DDPGUI_CONFIG_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / STALLS_FILE).write_text(text)


@pytest.mark.slow
def test_follow_prints_stalled_once_during_the_sleep_and_progressing_again_after(tmp_path):
    env = cli_env(tmp_path)
    write_policy(env, json.dumps({"silence_factor": 5, "min_silence_s": 3}))
    code, out, err = run_cli(["launch", "local", "--script", STALLING, "--nproc", "1", "--name", "sleeper", "--",
                              "--steps=8", "--stall=15", "--eval=8", "--step_s=0.25"], env, timeout=120)
    assert code == 0, out + err
    run_id = json.loads(out)["run_id"]
    code, out, err = run_cli(["follow", run_id], env, timeout=300)
    assert code == 0, out + err
    lines = err.splitlines()
    stalled = [line for line in lines if line.startswith("stalled? ")]
    assert len(stalled) == 1, err
    assert stalled[0].startswith("stalled? no metrics for "), stalled
    assert "processes (supervisor, torchrun, ranks) alive" in stalled[0], stalled
    assert lines.count("progressing again") == 1, err
    assert lines.index("progressing again") > lines.index(stalled[0])
    assert "run finished after " in out, out


def test_the_thresholds_come_from_stalls_json_and_a_bad_one_is_said(tmp_path, monkeypatch, capsys):
    env = cli_env(tmp_path)
    monkeypatch.setenv("DDPGUI_CONFIG_DIR", env["DDPGUI_CONFIG_DIR"])
    assert stall_policy() == StallPolicy()  # no file: the defaults
    write_policy(env, json.dumps({"min_silence_s": 30, "auto_stop_after_s": None}))
    assert stall_policy() == StallPolicy(min_silence_s=30)
    assert capsys.readouterr().err == ""
    write_policy(env, json.dumps({"gpu_idle_pct": 250}))
    assert stall_policy() == StallPolicy()
    err = capsys.readouterr().err
    assert "stalls.json cannot be used (gpu_idle_pct: 250.0 is not usable)" in err, err
    assert "Hint: give a percentage from 0 to 100" in err, err
    write_policy(env, "min_silence_s = 30")
    assert stall_policy() == StallPolicy()
    assert "Hint: write it as a JSON object" in capsys.readouterr().err
