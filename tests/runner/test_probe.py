"""The probe: real nvidia-smi output parsed, each problem decided from captured facts, the real probe on
this machine (fast, never raising), NVML and nvidia-smi faked with captured output (tests/fixtures/gpu)."""
import json
import os
import platform
import shutil
import subprocess
import sys
import types

import pytest
import torch
from helpers.gpu_fixtures import GPU_FIXTURES, fake_pynvml_fixture

from remote_runner import probe as probe_module
from remote_runner.probe import LOW_DISK_GIB, find_problems, gather_facts, parse_smi_summary, probe


def summary(name):
    return parse_smi_summary((GPU_FIXTURES / name).read_text())


# --- plain nvidia-smi output --------------------------------------------------------------------------------------

def test_summary_of_old_layout_a100_host():
    found = summary("smi_summary_a100_sxm4_80gb_525.txt")
    assert (found["driver_version"], found["cuda_version"]) == ("525.60.13", "12.0")
    assert [g["index"] for g in found["gpus"]] == list(range(8))  # the processes table adds none
    assert {g["name"] for g in found["gpus"]} == {"NVIDIA A100-SXM..."}
    assert {g["memory_total_gib"] for g in found["gpus"]} == {80.0}


@pytest.mark.parametrize("name, driver, cuda, gpu_names, memory", [
    ("smi_summary_a800_sxm4_80gb_535.txt", "535.86.10", "12.2", ["NVIDIA A800-SXM4-80GB"] * 2, [80.0, 80.0]),
    ("smi_summary_h100_80gb_hbm3_550.txt", "550.90.07", "12.4", ["NVIDIA H100 80GB HBM3"] * 2, [79.65, 79.65]),
    ("smi_summary_b200_610_kmd.txt", "610.43.02", "13.3", ["NVIDIA B200"] * 2, [179.06, 179.06]),
    ("smi_summary_gb10_580.txt", "580.126.09", "13.0", ["NVIDIA GB10"], [None]),
    ("smi_q_t4_440.txt", "440.33.01", "10.2", [], []),
])
def test_summary_of_captured_hosts(name, driver, cuda, gpu_names, memory):
    found = summary(name)
    assert (found["driver_version"], found["cuda_version"]) == (driver, cuda)
    assert [g["name"] for g in found["gpus"]] == gpu_names
    assert [g["memory_total_gib"] for g in found["gpus"]] == memory


# --- problems, decided from facts ---------------------------------------------------------------------------------

def h100_host():
    """Facts of a healthy host: the H100 capture's driver and GPUs, a matching CUDA build of torch."""
    driver = summary("smi_summary_h100_80gb_hbm3_550.txt")
    gpus = [{"index": g["index"], "name": "NVIDIA H100 80GB HBM3", "memory_total_gib": 79.19,
             "compute_capability": "9.0", "bf16": True, "peak_tflops_bf16": 989.0, "source": "torch"}
            for g in driver["gpus"]]
    return {
        "schema": 1, "hostname": "gpu-node", "disk_path": "/home/me", "disk_free_gib": 412.3,
        "python": {"version": "3.10.12", "executable": "/home/me/venv/bin/python"},
        "torch": {"version": "2.4.1+cu124", "cuda_build": "12.4", "compile_api": True, "distributed_available": True,
                  "cuda_available": True, "cuda_warning": None, "cudnn": 90100,
                  "nccl": {"available": True, "version": "2.20.5"}, "gloo_available": True, "xccl_available": False,
                  "xpu_available": False, "mps_available": False, "cpu_fp16_autocast": True},
        "torch_import_error": None, "driver_source": "nvidia-smi", "driver_version": driver["driver_version"],
        "driver_cuda_version": driver["cuda_version"], "driver_error": None, "driver_gpus": driver["gpus"],
        "gpus": gpus, "best_device": "cuda",
        "compile": {"c_compiler": "/usr/bin/cc", "cxx_compiler": "/usr/bin/c++", "triton": True, "possible": True,
                    "device": "cuda"},
        "probe_errors": [],
    }


