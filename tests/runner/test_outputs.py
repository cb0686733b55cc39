"""The runner's ``outputs`` command as the client calls it (a real process): the listing, the stream from an offset
with the whole file's sha256 after it, and what it refuses."""
import hashlib
import json
import os
import subprocess
import sys

import pytest

from remote_runner.outputs import outputs_dir


def _runner(*args):
    return subprocess.run([sys.executable, "-m", "remote_runner", "outputs", *args], capture_output=True)


def test_an_outputs_dir_inside_the_run_folder_is_listed_once(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "ckpt" / "deep").mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"outputs_dir": "ckpt"}))
    (run_dir / "ckpt" / "deep" / "a.pt").write_bytes(b"a")
    (run_dir / "stdout.log").write_bytes(b"log")
    reply = json.loads(_runner(str(run_dir)).stdout)
    assert [(f["root"], f["path"], f["size"]) for f in reply["files"]] == [
        ("run", "config.json", len((run_dir / "config.json").read_bytes())), ("run", "stdout.log", 3),
        ("outputs", "deep/a.pt", 1)]
    assert reply["roots"] == {"run": str(run_dir), "outputs": str(run_dir / "ckpt")}


def test_a_script_runs_relative_outputs_dir_is_in_its_folder(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps(
        {"mode": "script", "script": {"dir": str(tmp_path / "upload")}, "outputs_dir": "out/../checkpoints"}))
    assert outputs_dir(str(tmp_path / "run")) == str(tmp_path / "upload" / "checkpoints")
    missing = json.loads(_runner(str(tmp_path / "run")).stdout)["missing"]
    assert missing == [{"root": "outputs", "dir": str(tmp_path / "upload" / "checkpoints")}]


def test_the_stream_from_an_offset_ends_with_the_whole_files_sha256(tmp_path):
    data = os.urandom(3 * 2**20 + 17)
    (tmp_path / "blob.bin").write_bytes(data)
    out = _runner(str(tmp_path), "--read", json.dumps(["run", "blob.bin"]), "--offset", str(2**20 + 5))
    assert out.returncode == 0, out.stderr
    head, _, rest = out.stdout.partition(b"\n")
    assert json.loads(head) == {"ok": True, "size": len(data), "offset": 2**20 + 5}
    body, trailer = rest[:len(data) - 2**20 - 5], rest[len(data) - 2**20 - 5:]
    assert body == data[2**20 + 5:]
    assert json.loads(trailer) == {"sha256": hashlib.sha256(data).hexdigest()}
    past = _runner(str(tmp_path), "--read", json.dumps(["run", "blob.bin"]), "--offset", str(len(data) + 1))
    assert past.returncode == 2 and json.loads(past.stdout)["failure"] == "offset_past_end"
    digest = json.loads(_runner(str(tmp_path), "--sha256", json.dumps(["run", "blob.bin"])).stdout)
    assert digest == {"ok": True, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


@pytest.mark.parametrize("entry, failure", [
    (["run", "../escape"], "bad_path"), (["run", "/etc/passwd"], "bad_path"), (["run", "a/../../b"], "bad_path"),
    (["outputs", "x"], "bad_path"), (["run", "link out"], "outside"), (["run", "fifo"], "not_regular"),
    (["run", "gone"], "file_missing"), ("not json", "bad_path")])
def test_what_is_not_a_file_of_the_run_is_refused(tmp_path, entry, failure):
    (tmp_path / "link out").symlink_to("/etc/hostname")
    os.mkfifo(tmp_path / "fifo")
    out = _runner(str(tmp_path), "--sha256", entry if isinstance(entry, str) else json.dumps(entry))
    reply = json.loads(out.stdout)
    assert out.returncode == 2 and reply["ok"] is False and reply["failure"] == failure, reply


def test_outputs_dir_is_a_launch_setting(tmp_path):
    from ddpgui.cli import parse_command
    from ddpgui.cli.options import launch_settings
    from remote_runner.config import ConfigError, config_from_dict

    args = parse_command(["launch", "local", "--script", str(tmp_path), "--outputs-dir", "checkpoints"])
    assert launch_settings(args)["outputs_dir"] == "checkpoints"
    assert config_from_dict({"outputs_dir": "checkpoints"}).outputs_dir == "checkpoints"
    with pytest.raises(ConfigError) as refused:
        config_from_dict({"outputs_dir": " "})
    assert refused.value.field == "outputs_dir"
