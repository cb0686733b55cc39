"""One rule for environment variable names (remote_runner.config.env_problem), at every entry point:
``launch --env``, ``sweep --env``, ``hosts add --node-env``, a hosts file, a sweep's settings, the app's launch
form and the host's own check of config.json (real CLI and runner processes, the real store)."""
import json
import os
import subprocess
import sys

import pytest

from ddpgui.core.hosts import HostError, HostStore
from ddpgui.core.store import RunStore
from ddpgui.core.sweeps import SweepError, SweepSpec, plan_sweep
from remote_runner.config import ConfigError, RunConfig, env_problem

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BAD = "BAD;rm"
SAID = f"{BAD!r} is not an environment variable name"


@pytest.fixture
def env(tmp_path):
    return dict(os.environ, DDPGUI_DATA_DIR=str(tmp_path / "data"), DDPGUI_CONFIG_DIR=str(tmp_path / "config"))


def _ddpgui(args, env, timeout=120):
    return subprocess.run([sys.executable, "-m", "ddpgui", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_rule():
    assert env_problem("NCCL_DEBUG", "INFO") is None and env_problem("_X1", "") is None
    for name in (BAD, "1ST", "", "A-B", "A B", "A=B", "NAME\n", "É"):
        assert env_problem(name, "1"), name
    assert "NUL" in env_problem("A", "x\0y")


@pytest.mark.parametrize("command", [["launch", "local", "--workload", "linear", "--steps", "2", "--env", f"{BAD}=1"],
                                     ["sweep", "local", "--precision", "fp32,bf16", "--env", f"{BAD}=1"],
                                     ["hosts", "add", "gpu1", "--host", "gpu1.example", "--node-env", f"{BAD}=1"]])
def test_the_cli_refuses_a_bad_name_before_doing_anything(env, tmp_path, command):
    result = _ddpgui(command, env)
    assert result.returncode == 2 and SAID in result.stderr, result.stderr
    assert not (tmp_path / "data" / "runs.sqlite3").exists() or not RunStore(tmp_path / "data" / "runs.sqlite3").list_runs()
    assert "gpu1" not in _ddpgui(["hosts", "list"], env).stdout


def test_a_hosts_file_with_a_bad_name_is_refused_naming_it(tmp_path):
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps({"schema": 1, "hosts": [{"name": "gpu1", "hostname": "gpu1.example",
                                                         "nccl_env": {BAD: "1"}}]}))
    with pytest.raises(HostError) as refused:
        HostStore(path).profiles()
    assert SAID in str(refused.value) and "nccl_env" in str(refused.value)


def test_a_sweep_and_a_config_refuse_it():
    with pytest.raises(SweepError) as refused:
        plan_sweep(SweepSpec(hosts=["local"], base={"env": {BAD: "1"}}, matrix={"precision": ["fp32", "bf16"]}))
    assert SAID in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        RunConfig(env={BAD: "1"})
    assert refused.value.field == "env" and SAID in str(refused.value)


def test_the_host_refuses_a_config_json_with_a_bad_name(tmp_path):
    """The runner on the host checks config.json itself (a client of another version may have written it)."""
    config = {"workload": "linear", "steps": 2, "env": {BAD: "1"}}
    result = subprocess.run([sys.executable, "-m", "remote_runner", "launch", str(tmp_path / "run"), "--new"],
                            input=json.dumps(config), cwd=REPO, capture_output=True, text=True, timeout=120)
    reply = json.loads(result.stdout)
    assert result.returncode != 0 and not reply["ok"] and reply["field"] == "env" and SAID in reply["error"]
    assert not (tmp_path / "run" / "status.json").exists()


def test_the_apps_launch_form_refuses_it(qtbot):
    from ddpgui.ui.widgets.launch_panel import LaunchPanel

    panel = LaunchPanel()
    qtbot.addWidget(panel)
    panel.advanced.setChecked(True)
    panel.env.setPlainText(f"{BAD}=1")
    assert panel.validate() is False and SAID in panel.error.text()
    panel.env.setPlainText("NCCL_DEBUG=INFO")
    assert panel.validate() is True