def codes(facts):
    return [p["code"] for p in find_problems(facts)]


def the_problem(facts, code):
    found = [p for p in find_problems(facts) if p["code"] == code]
    assert len(found) == 1, find_problems(facts)
    assert set(found[0]) == {"code", "severity", "message", "hint"} and found[0]["message"] and found[0]["hint"]
    return found[0]


def test_a_healthy_gpu_host_has_no_problems():
    assert find_problems(h100_host()) == []


def test_torch_missing_with_the_real_import_error():
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", "import torch"], stderr=subprocess.PIPE,
                          text=True)
    error = proc.stderr.strip().splitlines()[-1]  # ModuleNotFoundError: No module named 'torch'
    facts = dict(h100_host(), torch=None, torch_import_error=error)
    problem = the_problem(facts, "torch_missing")
    assert "/home/me/venv/bin/python" in problem["message"]
    assert "cu124" in problem["hint"]  # a wheel for the driver's CUDA 12.4
    assert codes(facts) == ["torch_missing"]


def test_torch_that_fails_to_import_is_not_called_missing():
    error = "OSError: libcudnn.so.9: cannot open shared object file: No such file or directory"
    problem = the_problem(dict(h100_host(), torch=None, torch_import_error=error), "torch_broken")
    assert "libcudnn.so.9" in problem["message"]


def test_torch_older_than_2_1():
    facts = h100_host()
    facts["torch"].update(version="1.13.1+cu117", cuda_build="11.7")
    problem = the_problem(facts, "torch_too_old")
    assert "1.13.1+cu117" in problem["message"] and "2.1" in problem["message"]


def test_cuda_build_newer_than_driver_same_major_is_a_warning():
    """torch cu124 on the A800 host whose driver 535.86.10 supports CUDA 12.2 at most."""
    facts = h100_host()
    driver = summary("smi_summary_a800_sxm4_80gb_535.txt")
    facts.update(driver_version=driver["driver_version"], driver_cuda_version=driver["cuda_version"])
    problem = the_problem(facts, "cuda_driver_too_old")
    assert problem["severity"] == "warning"
    assert "12.4" in problem["message"] and "535.86.10" in problem["message"] and "12.2" in problem["message"]
    assert "https://download.pytorch.org/whl/cu121" in problem["hint"]  # no cu122 wheels exist
    assert "upgrade the NVIDIA driver" in problem["hint"]


def test_cuda_build_newer_than_driver_major_is_an_error():
    """torch cu121 on the T4 host whose driver 440.33.01 supports CUDA 10.2: libcudart 12 cannot load."""
    driver = summary("smi_q_t4_440.txt")
    facts = h100_host()
    facts["torch"].update(version="2.3.1+cu121", cuda_build="12.1", cuda_available=False,
                          cuda_warning="CUDA initialization: The NVIDIA driver on your system is too old (found "
                                       "version 10020). Please update your GPU driver by downloading and installing "
                                       "a new version from the URL: http://www.nvidia.com/Download/index.aspx "
                                       "Alternatively, go to: https://pytorch.org to install a PyTorch version that "
                                       "has been compiled with your version of the CUDA driver.")
    facts.update(driver_version=driver["driver_version"], driver_cuda_version=driver["cuda_version"], gpus=[])
    problem = the_problem(facts, "cuda_driver_too_old")
    assert problem["severity"] == "error"
    assert problem["hint"] == ("upgrade the NVIDIA driver: it supports CUDA 10.2, and PyTorch 2.1 and newer are "
                               "built for CUDA 11.8 or newer")
    unusable = the_problem(facts, "cuda_unavailable")
    assert "too old (found version 10020)" in unusable["message"]


def test_gpus_seen_by_the_driver_but_a_cpu_only_torch():
    facts = h100_host()
    facts["torch"].update(version="2.4.1+cpu", cuda_build=None, cuda_available=False, cudnn=None,
                          nccl={"available": False, "version": None})
    facts["gpus"] = facts["driver_gpus"]
    problem = the_problem(facts, "torch_cpu_only")
    assert "2 NVIDIA GPU(s)" in problem["message"] and "CPU-only" in problem["message"]
    assert "https://download.pytorch.org/whl/cu124" in problem["hint"]
    assert codes(facts) == ["torch_cpu_only"]  # no NCCL is expected of a CPU build


