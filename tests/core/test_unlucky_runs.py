"""Runs that meet bad luck on this computer, through real CLI processes and the real store:

* the CLI killed (SIGKILL) while it reads the script folder: the run is shown as a launch that did not finish, and
  ``runs``, ``follow``, ``stop``, ``delete`` and ``rerun`` each behave and come back;
* the run directory removed while ``follow`` watches: it ends with "the run's directory is gone".

The kill lands while the folder is read deterministically: the CLI runs under a driver that, once the launch puts
the script in place (on This computer: points the run at its folder), says so in a file and waits there (the test
then kills it).
"""
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest
from helpers.cli_process import REPO, cli_env, run_cli
from helpers.run_processes import kill_run_processes
from helpers.spools import wait_for

from ddpgui.core.store import RunStore
from remote_runner.status import read_status

pytestmark = pytest.mark.slow

SCRIPT = 'import time\nfor i in range(1, 4):\n    print(f"step {i} loss {1.0 / i}", flush=True)\n'


@pytest.fixture
def env(tmp_path):
    return cli_env(tmp_path)


def _store(tmp_path):
    return RunStore(tmp_path / "data" / "runs.sqlite3")


def _held_launch(tmp_path, env):
    """A real ``ddpgui launch local --script DIR`` process held once it has read the script folder; returns it."""
    script = tmp_path / "script"
    script.mkdir(exist_ok=True)
    (script / "train.py").write_text(SCRIPT)
    marker = tmp_path / "held"
    marker.unlink(missing_ok=True)
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(f"""\
        import sys, time
        import ddpgui.cli as cli
        from ddpgui.core.runs import launches

        def held(*args, **kwargs):
            open({str(marker)!r}, "w").close()
            while True:
                time.sleep(1)

        launches.place_script = held
        sys.exit(cli.main(sys.argv[1:]))
        """))
    proc = subprocess.Popen([sys.executable, str(driver), "launch", "local", "--script", str(script), "--nproc", "1",
                             "--name", "killed mid-launch"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert wait_for(marker.exists, timeout=120), proc.communicate(timeout=60)
    return proc


def test_launch_killed_midway_is_shown_followed_deleted_and_rerun(tmp_path, env):
    proc = _held_launch(tmp_path, env)
    with _store(tmp_path) as store:
        (record,) = store.list_runs()
    assert record.state == "launching" and not record.run_dirs

    # While its launcher lives, another process leaves the launch alone.
    rc, out, err = run_cli(["runs"], env, timeout=60)
    assert rc == 0 and "launching" in out, out + err
    rc, out, err = run_cli(["stop", record.id], env, timeout=60)
    assert rc == 1 and "being launched right now by pid" in err, out + err

    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)

    rc, out, err = run_cli(["runs"], env, timeout=60)
    assert rc == 0 and "launching" not in out and "failed" in out, out + err
    with _store(tmp_path) as store:
        settled = store.get_run(record.id)
    assert (settled.state, settled.failure) == ("failed", "launch_incomplete")
    assert settled.message == "the launch did not finish (the app was closed while reading the script folder)"

    rc, out, err = run_cli(["follow", record.id], env, timeout=60)
    assert rc == 1 and "the launch did not finish" in out + err and "Traceback" not in err, out + err
    rc, out, err = run_cli(["stop", record.id], env, timeout=60)
    assert rc == 0 and "already failed" in out, out + err

    rc, out, err = run_cli(["rerun", record.id, "--follow"], env, timeout=300)
    assert rc == 0, out + err
    rc, out, err = run_cli(["delete", record.id, "--yes"], env, timeout=60)
    assert rc == 0 and "no run directory" in out and "directory  on" not in out, out + err
    with _store(tmp_path) as store:
        (rerun,) = store.list_runs()
    assert rerun.id != record.id and rerun.state == "finished" and rerun.last_step == 3


def test_stop_and_delete_of_a_launch_killed_midway(tmp_path, env):
    proc = _held_launch(tmp_path, env)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    with _store(tmp_path) as store:
        (record,) = store.list_runs()
    assert record.state == "launching"  # nothing looked at it yet
    rc, out, err = run_cli(["stop", record.id], env, timeout=60)
    assert rc == 0 and f"run {record.id} stopped: stopped before its launch had finished" in out, out + err
    rc, out, err = run_cli(["delete", record.id, "--yes"], env, timeout=60)
    assert rc == 0 and "no run directory" in out, out + err
    with _store(tmp_path) as store:
        assert store.list_runs() == []


def test_run_directory_removed_mid_follow(tmp_path, env):
    follow = subprocess.Popen([sys.executable, "-m", "ddpgui", "launch", "local", "--workload", "linear", "--steps",
                               "100000", "--nproc", "1", "--follow"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)

    def running():
        if not (tmp_path / "data" / "runs.sqlite3").exists():
            return None
        with _store(tmp_path) as store:
            runs = store.list_runs()
            return runs and runs[0].last_step and runs[0]

    record = None
    try:
        assert wait_for(running, timeout=180)
        record = running()
        run_dir = record.run_dirs[0]
        status = read_status(run_dir)
        os.rename(run_dir, run_dir + ".removed")  # rm -rf would race the files the live run keeps creating
        out, err = follow.communicate(timeout=120)
    finally:
        if follow.poll() is None:
            follow.kill()
        if record is not None:
            kill_run_processes(status, run_dir, run_dir + ".removed")
            shutil.rmtree(record.run_dirs[0] + ".removed", ignore_errors=True)
    assert follow.returncode == 1, out + err
    assert f"the run's directory {run_dir} is gone from local" in out + err
    with _store(tmp_path) as store:
        final = store.get_run(record.id)
    assert (final.state, final.failure) == ("failed", "run_dir_missing")
