"""``launch --new [--retry]`` on this machine: nothing made from a cut-short config, nothing left by a refused launch,
and a retry after a lost answer that finds its own run instead of starting a second one (remote_runner/launching.py).
The runner is run as the client runs it, one process per command."""
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.spools import wait_for

from remote_runner.status import write_status

REPO = Path(__file__).resolve().parents[2]
CONFIG = {"workload": "linear", "steps": 2, "run_id": "r1"}


def launch(run_dir: Path, config, *flags: str) -> tuple[subprocess.Popen, str]:
    data = config if isinstance(config, str) else json.dumps(config)
    proc = subprocess.Popen([sys.executable, "-m", "remote_runner", "launch", str(run_dir), "--new", *flags],
                            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, data


def answer(proc: subprocess.Popen, data: str) -> tuple[int, dict]:
    out, err = proc.communicate(data, timeout=120)
    assert out.strip(), err
    return proc.returncode, json.loads(out.strip().splitlines()[-1])


def run(run_dir: Path, config, *flags: str) -> tuple[int, dict]:
    return answer(*launch(run_dir, config, *flags))


def made(run_dir: Path, config=CONFIG) -> Path:
    """A run directory as a launch whose answer was lost left it: made, its config written, not started."""
    run_dir.mkdir(parents=True, mode=0o700)
    (run_dir / "config.json").write_text(json.dumps(config))
    return run_dir


def test_a_config_cut_short_on_the_way_makes_nothing(tmp_path):
    rc, reply = run(tmp_path / "runs" / "r1", json.dumps(CONFIG)[:-4])
    assert rc == 2 and not reply["ok"] and "not whole JSON" in reply["error"]
    assert "link may have dropped" in reply["hint"]
    assert not (tmp_path / "runs" / "r1").exists()


def test_a_launch_refused_after_making_its_directory_removes_it(tmp_path):
    config = dict(CONFIG, mode="script", script={"dir": str(tmp_path / "nowhere"), "entry": "train.py"})
    rc, reply = run(tmp_path / "runs" / "r1", config)
    assert rc == 2 and "is not on this host" in reply["error"]
    assert os.listdir(tmp_path / "runs") == []


def test_a_retry_starts_a_run_whose_directory_was_made_but_not_started(tmp_path):
    run_dir = made(tmp_path / "runs" / "r1")
    rc, reply = run(run_dir, (run_dir / "config.json").read_text(), "--retry", "--no-start")
    assert (rc, reply) == (0, {"ok": True, "pid": 0, "run_dir": str(run_dir)})


def test_a_retry_never_takes_a_directory_of_another_config(tmp_path):
    run_dir = made(tmp_path / "runs" / "r1", dict(CONFIG, steps=5))
    written = (run_dir / "config.json").read_text()
    rc, reply = run(run_dir, CONFIG, "--retry", "--no-start")
    assert rc == 2 and "already exists: another launch chose the same run id" in reply["error"]
    assert (run_dir / "config.json").read_text() == written


def test_a_retry_answers_the_run_its_lost_answer_had_started(tmp_path):
    run_dir = made(tmp_path / "runs" / "r1")
    write_status(str(run_dir), state="running", pid=4242)
    rc, reply = run(run_dir, (run_dir / "config.json").read_text(), "--retry")
    assert (rc, reply["pid"], reply["resumed"]) == (0, 4242, True)


def _waits_for_lock(inode: int) -> bool:
    """Whether /proc/locks shows a process blocked on an flock of ``inode`` ("-> FLOCK ... maj:min:inode")."""
    return any("-> FLOCK" in line and line.split()[6].endswith(f":{inode}")
               for line in Path("/proc/locks").read_text().splitlines())


def test_a_retry_waits_for_the_launch_still_running_in_its_directory(tmp_path):
    """The lost answer's launch may still be starting the run when the retry arrives: the retry waits for its lock,
    then finds the run it started."""
    run_dir = made(tmp_path / "runs" / "r1")
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the first launch, between its mkdir and its answer
        proc, data = launch(run_dir, (run_dir / "config.json").read_text(), "--retry", "--no-start")
        proc.stdin.write(data)
        proc.stdin.close()
        assert wait_for(lambda: _waits_for_lock(os.fstat(fd).st_ino), timeout=60)
        write_status(str(run_dir), state="starting", pid=4343)  # the first launch started the run
    finally:
        os.close(fd)
    out = proc.stdout.read()
    assert proc.wait(timeout=60) == 0
    reply = json.loads(out)
    assert (reply["pid"], reply["resumed"]) == (4343, True)