def test_cuda_build_without_nccl():
    facts = h100_host()
    facts["torch"]["nccl"] = {"available": False, "version": None}
    assert "gloo" in the_problem(facts, "nccl_missing")["hint"]


def test_no_c_compiler_for_torch_compile_on_gpu():
    facts = h100_host()
    facts["compile"].update(c_compiler=None, possible=False)
    problem = the_problem(facts, "no_compiler")
    assert "C compiler" in problem["message"] and "build-essential" in problem["hint"]


def test_no_cxx_compiler_for_torch_compile_on_cpu():
    facts = h100_host()
    facts["compile"] = {"c_compiler": None, "cxx_compiler": None, "triton": False, "possible": False, "device": "cpu"}
    problem = the_problem(facts, "no_compiler")
    assert "C++" in problem["message"] and "build-essential" in problem["hint"]


def test_no_triton_with_cuda():
    facts = h100_host()
    facts["compile"].update(triton=False, possible=False)
    assert "pip install triton" in the_problem(facts, "no_triton")["hint"]
    assert codes(facts) == ["no_triton"]


def test_low_disk():
    facts = dict(h100_host(), disk_free_gib=LOW_DISK_GIB - 0.8)
    assert "4.2 GiB" in the_problem(facts, "low_disk")["message"]
    assert codes(dict(h100_host(), disk_free_gib=LOW_DISK_GIB + 0.1)) == []


def test_gpus_of_different_models_are_a_warning():
    facts = h100_host()
    facts["gpus"][1] = dict(facts["gpus"][1], name="NVIDIA A100-SXM4-80GB", compute_capability="8.0")
    problem = the_problem(facts, "mixed_gpus")
    assert problem["severity"] == "warning"
    assert "NVIDIA A100-SXM4-80GB" in problem["message"] and "NVIDIA H100 80GB HBM3" in problem["message"]


def test_nvidia_smi_that_fails():
    facts = dict(h100_host(), driver_gpus=[], gpus=[], driver_error=(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
        "NVIDIA driver is installed and running."))
    facts["torch"]["cuda_available"] = False
    assert "dmesg" in the_problem(facts, "driver_unreachable")["hint"]


def test_torch_without_distributed():
    facts = h100_host()
    facts["torch"]["distributed_available"] = False
    assert codes(facts) == ["distributed_missing"]


def test_a_part_that_failed_is_a_warning():
    facts = dict(h100_host(), probe_errors=[{"part": "cpu_model", "error": "PermissionError: /proc/cpuinfo"}])
    problem = the_problem(facts, "probe_error")
    assert problem["severity"] == "warning" and "cpu_model" in problem["message"]


# --- the real probe, on this machine ------------------------------------------------------------------------------

