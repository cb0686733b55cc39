"""A hosts file of valid JSON but the wrong shape: one error naming the file, the host and the field."""
import json
import os
import subprocess
import sys

import pytest

from ddpgui.core.hosts import HostsFileError, HostStore

GOOD = {"name": "box", "hostname": "10.0.0.1"}


@pytest.mark.parametrize("data, expected", [
    ([GOOD], 'must be a JSON object with "schema" and "hosts", got [{"name"'),
    ({"schema": 1, "hosts": 5}, '"hosts" must be a list of host objects, got 5'),
    ({"schema": 1, "hosts": {"box": GOOD}}, '"hosts" must be a list of host objects, got {"box"'),
    ({"schema": 1, "hosts": [GOOD, 5]}, "host #2: must be an object, got 5"),
    ({"schema": 1, "hosts": [dict(GOOD, python=5)]}, 'host "box", field "python": must be a string (got 5)'),
    ({"schema": 1, "hosts": [dict(GOOD, port="22")]}, 'host "box", field "port": must be an integer (got "22")'),
    ({"schema": 1, "hosts": [dict(GOOD, port=True)]}, 'host "box", field "port": must be an integer (got true)'),
    ({"schema": 1, "hosts": [dict(GOOD, proxy_jump="jump")]},
     'host "box", field "proxy_jump": must be a list of strings (got "jump")'),
    ({"schema": 1, "hosts": [dict(GOOD, nccl_env={"A": 1})]},
     'host "box", field "nccl_env": must be an object of strings (got {"A": 1})'),
    ({"schema": 1, "hosts": [dict(GOOD, price_per_hour="cheap")]},
     'host "box", field "price_per_hour": must be a number or null (got "cheap")'),
    ({"schema": 1, "hosts": [dict(GOOD, name=7)]}, 'host #1, field "name": must be a string (got 7)'),
    ({"schema": 1, "hosts": [dict(GOOD, port=70000)]}, 'host "box", field "port": must be 1-65535, got 70000'),
    ({"schema": 1, "hosts": [dict(GOOD, colour="red")]}, 'host "box", field "colour": unknown field'),
    ({"schema": 1, "hosts": [GOOD, GOOD]}, "two hosts are named 'box'"),
    ({"schema": 2, "hosts": []}, "has schema 2, this version of ddpgui reads schema 1"),
    ({"hosts": []}, "has schema null, this version of ddpgui reads schema 1"),
])
def test_wrong_shapes_name_the_file_host_and_field(tmp_path, data, expected):
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps(data))
    with pytest.raises(HostsFileError) as info:
        HostStore(path)
    assert str(info.value).startswith(f"hosts file {path}")
    assert expected in str(info.value)
    assert "move it aside" in info.value.hint


def test_cli_prints_one_message_and_hint_without_a_traceback_and_leaves_the_file(tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    path = config / "hosts.json"
    path.write_text(json.dumps({"schema": 1, "hosts": [dict(GOOD, python=5)]}))
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    env = dict(os.environ, DDPGUI_CONFIG_DIR=str(config), DDPGUI_DATA_DIR=str(tmp_path / "data"))
    for argv in (["hosts", "list"], ["hosts", "add", "other", "--host", "10.0.0.2"], ["probe", "local"]):
        done = subprocess.run([sys.executable, "-m", "ddpgui", *argv], env=env, capture_output=True, text=True)
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.splitlines()[0] == (f'ddpgui: hosts file {path}: host "box", field "python": '
                                               'must be a string (got 5)'), argv
        assert done.stderr.splitlines()[1].startswith(f"hint: fix {path} by hand, or move it aside")
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
