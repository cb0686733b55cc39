"""The runner's side of multi-node runs: the rendezvous preflight commands, the torchrun line, the config
fields, and the diagnosis of a node whose ranks lost their peers (captured from a real 2-node run)."""
import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from remote_runner.config import ConfigError, config_from_dict
from remote_runner.failures import classify
from remote_runner.supervisor import Supervisor

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "failures"
REPO = Path(__file__).resolve().parents[2]


def runner(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "remote_runner", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, **kwargs)


def check(address: str, port: int, token: str) -> tuple[int, dict]:
    proc = runner("rdzv-check", address, str(port), token, "--timeout", "3")
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, json.loads(out)


def listen(*args: str) -> tuple[subprocess.Popen, dict]:
    proc = runner("rdzv-listen", *args)
    return proc, json.loads(proc.stdout.readline())


def test_listen_picks_a_free_port_answers_each_check_then_frees_it():
    proc, first = listen("--expect", "2", "--timeout", "60")
    assert first["ok"] and first["port"] > 0 and first["token"]
    for _ in range(2):
        assert check("127.0.0.1", first["port"], first["token"]) == (0, {"ok": True, "address": "127.0.0.1",
                                                                          "port": first["port"]})
    rest = [json.loads(line) for line in proc.stdout.read().splitlines() if line.strip()]
    assert proc.wait(timeout=30) == 0 and rest == [{"ok": True, "checked": 2}]
    with socket.socket() as again:  # what torchrun does next on node 0: bind the same port
        again.bind(("", first["port"]))


def test_check_refuses_a_wrong_token_and_a_closed_port():
    proc, first = listen("--expect", "1", "--timeout", "60")
    rc, reply = check("127.0.0.1", first["port"], "not-the-token")
    assert rc == 2 and reply["failure"] == "rdzv_wrong_peer" and "something other than node 0" in reply["error"]
    proc.wait(timeout=30)
    rc, reply = check("127.0.0.1", first["port"], first["token"])  # the listener is gone: refused
    assert rc == 2 and reply["failure"] == "rdzv_unreachable" and f":{first['port']}" in reply["error"]
    assert "firewall" in reply["hint"]


def test_listen_on_a_taken_port_says_so():
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        proc, first = listen("--port", str(taken.getsockname()[1]))
        assert proc.wait(timeout=30) == 2
    assert not first["ok"] and first["failure"] == "addr_in_use" and "another program holds that port" in first["hint"]


def test_listen_ends_when_nobody_reads_its_output():
    proc, first = listen("--expect", "1", "--timeout", "600")
    assert first["ok"]
    proc.stdout.close()  # like a closed SSH channel
    assert proc.wait(timeout=30) == 0 or proc.returncode == -signal.SIGPIPE


def test_torchrun_uses_the_static_rendezvous_on_node_0s_endpoint(tmp_path):
    cfg = {"run_id": "r1", "nnodes": 2, "node_rank": 1, "rdzv_endpoint": "10.0.0.2:29400", "rdzv_timeout_s": 90}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    argv = Supervisor(str(tmp_path)).torchrun_argv(12345)
    line = " ".join(argv)
    assert "--nnodes 2 --node-rank 1 " in line and "--rdzv-backend static --rdzv-endpoint 10.0.0.2:29400" in line
    assert "--rdzv-conf timeout=90" in line and "--max-restarts 0" in line and "12345" not in line
    (tmp_path / "config.json").write_text(json.dumps({"run_id": "r2"}))
    assert "--rdzv-backend c10d --rdzv-endpoint 127.0.0.1:12345" in " ".join(Supervisor(str(tmp_path)).torchrun_argv(12345))


@pytest.mark.parametrize("endpoint", ["10.0.0.2", "host:port", "a b:1", "[::1:29500"])
def test_a_malformed_endpoint_is_refused(endpoint):
    with pytest.raises(ConfigError) as caught:
        config_from_dict({"nnodes": 2, "rdzv_endpoint": endpoint})
    assert caught.value.field == "rdzv_endpoint" and "host:port" in str(caught.value)


def test_endpoints_that_torchrun_takes_are_accepted():
    for endpoint in ("10.0.0.2:29500", "gpu-1.cluster:1", "[fe80::1]:29500"):
        assert config_from_dict({"nnodes": 2, "rdzv_endpoint": endpoint}).rdzv_endpoint == endpoint


def test_node_whose_ranks_lost_their_peer_is_diagnosed_as_the_echo_not_the_cause():
    log = (FIXTURES / "multinode_node0_peer_lost.stderr.txt").read_text()
    errors = json.loads((FIXTURES / "multinode_node0_peer_lost.errors.json").read_text())
    found = classify(1, log, errors)
    first = min(errors, key=lambda e: e["t"])["rank"]  # the first rank to notice is named
    assert found.kind == "peer_lost" and found.rank == first
    assert found.message.startswith(f"Rank {first} lost its connection to another rank (") and "failed first" in found.message
    assert "other nodes" in found.hint


def test_a_real_error_among_peer_losses_is_the_cause():
    errors = json.loads((FIXTURES / "multinode_node0_peer_lost.errors.json").read_text())
    cause = {"rank": 1, "type": "ValueError", "message": "bad batch", "traceback": "", "t": errors[0]["t"] + 1}
    found = classify(1, "", errors + [cause])
    assert found.kind == "rank_died" and found.rank == 1 and "ValueError: bad batch" in found.message