def test_probe_of_this_machine(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # what a CI machine has; nvidia-ml-py is optional
    report = probe(str(tmp_path / "runs" / "not-yet"))
    json.dumps(report)
    assert report["schema"] == 1 and report["disk_path"] == str(tmp_path)
    assert report["python"] == {"version": platform.python_version(), "executable": sys.executable}
    assert report["torch"]["version"] == torch.__version__ and report["torch"]["cuda_build"] == torch.version.cuda
    assert report["torch"]["gloo_available"] is True and report["cpu_count"] == os.cpu_count()
    assert report["compile"]["c_compiler"] == shutil.which("cc")
    assert report["probe_errors"] == []
    if not torch.cuda.is_available():
        assert report["best_device"] == "cpu" and report["gpus"] == []
        assert report["precisions"]["fp32"] is None and "tf32" in report["precisions"]["tf32"]
    assert isinstance(report["problems"], list)


def test_a_failing_part_becomes_none_and_a_problem(monkeypatch):
    def broken():
        raise OSError("uname failed")

    monkeypatch.setattr(probe_module.platform, "platform", broken)
    report = probe()
    assert report["os"] is None
    assert any(p["code"] == "probe_error" and "uname failed" in p["message"] for p in report["problems"])


def test_probe_never_raises(monkeypatch):
    def broken(run_root=None, cache_dir=None):
        raise RuntimeError("unexpected")

    monkeypatch.setattr(probe_module, "gather_facts", broken)
    report = probe()
    assert report["probe_errors"] == [{"part": "probe", "error": "RuntimeError: unexpected"}]
    assert [p["code"] for p in report["problems"]] == ["probe_error"]


def test_nvml_gpus_with_this_cpu_only_torch(monkeypatch):
    """A100 host captured through NVML, with the real (CPU) torch of this machine: GPUs torch cannot use."""
    if torch.cuda.is_available():
        pytest.skip("this machine's torch uses its GPUs; the case needs a torch that cannot")
    a100 = fake_pynvml_fixture.capture("a100_sxm4_80gb_x2_driver_525")
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml_fixture.module(a100))
    facts = gather_facts()
    assert (facts["driver_source"], facts["driver_version"], facts["driver_cuda_version"]) == \
        ("nvml", "525.60.13", "12.0")
    assert facts["gpus"][0] == {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_total_gib": 80.0,
                                "compute_capability": "8.0", "bf16": True, "peak_tflops_bf16": 312.0, "source": "nvml"}
    problem_codes = codes(facts)
    assert ("torch_cpu_only" if torch.version.cuda is None else "cuda_unavailable") in problem_codes


FAKE_SMI = """#!/bin/sh
echo "$*" >> "{log}"
cat "{summary}"
"""


def test_nvidia_smi_is_run_once_when_nvml_is_missing(monkeypatch, tmp_path):
    log = tmp_path / "spawns.log"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(log=log, summary=GPU_FIXTURES / "smi_summary_a100_sxm4_80gb_525.txt"))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", "%s%s%s" % (tmp_path, os.pathsep, os.environ["PATH"]))
    monkeypatch.setitem(sys.modules, "pynvml", None)
    facts = gather_facts()
    assert log.read_text().splitlines() == [""]  # one run, plain nvidia-smi without arguments
    assert (facts["driver_source"], facts["driver_version"], facts["driver_cuda_version"]) == \
        ("nvidia-smi", "525.60.13", "12.0")
    assert len(facts["driver_gpus"]) == 8


