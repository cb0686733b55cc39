"""Sweeps of users' own scripts over compile, precision and their own arguments (issue 22), under the real
``ddpgui sweep local --script DIR ...``: real torchrun (gloo, 2 CPU processes), the real Transformers and
Accelerate `make test` installs, the real supervisor and store.  Each run's recorded arguments and environment,
what the script itself reported it ran with, and the comparison's groups are checked."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.cli_process import cli_env, run_cli

from ddpgui.core.analysis.comparison import compute_comparison
from ddpgui.core.runs.reported import script_reports, settings_warnings
from ddpgui.core.store import RunStore
from ddpgui.core.store.run_store import STORE_FILE

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "scripts"


def sweep(tmp_path, source: Path, *argv, timeout=420):
    """``ddpgui sweep local --script COPY --entry train.py ARGV`` to its end; returns (store, runs, folder, out)."""
    folder = tmp_path / source.name
    if not folder.exists():
        shutil.copytree(source, folder)
    env = cli_env(tmp_path, OMP_NUM_THREADS="1")
    head, tail = (list(argv[:argv.index("--")]), list(argv[argv.index("--"):])) if "--" in argv else (list(argv), [])
    code, out, err = run_cli(["sweep", "local", "--script", str(folder), "--entry", "train.py", *head, *tail], env,
                             timeout=timeout)
    store = RunStore(tmp_path / "data" / STORE_FILE)
    runs = sorted(store.list_runs(), key=lambda r: r.created_at)
    assert code == 0 and runs and all(r.state == "finished" for r in runs), (
        code, out, err, [(r.name, r.state, r.message, store.log_tail(r.id, "stderr.log")[-2000:]) for r in runs])
    return store, runs, folder, out


def reported(store, run, setting):
    found = script_reports(store, run.id).get(setting)
    return found.value if found else None


def test_a_transformers_script_swept_over_precision_with_repeats(tmp_path):
    store, runs, _, out = sweep(tmp_path, SCRIPTS / "frameworks" / "hf_args", "--nproc", "2", "--precision",
                                "fp32,bf16", "--repeats", "2", "--", "--output_dir", "out", "--use_cpu", "True",
                                "--num_train_epochs", "1", "--logging_steps", "1", "--save_strategy", "no",
                                "--report_to", "none")
    assert len(runs) == 4 and "sweep done: 4 of 4 cells done" in out
    for run in runs:
        script = run.config["script"]
        precision = run.config["precision"]
        assert script["framework"] == "transformers" and script["applied"] == ["precision"]
        assert script["passed_args"] == (["--bf16", "True"] if precision == "bf16" else
                                         ["--bf16", "False", "--fp16", "False"])
        assert script["args"][:2] == ["--output_dir", "out"]
        # The script said, in its own start-up log, that it ran with what it was given
        assert reported(store, run, "precision") == precision and reported(store, run, "batch_size") == 8
        assert settings_warnings(run.config, script_reports(store, run.id)) == []
        assert store.series(run.id, keys=["loss"])["loss"].size >= 4
    result = compute_comparison(store, None, [r.id for r in runs])
    groups = {g.label: g for g in result.comparison.groups}
    assert set(groups) == {"fp32", "bf16"} and all(g.n == 2 for g in groups.values())
    assert {s.throughput_unit for s in result.comparison.runs} == {"steps/s"}


def test_an_accelerate_script_swept_over_mixed_precision_through_its_environment(tmp_path):
    store, runs, _, _ = sweep(tmp_path, SCRIPTS / "frameworks" / "accelerate_state", "--nproc", "2",
                              "--precision", "fp32,bf16")
    assert [r.config["script"]["passed_env"] for r in runs] == [{"ACCELERATE_MIXED_PRECISION": "no"},
                                                                {"ACCELERATE_MIXED_PRECISION": "bf16"}]
    assert [reported(store, r, "precision") for r in runs] == ["fp32", "bf16"]
    # Accelerate's state also says how many processes and which backend it runs with
    assert {(reported(store, r, "world_size"), reported(store, r, "backend")) for r in runs} == {(2, "gloo")}
    assert [r.config["script"]["passed_args"] for r in runs] == [[], []]
    labels = [g.label for g in compute_comparison(store, None, [r.id for r in runs]).comparison.groups]
    assert labels == ["fp32", "bf16"]


def test_a_plain_script_mapped_by_its_folders_file_and_an_argument_axis(tmp_path):
    folder = tmp_path / "gptlike"
    shutil.copytree(SCRIPTS / "gptlike", folder)
    (folder / "ddpgui.toml").write_text('[settings.precision]\nfp32 = "--dtype=float32"\nbf16 = "--dtype=bfloat16"\n'
                                        '[settings.compile]\noff = "--compile=False"\ndefault = "--compile=True"\n')
    store, runs, _, _ = sweep(tmp_path, SCRIPTS / "gptlike", "--nproc", "2", "--precision", "bf16", "--compile",
                              "off", "--arg", "--learning_rate=1e-3,3e-3", "--", "--max_iters=8")
    assert [r.config["script"]["options"] for r in runs] == [{"--learning_rate": "1e-3"}, {"--learning_rate": "3e-3"}]
    for run in runs:
        assert run.config["script"]["passed_args"] == ["--compile=False", "--dtype=bfloat16"]
        assert run.config["script"]["framework"] is None
        # nanoGPT's configurator prints what it overrode: the script got each argument
        log = store.log_tail(run.id, "stdout.log").decode()
        lr = run.config["script"]["options"]["--learning_rate"]
        assert f"Overriding: learning_rate = {float(lr)}" in log and "Overriding: dtype = bfloat16" in log
        assert reported(store, run, "precision") == "bf16" and reported(store, run, "compile") == "off"
        assert store.series(run.id, keys=["step"])["step"][-1] == 8
    labels = [g.label for g in compute_comparison(store, None, [r.id for r in runs]).comparison.groups]
    assert labels == ["--learning_rate=1e-3", "--learning_rate=3e-3"]


def test_a_script_that_runs_otherwise_than_it_was_asked_is_warned_about(tmp_path):
    folder = tmp_path / "gptlike"
    shutil.copytree(SCRIPTS / "gptlike", folder)
    # A mapping with a slip: bf16 sent as float32; the script says so, and the run says it back
    (folder / "ddpgui.toml").write_text('[settings.precision]\nbf16 = "--dtype=float32"\n')
    env = cli_env(tmp_path, OMP_NUM_THREADS="1")
    code, out, err = run_cli(["launch", "local", "--script", str(folder), "--entry", "train.py", "--nproc", "1",
                              "--precision", "bf16", "--follow", "--", "--max_iters=3"], env, timeout=240)
    assert code == 0, (out, err)
    store = RunStore(tmp_path / "data" / STORE_FILE)
    (run,) = store.list_runs()
    assert settings_warnings(run.config, script_reports(store, run.id)) == [
        "asked precision bf16, the script reports fp32 (\u201cOverriding: dtype = float32\u201d)"]
    code, shown, _ = run_cli(["show", run.id], env, timeout=60)
    assert "  passed      precision bf16 → --dtype=float32 (your mapping)" in shown, shown
    assert "  warning     asked precision bf16, the script reports fp32" in shown, shown


def launch(tmp_path, source: Path, *argv):
    """``ddpgui launch local --script COPY --entry train.py ARGV --follow`` to its end; returns (store, run, out)."""
    folder = tmp_path / source.name
    shutil.copytree(source, folder)
    env = cli_env(tmp_path, OMP_NUM_THREADS="1")
    head, tail = list(argv[:argv.index("--")]), list(argv[argv.index("--"):])
    code, out, err = run_cli(["launch", "local", "--script", str(folder), "--entry", "train.py", *head, "--follow",
                              *tail], env, timeout=300)
    store = RunStore(tmp_path / "data" / STORE_FILE)
    (run,) = store.list_runs()
    assert code == 0 and run.state == "finished", (code, out, err, run.message,
                                                   store.log_tail(run.id, "stderr.log")[-3000:])
    return store, run, folder


def test_a_lightning_cli_script_given_bf16_runs_in_bf16_and_says_so(tmp_path):
    store, run, folder = launch(tmp_path, SCRIPTS / "frameworks" / "lightning_cli", "--nproc", "2", "--precision",
                                "bf16", "--", "fit")
    script = run.config["script"]
    assert script["framework"] == "lightning-cli" and script["applied"] == ["precision"]
    assert script["passed_args"] == ["--trainer.precision=bf16-mixed"]
    truth = [json.loads(line) for line in (folder / "truth.jsonl").read_text().splitlines()]
    assert {t["precision"] for t in truth} == {"bf16-mixed"}  # the trainer took it
    # What Lightning said at start-up: its AMP, and its DDP strategy's backend and processes
    assert [reported(store, run, s) for s in ("precision", "world_size", "backend")] == ["bf16", 2, "gloo"]
    assert settings_warnings(run.config, script_reports(store, run.id)) == []
    # Its Rich bar (LightningCLI's default with rich installed) redraws 10 times a second from a thread of its
    # own, and may skip a fast step's frame. It may also draw one between Lightning's advancing the bar and its
    # setting the step's metrics (RichProgressBar.on_train_batch_end: _update, then _update_metrics): that frame
    # shows step n with step n-1's loss, and when the next frame is already at n+1 that is all the output ever
    # said of step n (seen once in a loaded suite). Every value stored is the script's at that step or, from such
    # a frame, at the step before; the last step's is its own.
    s = store.series(run.id, keys=["step", "loss"])
    keep = np.isfinite(s["loss"])
    got = dict(zip(s["step"][keep].astype(int).tolist(), s["loss"][keep].tolist()))
    loss = {t["step"]: t["loss"] for t in truth}
    assert sorted(loss) == list(range(1, 13)) and 12 in got and len(got) >= 6, got

    def close(value, step):
        return abs(value - loss[step]) <= 5e-4 * abs(loss[step]) + 1e-3

    drawn_early = {step: v for step, v in got.items() if not close(v, step)}
    assert all(step > 1 and close(v, step - 1) for step, v in drawn_early.items()), (drawn_early, got, loss)
    assert close(got[12], 12), (got, loss)


def test_a_transformers_script_with_compile_on_compiles(tmp_path):
    store, run, _ = launch(tmp_path, SCRIPTS / "frameworks" / "hf_args", "--nproc", "1", "--compile", "default",
                           "--", "--output_dir", "out", "--use_cpu", "True", "--max_steps", "4")
    assert run.config["script"]["passed_args"][-2:] == ["--torch_compile", "True"]
    assert reported(store, run, "compile") == "on"
    assert settings_warnings(run.config, script_reports(store, run.id)) == []
