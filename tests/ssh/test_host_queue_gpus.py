"""A parallel sweep on an SSH host with GPUs is queued on the host, which places each cell on free GPUs itself
(remote_runner/queue.py, remote_runner/placement.py): through the real CLI over the loopback sshd, the host made one
with two idle GPUs by its profile's Python (this Python with the fake nvidia-smi, replaying two V100s of a real
capture, first on its PATH).  The client shows the host's reason while cells wait for GPUs, and SIGKILLed once the
first cells run it changes nothing: every cell finishes on the host, the cells side by side on GPUs of their own."""
import getpass
import json
import os
import signal
from pathlib import Path

import pytest
from helpers.cli_process import cli_env, run_cli, start_cli
from helpers.gpu_snapshots import gpu_host_python, two_idle_v100s
from helpers.host_queue import queue_processes
from helpers.spools import wait_for

from ddpgui.core.store import RunStore

pytestmark = pytest.mark.slow
WAIT_S = 300  # the machine is shared and slow: generous

HOLDER = '''"""Writes the GPUs this rank saw to OUT/<run>.json, then holds until two runs have and RELEASE exists."""
import glob, json, os, sys, time

out, release = sys.argv[1], sys.argv[2]
run = os.environ.get("TORCHELASTIC_RUN_ID", "?")
with open(os.path.join(out, run + ".tmp"), "w") as fh:
    json.dump({"run": run, "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}, fh)
os.replace(os.path.join(out, run + ".tmp"), os.path.join(out, run + ".json"))
deadline = time.monotonic() + 240
while len(glob.glob(os.path.join(out, "*.json"))) < 2 or not os.path.exists(release):
    if time.monotonic() > deadline:
        sys.exit("held for 240 s")
    time.sleep(0.2)
print("step 1 loss 0.5", flush=True)
'''


def on_host(root: Path, run_id: str, name: str) -> dict:
    return json.loads((root / "runs" / run_id / name).read_text())


def pending_reasons(env: dict) -> list[str]:
    """The reasons of the sweep's pending cells in the client's store."""
    with RunStore(Path(env["DDPGUI_DATA_DIR"]) / "runs.sqlite3") as store:
        sweeps = store.list_sweeps()
        return [c.reason for s in sweeps for c in store.sweep_cells(s.id) if c.state == "pending"]


def test_a_parallel_sweep_finishes_on_the_host_without_its_client_each_cell_on_free_gpus(ssh_env, tmp_path):
    root, script, out, release = tmp_path / "gpu root", tmp_path / "holder", tmp_path / "ranks", tmp_path / "release"
    script.mkdir()
    out.mkdir()
    (script / "train.py").write_text(HOLDER)
    env = cli_env(tmp_path, HOME=str(tmp_path))
    code, _, err = run_cli(["hosts", "add", "g", "--host", "127.0.0.1", "--port", str(ssh_env.server.port), "--user",
                            getpass.getuser(), "--auth", "key", "--key-file", str(ssh_env.key_plain), "--python",
                            gpu_host_python(tmp_path, two_idle_v100s(tmp_path)), "--run-root", str(root)], env)
    assert code == 0, err
    client = start_cli(["sweep", "g", "--script", str(script), "--repeats", "4", "--parallel", "--name", "gpu lid",
                        "--accept-new-host-key", "--", str(out), str(release)], env)
    try:
        waiting = "waiting for 1 free GPU on g: 0 free, 2 held by the sweep's running cells"
        assert wait_for(lambda: len(list(out.glob("*.json"))) == 2 and waiting in pending_reasons(env)
                        or client.poll() is not None, timeout=WAIT_S), pending_reasons(env)
        assert client.poll() is None, client.communicate()
        client.send_signal(signal.SIGKILL)  # the laptop's lid closes while two cells run and two wait for GPUs
    finally:
        client.kill()
        client.communicate()
    release.touch()
    assert wait_for(lambda: not queue_processes(root), timeout=WAIT_S)
    cells = json.loads((root / "queue" / "state.json").read_text())["cells"]
    assert [c["state"] for c in cells] == ["launched"] * 4 and all(c["parallel"] for c in cells)
    seen = {p.stem: json.loads(p.read_text())["visible"] for p in out.glob("*.json")}
    runs = {}
    for cell in cells:
        run_id = cell["run_id"]
        config, status = on_host(root, run_id, "config.json"), on_host(root, run_id, "status.json")
        assert status["state"] == "finished" and config["gpus"] == cell["gpus"] and len(config["gpus"]) == 1
        assert config["env"]["CUDA_VISIBLE_DEVICES"] == seen[run_id] == str(config["gpus"][0])
        runs[run_id] = (config["gpus"][0], status["started_at"], status["ended_at"])
    assert sorted(runs[c["run_id"]][0] for c in cells[:2]) == [0, 1]  # the first two side by side
    for a, (gpu_a, start_a, end_a) in runs.items():
        for b, (gpu_b, start_b, end_b) in runs.items():
            if a < b and start_a < end_b and start_b < end_a:
                assert gpu_a != gpu_b, (a, b, runs)  # runs that ran together never shared a GPU
    assert not os.path.exists(root / "queue" / "queue.pid")