def test_v100_precisions_from_the_gpu_torch_reports(monkeypatch):
    """torch's view of a V100-SXM2-32GB (name, 32494 MiB, compute capability 7.0, as printed on real hosts)."""
    props = types.SimpleNamespace(name="Tesla V100-SXM2-32GB", total_memory=32494 * (1 << 20), major=7, minor=0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    facts = gather_facts()
    assert facts["best_device"] == "cuda"
    assert facts["gpus"] == [{"index": 0, "name": "Tesla V100-SXM2-32GB", "memory_total_gib": 31.73,
                              "compute_capability": "7.0", "bf16": False, "peak_tflops_bf16": None,
                              "source": "torch"}]
    assert facts["precisions"]["fp16"] is None and facts["precisions"]["fp32"] is None
    assert "8.0" in facts["precisions"]["bf16"] and "7.0" in facts["precisions"]["bf16"]
    assert facts["precisions"]["tf32"]


# --- what the probe keeps of torch between probes ----------------------------------------------------------------

def _probe_command(cache: "os.PathLike", *args: str, **env: str) -> dict:
    """The runner's real ``probe`` command in a fresh interpreter, with its cache under ``cache``."""
    environ = dict(os.environ, XDG_CACHE_HOME=str(cache), **env)
    proc = subprocess.run([sys.executable, "-m", "remote_runner", "probe", *args], capture_output=True, text=True,
                          env=environ, timeout=120, check=True)
    return json.loads(proc.stdout)


def test_the_probe_command_keeps_torchs_facts_and_reads_them_again_only_while_nothing_they_depend_on_changed(
        tmp_path):
    """The first probe imports torch and keeps its facts (one file); the next reads them (an entry doctored to
    say torch 9.9 is what it reports); a change in what the import would find (here CUDA_VISIBLE_DEVICES) or
    --fresh imports torch again; a damaged entry is read as a miss and replaced."""
    first = _probe_command(tmp_path)
    assert first["torch"]["version"] == torch.__version__
    (entry,) = (tmp_path / "ddpgui-runner").iterdir()
    assert (entry.stat().st_mode & 0o777) == 0o600
    kept = json.loads(entry.read_text())
    assert kept["facts"] == first["torch"]
    kept["facts"]["version"] = "9.9.0"
    entry.write_text(json.dumps(kept))
    assert _probe_command(tmp_path)["torch"]["version"] == "9.9.0"
    assert _probe_command(tmp_path, "--fresh")["torch"]["version"] == torch.__version__
    other = _probe_command(tmp_path, CUDA_VISIBLE_DEVICES="")
    assert other["torch"]["version"] == torch.__version__
    assert len(list((tmp_path / "ddpgui-runner").iterdir())) == 2
    entry.write_text("{not json")
    again = _probe_command(tmp_path)
    assert again["torch"] == first["torch"]
    assert json.loads(entry.read_text())["facts"] == first["torch"]


def test_a_torch_that_fails_to_import_is_never_kept(tmp_path):
    """A torch that raises on import is reported as broken every time and leaves nothing in the cache, so the
    probe after the user's fix sees the fix."""
    shadow = tmp_path / "shadow" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise OSError('libtorch_cpu.so: cannot open shared object file')\n")
    cache = tmp_path / "cache"
    for _ in range(2):
        report = _probe_command(cache, PYTHONPATH=str(shadow.parent))
        assert report["torch"] is None
        assert [p["code"] for p in report["problems"] if p["code"].startswith("torch")] == ["torch_broken"]
    assert not (cache / "ddpgui-runner").exists() or not list((cache / "ddpgui-runner").iterdir())


@pytest.mark.parametrize("version, said", [
    ("2.0.1+cu118", "PyTorch 2.0.1+cu118 is too old (the runner needs 2.1 or newer)"),
    ("1.13.1", "PyTorch 1.13.1 is too old (the runner needs 2.1 or newer)"),
    ("2.1.0", None), ("2.13.0+cpu", None), ("10.0.0", None), ("nightly", None), (None, None),
])
def test_one_rule_says_which_torch_is_too_old(version, said):
    """The probe, launch and hosts test refuse an old torch with the words of capabilities.torch_too_old."""
    from remote_runner.capabilities import torch_too_old

    assert torch_too_old(version) == said


def test_the_same_runner_at_two_paths_shares_one_cache_entry(tmp_path):
    """The runner is a zipapp copied into each run root under its own path: the cache is keyed on the probe's
    code, not on where it lies, so the second copy reads the first one's entry (a path in the key gave every
    run root its own entry, and each its own 3 s import of torch)."""
    from ddpgui.core.targets.zipapp import build_bytes

    runner = build_bytes()
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "runner.pyz").write_bytes(runner)
    environ = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))

    def probe_with(copy: str) -> dict:
        proc = subprocess.run([sys.executable, str(tmp_path / copy / "runner.pyz"), "probe"], capture_output=True,
                              text=True, env=environ, timeout=120, check=True)
        return json.loads(proc.stdout)

    first = probe_with("one")
    (entry,) = (tmp_path / "cache" / "ddpgui-runner").iterdir()
    kept = json.loads(entry.read_text())
    kept["facts"]["version"] = "9.9.0"  # what the second copy reports shows it read the entry
    entry.write_text(json.dumps(kept))
    assert first["torch"]["version"] == torch.__version__
    assert probe_with("two")["torch"]["version"] == "9.9.0"
    assert len(list((tmp_path / "cache" / "ddpgui-runner").iterdir())) == 1
