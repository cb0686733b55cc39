"""Sweeps on this computer: real torchrun runs (gloo, CPU), the real SQLite store, the real CLI."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from helpers.spools import wait_for

from ddpgui.core.hosts import HostStore
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import RunNotFound, RunStore, SweepCell, SweepRecord
from ddpgui.core.store import schema as store_module
from ddpgui.core.sweeps import SweepError, SweepRunner, SweepSpec, plan_sweep
from ddpgui.core.targets.factory import open_target

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: The smallest run: a linear model, a few steps (each run is mostly torchrun start-up).
TINY = {"workload": "linear", "steps": 3, "warmup_steps": 1, "dataset_size": 256, "batch_size": 8}


def _manager(tmp_path) -> RunManager:
    hosts = HostStore(tmp_path / "hosts.json")
    return RunManager(RunStore(tmp_path / "runs.sqlite3"), hosts, lambda name: open_target(name, hosts))


@pytest.fixture
def manager(tmp_path):
    m = _manager(tmp_path)
    yield m
    m.close()
    m.store.close()


def _launched(store, cell):
    """The cell's run once the launch has recorded it, else None (the runner names the cell's run id just
    before the launch inserts its row)."""
    try:
        return store.get_run(cell.run_id) if cell.run_id else None
    except RunNotFound:
        return None


def _why(store, cells):
    """What to print when a cell is not as expected: each cell's state and reason, and its run's stderr."""
    return [(c.label, c.state, c.reason, store.log_tail(c.run_id)[-1500:] if c.run_id else b"") for c in cells]


# --------------------------------------------------------------------------------------------------
# The store


def test_a_v1_store_gets_the_sweep_tables_and_keeps_its_runs(tmp_path, monkeypatch):
    path = tmp_path / "runs.sqlite3"
    migrations = store_module.MIGRATIONS
    monkeypatch.setattr(store_module, "MIGRATIONS", migrations[:1])
    with RunStore(path) as old:
        assert old.schema_version == 1
        old._conn().execute("INSERT INTO runs (id, name, config, created_at, updated_at) "  # as a v1 ddpgui wrote it
                            "VALUES ('r1', 'before sweeps', '{\"workload\": \"mlp\"}', 0, 0)")
    tables = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "sweeps" not in tables
    monkeypatch.setattr(store_module, "MIGRATIONS", migrations)
    with RunStore(path) as new:
        assert new.schema_version == len(migrations) >= 2
        assert new.get_run("r1").name == "before sweeps" and new.get_run("r1").sweep_id is None
        assert new.list_sweeps() == []
        sweep = new.create_sweep(SweepRecord(id="s1", name="n", hosts=["local"], matrix={"precision": ["fp32"]},
                                             parallel=True),
                                 [SweepCell(sweep_id="", index=0, label="precision=fp32", host="local",
                                            settings={"precision": "fp32"})])
        assert new.get_sweep("s1") == sweep and sweep.parallel is True
        assert new.update_cells("s1", 0, expect="pending", state="running", run_id="r1") == 1
        assert new.update_cells("s1", 0, expect="pending", state="running", run_id="r2") == 0  # claimed already
        assert new.sweep_cells("s1")[0].run_id == "r1"
        assert new.update_sweep("s1", expect="running", state="done") is None  # it is queued
        with pytest.raises(TypeError, match="sweep_id"):
            new.update_cells("s1", 0, sweep_id="other")
        with pytest.raises(KeyError, match="no sweep"):
            new.get_sweep("nope")


# --------------------------------------------------------------------------------------------------
# Planning


@pytest.mark.parametrize("spec, says", [
    (SweepSpec(hosts=["local"], matrix={"nproc": [1, 0]}), "sweep axis nproc = 0"),
    (SweepSpec(hosts=["local"], matrix={"precision": ["fp32", "fp8"]}), "precision = fp8"),
    (SweepSpec(hosts=["local"], matrix={"lr": [0.1, "fast"]}), "lr = fast"),
    (SweepSpec(hosts=["local"], matrix={"learning_rate": [0.1]}), "'learning_rate' is not a run setting"),
    (SweepSpec(hosts=["local"], matrix={"batch-size": [8, 8]}), "lists 8 more than once"),
    (SweepSpec(hosts=["local"], matrix={"compile": []}), "non-empty list"),
    (SweepSpec(hosts=["local"], base={"steps": 5}, matrix={"minutes": [1.0, 2.0]}), "minutes = 1.0"),
    (SweepSpec(hosts=["local"], base={"nproc_per_node": 2}, matrix={"nproc": [1, 2]}), "both a fixed setting"),
    (SweepSpec(hosts=["local"], repeats=0), "repeats"),
    (SweepSpec(hosts=["local", "no-such-host"]), "no-such-host"),
    (SweepSpec(hosts=[]), "at least one host"),
])
def test_a_bad_matrix_is_refused_naming_the_value_and_nothing_is_created(manager, spec, says):
    runner = SweepRunner(manager)
    with pytest.raises(SweepError) as err:
        runner.start(spec)
    assert says in str(err.value) and err.value.hint
    assert manager.store.list_sweeps() == [] and manager.store.list_runs() == []
    runner.close()


def test_cells_cover_the_matrix_with_labels_and_seeds_per_repeat():
    sweep, cells = plan_sweep(SweepSpec(hosts=["local", "local2"], base=dict(TINY),
                                        matrix={"compile": ["off", "default"], "nproc": [1, 2]}, repeats=2))
    assert len(cells) == 2 * 2 * 2 * 2 and [c.index for c in cells] == list(range(16))
    assert sweep.matrix == {"compile": ["off", "default"], "nproc_per_node": [1, 2]}
    assert cells[0].label == "compile=off nproc=1 #1 @local" and cells[-1].label == "compile=default nproc=2 #2 @local2"
    assert {(c.settings["compile"], c.settings["nproc_per_node"], c.repeat, c.host) for c in cells} == \
           {(m, n, r, h) for m in ("off", "default") for n in (1, 2) for r in (0, 1) for h in ("local", "local2")}
    assert {c.settings["seed"] for c in cells if c.repeat == 0} == {0}
    assert {c.settings["seed"] for c in cells if c.repeat == 1} == {1}
    assert "repeat r uses seed r" in sweep.seeds
    fixed, cells = plan_sweep(SweepSpec(hosts=["local"], base=dict(TINY, seed=7), repeats=3))
    assert [c.settings["seed"] for c in cells] == [7, 7, 7] and "seed 7 fixed by you" in fixed.seeds


# --------------------------------------------------------------------------------------------------
# Running

@pytest.mark.slow
@pytest.mark.timeout(600)  # two compiled cells: inductor's C++ compile on a loaded 2-core machine can take minutes
def test_compile_by_processes_all_done(manager):
    """Compile × processes, each cell once (4 real runs, half of them compiled; precision is the restart test's
    axis below, the three axes together are planned by test_cells_cover_the_matrix_with_labels_and_seeds_per_repeat,
    and the repeats' seeds run twice in the restart test)."""
    runner = SweepRunner(manager)
    seen = []
    runner.subscribe(seen.append)
    sweep = runner.start(SweepSpec(hosts=["local"], base=dict(TINY, precision="bf16"), repeats=1,
                                   name="issue 6 matrix", matrix={"compile": ["off", "default"], "nproc": [1, 2]}))
    final = runner.wait(sweep.id, timeout=900)
    store = manager.store
    cells = store.sweep_cells(sweep.id)
    assert final.state == "done", _why(store, cells)
    assert final.message == "4 of 4 cells done"
    assert len(cells) == 4 and {c.state for c in cells} == {"done"}
    combos = set()
    for cell in cells:
        run = store.get_run(cell.run_id)
        assert run.state == "finished" and run.sweep_id == sweep.id and "issue 6 matrix" in run.tags
        assert run.last_step == TINY["steps"]
        cfg = run.config
        assert {k: cfg[k] for k in ("compile", "precision", "nproc_per_node")} == \
               {k: cell.settings[k] for k in ("compile", "precision", "nproc_per_node")}
        combos.add((cfg["compile"], cfg["precision"], cfg["nproc_per_node"]))
        assert cell.started_at < cell.ended_at
    assert len(combos) == 4 and {p for _, p, _ in combos} == {"bf16"}  # every combination
    assert all(b.started_at >= a.ended_at for a, b in zip(cells, cells[1:]))  # one at a time
    assert sorted(r.id for r in store.sweep_runs(sweep.id)) == sorted(c.run_id for c in cells)
    last = seen[-1]
    assert last.state == "done" and last.done == 4 and last.fraction == 1.0
    assert any(p.eta_s for p in seen if 0 < p.ended < 4)  # an ETA once a cell had finished
    runner.close()


@pytest.mark.slow
def test_parallel_runs_cells_side_by_side_while_the_host_has_room(manager):
    env = manager.targets.environment("local")
    room = env["gpu_count"] or env["cpu_count"]
    runner = SweepRunner(manager)
    sweep = runner.start(SweepSpec(hosts=["local"], base=dict(TINY, steps=100), repeats=2, parallel=True))
    final = runner.wait(sweep.id, timeout=300)
    first, second = cells = manager.store.sweep_cells(sweep.id)
    assert final.state == "done", _why(manager.store, cells)
    assert (second.started_at < first.ended_at) == (room >= 2)  # the second started before the first ended
    runner.close()


@pytest.mark.slow
def test_restart_mid_sweep_continues_with_the_next_cell_and_runs_none_twice(tmp_path):
    first = _manager(tmp_path)
    store = first.store
    runner = SweepRunner(first)
    sweep = runner.start(SweepSpec(hosts=["local"], base=dict(TINY, steps=200), matrix={"precision": ["fp32", "bf16"]},
                                   repeats=2))

    def second_cell_launched():
        cells = store.sweep_cells(sweep.id)
        run = _launched(store, cells[1])
        return cells[0].state == "done" and cells[1].state == "running" and run is not None and run.run_dirs

    assert wait_for(second_cell_launched, timeout=300), _why(store, store.sweep_cells(sweep.id))
    runner.close()  # the app exits mid-sweep: its run goes on on the host
    first.close()
    cells = store.sweep_cells(sweep.id)
    assert [c.state for c in cells] == ["done", "running", "pending", "pending"]
    assert store.get_sweep(sweep.id).state == "running"
    interrupted = cells[1].run_id
    # A cell the app had claimed but died before its run existed:
    store.update_cells(sweep.id, 2, state="running", run_id="never-created", started_at=time.time())

    second = RunManager(store, first.hosts, lambda name: open_target(name, first.hosts))
    again = SweepRunner(second)
    again.resume(sweep.id)
    final = again.wait(sweep.id, timeout=600)
    cells = store.sweep_cells(sweep.id)
    assert final.state == "done", _why(store, cells)
    assert cells[1].run_id == interrupted  # reattached and waited for, not launched again
    assert store.get_run(interrupted).state == "finished"
    assert cells[2].run_id not in (None, "never-created")  # relaunched
    runs = store.sweep_runs(sweep.id)
    assert len(runs) == 4 and sorted(r.id for r in runs) == sorted(c.run_id for c in cells)
    again.close()
    second.close()
    store.close()


@pytest.mark.slow
def test_a_failing_cell_is_recorded_with_its_reason_and_the_sweep_goes_on(manager):
    fail = {"DDPGUI_TEST_FAIL_RANK": "0", "DDPGUI_TEST_FAIL_STEP": "2"}
    runner = SweepRunner(manager)
    sweep = runner.start(SweepSpec(hosts=["local"], base=dict(TINY), matrix={"env": [fail, {}]}))
    final = runner.wait(sweep.id, timeout=300)
    cells = manager.store.sweep_cells(sweep.id)
    assert final.state == "failed" and final.message == "1 of 2 cells done, 1 failed", _why(manager.store, cells)
    failed, done = cells
    assert failed.state == "failed" and "injected failure" in failed.reason, _why(manager.store, cells)
    assert manager.store.get_run(failed.run_id).state == "failed"
    assert done.state == "done" and manager.store.get_run(done.run_id).state == "finished"
    runner.close()


@pytest.mark.slow
def test_a_setting_the_host_refuses_fails_its_cell_and_skips_its_repeats(manager, tmp_path):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "train.py").write_text("print('step=1 loss=0.5')\n")
    runner = SweepRunner(manager)
    sweep = runner.start(SweepSpec(hosts=["local"], repeats=3,
                                   base={"mode": "script", "script": {"dir": str(scripts), "entry": "missing.py"},
                                         "steps": 1}))
    final = runner.wait(sweep.id, timeout=300)
    cells = manager.store.sweep_cells(sweep.id)
    assert final.state == "failed", _why(manager.store, cells)
    assert [c.state for c in cells] == ["failed", "skipped", "skipped"]
    assert "missing.py" in cells[0].reason and cells[0].hint
    assert all(c.run_id is None and "#1 was refused" in c.reason for c in cells[1:])
    assert len(manager.store.sweep_runs(sweep.id)) == 1  # the refused launch, recorded as a failed run
    runner.close()


