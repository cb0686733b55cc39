"""remote_runner.train: real torchrun, gloo on CPU, 1-2 processes; a few in-process one-rank runs."""
import importlib.util
import json
import math

import pytest
import torch

from remote_runner import devices, hooks, infer, train
from remote_runner.devices import PrecisionError
from remote_runner.infer import percentile

#: Small and short: a 2-process run of any workload takes seconds on 2 CPU cores.
BASE = {"steps": 20, "batch_size": 8, "dataset_size": 512, "log_every": 1, "warmup_steps": 3}


def assert_clean_metrics(result, steps, world_size):
    """One record per step from rank 0 only, in order, finite, with the run's world size."""
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = result.metrics
    assert [m["seq"] for m in metrics] == list(range(len(metrics)))
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))  # a second writer would repeat steps
    assert all(m["world_size"] == world_size for m in metrics)
    assert all(math.isfinite(m["loss"]) and m["samples_per_s"] > 0 for m in metrics)
    assert not list(result.run_dir.glob("error-rank*.json"))
    return metrics


@pytest.mark.slow
# Each workload once, each process count twice: a run is mostly torchrun's start-up, and the pairs add nothing
@pytest.mark.parametrize("workload, nproc", [("linear", 1), ("mlp", 2), ("transformer", 1), ("cnn", 2)])
def test_workload_trains(torchrun, workload, nproc):
    size = "large" if workload == "linear" else "auto"  # the GPU size through a real run where it is cheap on a CPU
    result = torchrun(dict(BASE, workload=workload, model_size=size), nproc)
    metrics = assert_clean_metrics(result, BASE["steps"], nproc)
    assert all(m["global_batch"] == 8 * nproc and m["phase"] == "train" for m in metrics)
    assert [m["warmup"] for m in metrics[:4]] == [True, True, True, False]
    assert ("tokens_per_s" in metrics[0]) == (workload == "transformer")
    assert all(m["tflops"] > 0 and m["mfu"] is None for m in metrics)  # no peak FLOPS for a CPU
    start, = result.events_named("train_start")
    assert (start["world_size"], start["backend"], start["device"]) == (nproc, "gloo", "cpu")
    assert start["workload"] == workload and start["params"] > 0
    assert start["model_size"] == ("large" if size == "large" else "small")  # auto: small on a CPU
    assert (start["params"] == 1024 * 256 + 256) == (size == "large")
    assert [e["step"] for e in result.events_named("warmup_done")] == [3]
    summary, = result.events_named("summary")
    assert summary["steps"] == BASE["steps"] and summary["final_loss"] == metrics[-1]["loss"]
    assert summary["best_loss"] == min(m["loss"] for m in metrics)
    assert summary["steady_samples_per_s"] > 0 and summary["mem_peak_gib"] > 0
    assert sorted(p.name for p in (result.run_dir / "pids").iterdir()) == ["rank%d.pid" % r for r in range(nproc)]


@pytest.mark.slow
@pytest.mark.parametrize("precision,workload", [("bf16", "transformer"), ("fp16", "mlp")])
def test_cpu_mixed_precision(torchrun, precision, workload):
    # fp16 (with its GradScaler) on the mlp: CPU fp16 kernels make the transformer ~10x slower
    result = torchrun(dict(BASE, workload=workload, precision=precision, steps=4, batch_size=4))
    assert_clean_metrics(result, 4, 1)
    assert result.events_named("train_start")[0]["precision"] == precision


@pytest.mark.slow
def test_tf32_is_refused_on_cpu_with_the_reason(torchrun):
    result = torchrun(dict(BASE, precision="tf32"))
    assert result.returncode != 0
    error = result.error(0)
    assert error["type"] == "PrecisionError" and "tf32" in error["message"] and "CPU" in error["message"]
    assert error["message"] in result.stderr
    assert result.metrics == []


@pytest.mark.slow
def test_compile_default_reports_compile_time(torchrun):
    result = torchrun(dict(BASE, workload="mlp", compile="default", steps=6))
    assert_clean_metrics(result, 6, 1)
    names = [e["event"] for e in result.events]
    assert names.index("train_start") < names.index("compile_start") < names.index("compile_end")
    assert result.events_named("compile_end")[0]["duration_s"] > 0


@pytest.mark.slow
def test_epochs_follow_the_distributed_sampler(torchrun):
    # 256 samples over 2 ranks: 128 per rank, 16 batches of 8 per epoch; persistent loader workers
    result = torchrun(dict(BASE, workload="mlp", steps=None, epochs=2, dataset_size=256, num_workers=2), 2)
    metrics = assert_clean_metrics(result, 32, 2)
    assert [m["epoch"] for m in metrics] == [0] * 16 + [1] * 16
    assert result.events_named("train_start")[0]["steps_per_epoch"] == 16


@pytest.mark.slow
def test_gradient_accumulation_counts_micro_batches(torchrun):
    # 2 ranks x 2 micro-batches of 8: 32 samples a step, 256 samples make 8 steps an epoch
    result = torchrun(dict(BASE, workload="mlp", steps=None, epochs=1, dataset_size=256, grad_accum=2), 2)
    metrics = assert_clean_metrics(result, 8, 2)
    assert all(m["global_batch"] == 32 and m["epoch"] == 0 for m in metrics)


@pytest.mark.slow
def test_minutes_stop_every_rank_together(torchrun):
    result = torchrun(dict(BASE, workload="mlp", steps=None, minutes=0.05, log_every=2), 2)
    assert result.returncode == 0, result.stderr[-3000:]
    summary, = result.events_named("summary")
    # Training stops when the first rank passes its deadline; ranks start up to a moment apart, so
    # rank 0's own clock may show a little less than the 3 s asked for, never a fraction of it.
    assert summary["duration_s"] >= 0.5 * 0.05 * 60
    assert summary["steps"] % 2 == 0 and summary["steps"] == result.metrics[-1]["step"]


