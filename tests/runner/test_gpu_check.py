"""``make gpu-check`` (benchmarks/gpu_check.py) checked where there is no GPU: its sections, run small on the CPU
with gloo through the real supervisor and torchrun, write the JSON the README's GPU numbers are read from."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"


def _check(tmp_path, *args, timeout=600):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)
    return proc, json.loads(out.read_text())


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def test_cpu_smoke_runs_ddp_and_inference_through_the_real_runner(tmp_path):
    proc, report = _check(tmp_path, "--cpu-smoke", "--only", "ddp_nccl,inference")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["ok"] is True and report["smoke"] is True
    sections = report["sections"]
    assert set(sections) == {"probe", "ddp_nccl", "inference"}
    ddp = sections["ddp_nccl"]["run"]
    assert ddp["state"] == "finished" and ddp["world_size"] == 2 and ddp["backend"] == "gloo"
    assert ddp["metrics"] >= 12 and ddp["telemetry"]["cpu_samples"] >= 1
    rows = sections["inference"]["rows"]
    assert set(rows) | set(sections["inference"]["unsupported"]) == {"fp32", "bf16", "int8"}
    assert all(r["samples_per_s"] > 0 and r["latency_p50_ms"] <= r["latency_p99_ms"] for r in rows.values())
    assert "inference fp32:" in proc.stdout and f"wrote {tmp_path / 'gpu_check.json'}" in proc.stdout


def test_a_run_that_fails_fails_its_section_with_the_runner_s_words(tmp_path):
    # tf32 is CUDA's: on this CPU the runner refuses it, and the section says so rather than passing
    proc, report = _check(tmp_path, "--cpu-smoke", "--only", "precisions")
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the smoke skips tf32/fp16 on a CPU
    rows = report["sections"]["precisions"]["rows"]
    assert set(rows) == {"fp32", "bf16"} and all(r["state"] == "finished" for r in rows.values())
    assert all(r["steady_tokens_per_s"] > 0 and r["tflops"] > 0 for r in rows.values())

    sys.path.insert(0, str(REPO))
    try:
        from benchmarks.gpu_check import run_runner
    finally:
        sys.path.remove(str(REPO))
    run = run_runner({"workload": "transformer", "steps": 5, "precision": "tf32", "nproc_per_node": 1,
                      "backend": "gloo"}, 300, tmp_path)
    assert run["state"] == "failed" and "tf32" in run["message"]


def test_it_runs_where_nothing_of_ddpgui_is_installed(tmp_path):
    """As on a bare GPU image (torch there, ddpgui not installed): the first H200 run's nvml section failed with
    "No module named 'remote_runner'". ``-S`` leaves out this venv's .pth files (the editable install's finder);
    PYTHONPATH gives back site-packages alone, so torch imports and remote_runner only from the checkout."""
    import sysconfig

    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, "-S", str(SCRIPT), "--out", str(out), "--cpu-smoke", "--only", "nvml"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": sysconfig.get_paths()["purelib"]})
    report = json.loads(out.read_text())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["sections"]["probe"]["ok"] is True
    nvml = report["sections"]["nvml"]
    assert "error" not in nvml or nvml["error"] == "", nvml  # opened, or (no NVIDIA driver here) said it did not
    assert nvml["ok"] in (None, True)


def test_a_budget_too_small_skips_sections_and_says_why(tmp_path):
    proc, report = _check(tmp_path, "--cpu-smoke", "--budget", "5", "--only", "inference")
    assert proc.returncode == 0
    for name in ("probe", "inference"):
        assert report["sections"][name]["ok"] is None
        assert report["sections"][name]["skipped"].startswith("time budget")


@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU: the check runs for real there")
def test_without_a_gpu_the_check_says_there_is_nothing_to_check(tmp_path):
    proc, report = _check(tmp_path)
    assert proc.returncode == 2
    assert report["ok"] is None and "no NVIDIA GPU" in report["reason"]
    assert report["sections"]["probe"]["gpus"] == []


def test_a_compile_mode_cut_by_the_time_budget_is_skipped_in_words_not_failed(tmp_path, monkeypatch):
    """max-autotune compiled for 209 s on the H200: where the budget ends first, the section says so and passes."""
    sys.path.insert(0, str(REPO))
    try:
        import benchmarks.gpu_check as gpu_check
    finally:
        sys.path.remove(str(REPO))
    finished = {"state": "finished", "steady_tokens_per_s": 1000.0, "compile_s": None, "mfu": None}

    def run_runner(config, timeout, root):  # what run_runner returns for a run it killed at its timeout
        return {"state": "timed out", "rc": None} if config["compile"] == "max-autotune" else dict(finished)

    monkeypatch.setattr(gpu_check, "run_runner", run_runner)
    check = gpu_check.Check(False, gpu_check.Budget(400), tmp_path)
    section = check.compile(240)
    assert section["ok"] is True and section["rows"]["default"]["speedup_vs_eager"] == 1.0
    cut = section["runs"]["max-autotune"]
    assert cut["state"] == "skipped" and "--budget" in cut["message"] and "240 s" in cut["message"]