@pytest.mark.slow
def test_stop_ends_the_running_cell_and_cancels_the_rest(manager):
    runner = SweepRunner(manager)
    sweep = runner.start(SweepSpec(hosts=["local"], base=dict(TINY, steps=None, minutes=5.0), repeats=3))
    store = manager.store

    def running_steps():
        run = _launched(store, store.sweep_cells(sweep.id)[0])
        return run is not None and (run.last_step or 0) > 1

    assert wait_for(running_steps, timeout=180), _why(store, store.sweep_cells(sweep.id))
    stopped = runner.stop(sweep.id)
    cells = store.sweep_cells(sweep.id)
    assert stopped.state == "stopped" and [c.state for c in cells] == ["cancelled"] * 3, _why(store, cells)
    assert store.get_run(cells[0].run_id).state == "stopped" and cells[0].reason == "stopped with the sweep"
    assert cells[1].run_id is None and cells[1].reason == "the sweep was stopped"
    assert len(store.sweep_runs(sweep.id)) == 1
    runner.close()


# --------------------------------------------------------------------------------------------------
# The CLI


def _cli(args, env, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "ddpgui", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.mark.slow
def test_cli_sweep_table_list_interrupt_and_resume(tmp_path):
    env = dict(os.environ, DDPGUI_DATA_DIR=str(tmp_path / "data"), DDPGUI_CONFIG_DIR=str(tmp_path / "config"))
    tiny = ["--workload", "linear", "--steps", "3", "--warmup-steps", "1", "--batch-size", "8"]
    bad = _cli(["sweep", "local", *tiny, "--nproc", "1,0"], env)
    _, err = bad.communicate(timeout=120)
    assert bad.returncode == 2 and "sweep axis nproc = 0" in err and "hint:" in err

    ok = _cli(["sweep", "local", *tiny, "--precision", "fp32,bf16", "--name", "cli sweep"], env)
    out, err = ok.communicate(timeout=300)
    assert ok.returncode == 0, out + err
    assert "sweep done: 2 of 2 cells done" in out
    table = [line.split()[:3] for line in out.splitlines() if line.split() and line.split()[0].isdigit()]
    assert table == [["0", "precision=fp32", "done"], ["1", "precision=bf16", "done"]]
    assert "[1/2] precision=fp32: done" in out and "[2/2] precision=bf16: done" in out

    listed = _cli(["sweeps", "--json"], env)
    out, _ = listed.communicate(timeout=60)
    (sweep,) = json.loads(out)
    assert sweep["name"] == "cli sweep" and sweep["state"] == "done" and sweep["counts"] == {"done": 2}
    assert sweep["matrix"] == {"precision": ["fp32", "bf16"]} and sweep["base"]["workload"] == "linear"

    interrupted = _cli(["sweep", "local", *tiny, "--nproc", "1,2", "--name", "to interrupt"], env)
    with RunStore(tmp_path / "data" / "runs.sqlite3") as store:
        def first_cell_launched():
            sweeps = [s for s in store.list_sweeps() if s.name == "to interrupt"]
            cells = store.sweep_cells(sweeps[0].id) if sweeps else []
            run = _launched(store, cells[0]) if cells else None
            return run is not None and run.run_dirs
        assert wait_for(first_cell_launched, timeout=120)
        interrupted.send_signal(signal.SIGINT)
        out, err = interrupted.communicate(timeout=120)
        assert interrupted.returncode == 130, out + err
        sweep_id = next(s.id for s in store.list_sweeps() if s.name == "to interrupt")
        assert f"ddpgui sweep-resume {sweep_id}" in err
        first_run = store.sweep_cells(sweep_id)[0].run_id

        resumed = _cli(["sweep-resume", sweep_id[:-2]], env)
        out, err = resumed.communicate(timeout=300)
        assert resumed.returncode == 0, out + err
        cells = store.sweep_cells(sweep_id)
        assert [c.state for c in cells] == ["done", "done"] and cells[0].run_id == first_run
        assert len(store.sweep_runs(sweep_id)) == 2
