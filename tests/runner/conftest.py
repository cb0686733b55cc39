"""Fixtures for runner tests: run directories and real torchrun launches of remote_runner.train."""
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TORCHRUN_TIMEOUT_S = 180


@dataclass
class RunResult:
    """What a finished run left behind."""

    run_dir: Path
    returncode: int
    stdout: str
    stderr: str

    def records(self, spool: str) -> list[dict]:
        path = self.run_dir / spool
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    @property
    def metrics(self) -> list[dict]:
        return self.records("metrics.jsonl")

    @property
    def events(self) -> list[dict]:
        return self.records("events.jsonl")

    def events_named(self, name: str) -> list[dict]:
        return [e for e in self.events if e["event"] == name]

    def error(self, rank: int) -> dict | None:
        path = self.run_dir / ("error-rank%d.json" % rank)
        return json.loads(path.read_text()) if path.exists() else None


@pytest.fixture
def make_run_dir(tmp_path: Path) -> Callable[..., Path]:
    """make_run_dir(config, name="run"): a 0700 run directory holding config.json."""

    def make(config: dict[str, object], name: str = "run") -> Path:
        run_dir = tmp_path / name
        run_dir.mkdir(mode=0o700)
        (run_dir / "config.json").write_text(json.dumps(config))
        return run_dir

    return make


@pytest.fixture
def torchrun(make_run_dir: Callable[..., Path]) -> Callable[..., RunResult]:
    """torchrun(config, nproc=1, env=None): run remote_runner.train under real torchrun (gloo, CPU)."""

    def run(config: dict[str, object], nproc: int = 1, env: dict[str, str] | None = None) -> RunResult:
        run_dir = make_run_dir(dict(config, nproc_per_node=nproc))
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
                "-m", "remote_runner.train", str(run_dir)]
        child_env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1", **(env or {}))
        proc = subprocess.run(argv, cwd=str(REPO_ROOT), env=child_env, capture_output=True, text=True,
                              timeout=TORCHRUN_TIMEOUT_S)
        return RunResult(run_dir, proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def single_rank_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment torchrun gives a one-process run, so train.main can run inside pytest."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(key, value)