@pytest.mark.slow
def test_inference_reports_every_precision(torchrun):
    precisions = ["fp32", "bf16", "fp16", "int8"]
    result = torchrun(dict(BASE, mode="inference", workload="transformer", steps=5, batch_size=4,
                           inference_precisions=precisions), 2)
    assert result.returncode == 0, result.stderr[-3000:]
    for precision in precisions:
        done = [e for e in result.events_named("inference_summary") if e["precision"] == precision]
        unsupported = [e for e in result.events_named("inference_unsupported") if e["precision"] == precision]
        assert len(done) + len(unsupported) == 1, precision
        records = [m for m in result.metrics if m["precision"] == precision]
        if done:
            assert [m["step"] for m in records] == [1, 2, 3, 4, 5]
            assert all(m["phase"] == "inference" and m["latency_ms"] > 0 for m in records)
            assert done[0]["latency_p50_ms"] <= done[0]["latency_p99_ms"]
        else:
            assert records == []
            assert unsupported[0]["reason"].startswith("%s not supported here: " % precision)
    assert result.events_named("inference_summary")[0]["precision"] == "fp32"


@pytest.mark.slow
def test_one_rank_failing_ends_the_run(torchrun):
    env = {hooks.FAIL_RANK_ENV: "1", hooks.FAIL_STEP_ENV: "4"}
    result = torchrun(dict(BASE, workload="mlp", steps=1000, rank_failure_timeout_s=30), 2, env=env)
    assert result.returncode != 0
    error = result.error(1)
    assert error["rank"] == 1 and error["type"] == "RuntimeError"
    assert error["message"].startswith("injected failure on rank 1 at step 4")
    assert "Traceback" in error["traceback"]
    if result.error(0):  # rank 0 saw the connection drop after rank 1 died: the diagnoser orders by t
        assert result.error(0)["t"] >= error["t"]
    assert result.events_named("summary") == []


def run_in_process(make_run_dir, config, name="run"):
    """train.main inside pytest as a one-rank run (needs the single_rank_env fixture)."""
    run_dir = make_run_dir(config, name)
    return train.main(str(run_dir)), run_dir


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_accumulated_micro_batches_equal_one_big_batch(make_run_dir, single_rank_env):
    common = dict(BASE, workload="mlp", optimizer="sgd", lr=0.05, steps=6)
    rc_big, big = run_in_process(make_run_dir, dict(common, batch_size=16), "big")
    rc_acc, acc = run_in_process(make_run_dir, dict(common, batch_size=8, grad_accum=2), "accumulated")
    assert rc_big == rc_acc == 0
    big_losses = [m["loss"] for m in read_jsonl(big / "metrics.jsonl")]
    acc_losses = [m["loss"] for m in read_jsonl(acc / "metrics.jsonl")]
    assert len(big_losses) == 6 and big_losses[-1] < big_losses[0]
    assert acc_losses == pytest.approx(big_losses, rel=1e-4)


def test_dataset_too_small_for_one_step_names_the_field(make_run_dir, single_rank_env):
    rc, run_dir = run_in_process(make_run_dir, dict(BASE, dataset_size=4, batch_size=8))
    error = json.loads((run_dir / "error-rank0.json").read_text())
    assert rc == 1 and error["type"] == "ConfigError" and error["field"] == "dataset_size"
    assert (run_dir / "pids" / "rank0.pid").read_text().strip().isdigit()


def test_bad_config_is_reported_in_the_error_file(make_run_dir, single_rank_env):
    rc, run_dir = run_in_process(make_run_dir, dict(BASE, workload="resnet152"))
    error = json.loads((run_dir / "error-rank0.json").read_text())
    assert rc == 1 and error["field"] == "workload" and "resnet152" in error["message"]


def test_inference_on_one_rank_in_process(make_run_dir, single_rank_env):
    rc, run_dir = run_in_process(make_run_dir, dict(BASE, mode="inference", workload="mlp", steps=4,
                                                    inference_precisions=["int8", "fp32"]))
    assert rc == 0
    events = read_jsonl(run_dir / "events.jsonl")
    assert [e["event"] for e in events][0] == "inference_start"
    outcome = {e["precision"]: e["event"] for e in events if "precision" in e}
    assert outcome["fp32"] == "inference_summary"
    assert outcome["int8"] in ("inference_summary", "inference_unsupported")


def test_inference_needs_a_step_count(make_run_dir, single_rank_env):
    rc, run_dir = run_in_process(make_run_dir, dict(BASE, mode="inference", steps=None, minutes=1.0))
    assert rc == 1 and json.loads((run_dir / "error-rank0.json").read_text())["field"] == "steps"


def test_precision_refusals_are_plain_words():
    env = devices.Env(0, 0, 1, torch.device("cpu"), "gloo")
    with pytest.raises(PrecisionError, match="tf32 is a tensor-core mode"):
        devices.check_precision("tf32", env)
    devices.check_precision("bf16", env)  # CPU autocast always has bf16
    assert isinstance(devices.cpu_fp16_autocast(), bool)


def test_int8_off_cpu_needs_torchao():
    if importlib.util.find_spec("torchao") is not None:
        pytest.skip("torchao is installed here, so int8 off the CPU goes through it")
    with pytest.raises(RuntimeError, match="install torchao"):
        infer.int8_model(torch.nn.Linear(2, 2), "cuda")


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (50.0, 99.0, 100.0)
    assert percentile([3.0], 99) == 3.0
