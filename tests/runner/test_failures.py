"""Failure diagnosis on real failure text: captured from torchrun and torch on this machine
(tests/fixtures/failures), produced by running the failing code here, or, for GPU-only
failures, quoted from public issues (each names its source)."""
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
import torch.distributed as dist

from remote_runner.capabilities import BackendError, precision_problem, resolve_backend
from remote_runner.config import ConfigError, config_from_dict
from remote_runner.failures import ATTEMPT_MARKER, Diagnosis, classify, diagnose, needs_gpu_hint
from remote_runner.spools import STDERR, STDOUT
from remote_runner.status import write_status

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "failures"

# torch >= 2.1 wording; pytorch/pytorch issue #16417, comment of 2024-03-13.
OOM_NEW = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity "
           "of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB memory "
           "in use. Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch "
           "but unallocated. If reserved but unallocated memory is large try setting "
           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
           "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
# torch < 2.1 wording; the title of pytorch/pytorch issue #16417.
OOM_OLD = ("RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total capacity; "
           "8.57 MiB already allocated; 9.28 GiB free; 4.68 MiB cached)")
# torch 2.1 misspelled "capacity"; wxian3/NeuroLens issue #2.
OOM_2_1 = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 55.57 GiB. GPU 0 has a total capacty "
           "of 12.00 GiB of which 9.02 GiB is free. Of the allocated memory 984.52 MiB is allocated by PyTorch, and "
           "463.48 MiB is reserved by PyTorch but unallocated.")

# A CUDA build of PyTorch on a host without the NVIDIA driver; yeongjoonJu/Occlusion-Robust-3D-Face-CFR-GAN issue #3.
NO_DRIVER = ('  File "/home/sct/gen1/lib/python3.7/site-packages/torch/cuda/__init__.py", line 217, in _lazy_init\n'
             "    torch._C._cuda_init()\n"
             "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
             "installed a driver from http://www.nvidia.com/Download/index.aspx")


def fixture(name):
    return (FIXTURES / name).read_text()


def formatted(exc):
    """The traceback Python prints for ``exc`` (raised for real in the test)."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


# --- captured from torchrun on this machine ----------------------------------------------------------------------

def test_rank_that_raised_in_torchrun_output():
    found = classify(1, fixture("torchrun_rank1_valueerror.stderr.txt"), [])
    assert (found.kind, found.rank) == ("rank_died", 1)
    assert found.message == "Rank 1 raised ValueError: loss became NaN at step 17."


def test_the_cause_wins_when_torchrun_names_the_rank_that_only_saw_it():
    log = fixture("torchrun_root_cause_is_the_echo.stderr.txt")
    assert re.search(r"Root Cause.*?rank\s*: 0", log, re.DOTALL)  # torchrun blames the echo
    found = classify(1, log, [])
    assert (found.kind, found.rank) == ("rank_died", 1)
    assert found.message == "Rank 1 raised ValueError: loss became NaN at step 17."


def test_a_lost_peer_with_no_other_cause_stays_the_root_ranks():
    log = fixture("torchrun_root_cause_is_the_echo.stderr.txt").replace(
        "[rank1]: ValueError: loss became NaN at step 17", "[rank1]: killed")
    found = classify(1, log, [])
    assert (found.kind, found.rank) == ("rank_died", 0) and "Connection closed by peer" in found.message


def test_rank_killed_by_sigkill_in_torchrun_output():
    found = classify(1, fixture("torchrun_rank1_sigkill.stderr.txt"), [])
    assert (found.kind, found.rank) == ("killed", 1)
    assert "Rank 1" in found.message and "SIGKILL" in found.message
    assert "dmesg" in found.hint and "RAM" in found.hint


def test_rendezvous_port_in_use():
    found = classify(1, fixture("torchrun_port_in_use.stderr.txt"), [])
    assert found.kind == "addr_in_use"
    assert found.message == "The rendezvous port 29612 is already in use on the host."


def test_port_in_use_of_an_earlier_attempt_is_not_the_last_attempts_failure():
    log = "\n".join([ATTEMPT_MARKER + " (port 29612)", fixture("torchrun_port_in_use.stderr.txt"),
                     ATTEMPT_MARKER + " (port 29733)", fixture("torchrun_rank1_valueerror.stderr.txt")])
    assert classify(1, log, []).kind == "rank_died"


def test_no_cxx_compiler_for_inductor():
    found = classify(1, fixture("inductor_no_cxx_compiler.stderr.txt"), [])
    assert found.kind == "compile_no_compiler"
    assert "InvalidCxxCompiler" in found.message and "build-essential" in found.hint


# --- produced by running the failing code here --------------------------------------------------------------------

def test_torch_missing():
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", "import torch"], stderr=subprocess.PIPE,
                          text=True)
    found = classify(proc.returncode, proc.stderr, [])
    assert found.kind == "torch_missing"
    assert "No module named 'torch'" in found.message and "pip install torch" in found.hint


def test_a_missing_torchvision_is_not_torch_missing():
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", "import torchvision"], stderr=subprocess.PIPE,
                          text=True)
    assert classify(proc.returncode, proc.stderr, []).kind == "unknown"


def test_disk_full(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this OS")
    with pytest.raises(OSError) as raised:
        with open("/dev/full", "w") as fh:
            fh.write("checkpoint")
    assert raised.value.errno == errno.ENOSPC
    found = classify(1, "[rank0]: " + formatted(raised.value).replace("\n", "\n[rank0]: "), [])
    assert (found.kind, found.rank) == ("disk_full", 0)
    assert "df -h" in found.hint


def test_config_error():
    with pytest.raises(ConfigError) as raised:
        config_from_dict({"batch_size": 0})
    found = classify(1, formatted(raised.value), [])
    assert found.kind == "config_error"
    assert "'batch_size'" in found.message and "must be at least 1" in found.message


@pytest.mark.skipif(dist.is_nccl_available(), reason="this torch has NCCL; the failure needs a build without it")
@pytest.mark.filterwarnings("ignore:Attempted to get default timeout for nccl backend")
def test_nccl_on_a_torch_without_nccl(tmp_path):
    with pytest.raises(RuntimeError) as raised:
        dist.init_process_group("nccl", init_method="file://%s" % (tmp_path / "store"), rank=0, world_size=1)
    found = classify(1, formatted(raised.value), [])
    assert found.kind == "needs_gpu"
    assert "doesn't have NCCL" in found.message and "gloo" in found.hint


# A GPU script (nanoGPT's defaults: backend nccl, device cuda) on this CPU host and its CPU-only PyTorch.
@pytest.mark.parametrize("name, rank, said", [
    ("script_nccl_on_cpu_host.stderr.txt", 1, "RuntimeError: Distributed package doesn't have NCCL built in"),
    ("script_cuda_set_device_on_cpu_build.stderr.txt", 0,
     "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'"),
    ("script_module_cuda_on_cpu_build.stderr.txt", None, "AssertionError: Torch not compiled with CUDA enabled"),
])
def test_a_gpu_script_on_a_cpu_host(name, rank, said):
    found = classify(1, fixture(name), [])
    assert (found.kind, found.rank) == ("needs_gpu", rank)
    assert "needs an NVIDIA GPU" in found.message and said in found.message, found.message
    assert "host with an NVIDIA GPU" in found.hint and "device cpu and backend gloo" in found.hint


def test_the_gpu_hint_says_what_the_host_has():
    cpu_build = classify(1, fixture("script_module_cuda_on_cpu_build.stderr.txt"), []).message
    no_driver = classify(1, NO_DRIVER, []).message
    assert needs_gpu_hint(no_driver, gpus=[]).startswith("this host has no NVIDIA GPU (its probe finds no NVIDIA driver")
    a100 = [{"name": "NVIDIA A100-SXM4-80GB"}]
    assert needs_gpu_hint(cpu_build, gpus=a100).startswith(
        "the host has 1 GPU (NVIDIA A100-SXM4-80GB) but this PyTorch is a CPU-only build: install a CUDA build")
    assert "CUDA_VISIBLE_DEVICES" in needs_gpu_hint(no_driver, gpus=a100 * 2)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host has an NVIDIA driver")
def test_diagnose_of_a_gpu_script_asks_the_probe_what_the_host_has(tmp_path):
    (tmp_path / STDERR).write_text(fixture("script_nccl_on_cpu_host.stderr.txt"))
    found = diagnose(str(tmp_path), 1)
    assert found.kind == "needs_gpu"
    assert found.hint.startswith("this host has no NVIDIA GPU (its probe finds no NVIDIA driver or GPU): run it on a "
                                 "host with an NVIDIA GPU, or make it run on the CPU: device cpu and backend gloo")


def test_nccl_requested_without_cuda_from_the_runner():
    with pytest.raises(BackendError) as raised:
        resolve_backend("nccl", cuda=False)
    found = classify(1, "[rank0]: " + formatted(raised.value).replace("\n", "\n[rank0]: "), [])
    assert (found.kind, found.rank) == ("nccl_unavailable", 0)
    assert found.hint == raised.value.hint


def test_xccl_requested_without_xpu_from_the_runner():
    with pytest.raises(BackendError) as raised:
        resolve_backend("xccl", cuda=False, xpu=False)
    found = classify(1, formatted(raised.value), [])
    assert found.kind == "backend_unavailable" and found.hint == raised.value.hint


def test_our_own_precision_refusal():
    message = precision_problem("bf16", "cuda", (7, 0))
    found = classify(1, formatted(RuntimeError(message)), [])
    assert found.kind == "precision_unsupported" and "7.0" in found.message


def test_transformers_bf16_on_a_host_without_a_gpu_says_to_pass_use_cpu():
    import torch
    from transformers import TrainingArguments  # the real library's refusal, raised here

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU: Transformers takes --bf16 True without --use_cpu")
    with pytest.raises(ValueError) as raised:
        TrainingArguments(output_dir="out", bf16=True, use_cpu=False)
    found = classify(1, formatted(raised.value), [])
    assert found.kind == "precision_unsupported" and "--use_cpu True" in found.hint, found


def test_exit_status_of_a_script_without_a_traceback():
    proc = subprocess.run([sys.executable, "-c", "import sys; print('loading'); "
                           "sys.exit('fatal: the dataset directory /data/imagenet does not exist')"],
                          capture_output=True, text=True)
    found = classify(proc.returncode, proc.stderr + proc.stdout, [])
    assert found.kind == "unknown"
    assert found.message == "The run failed (exit code 1): fatal: the dataset directory /data/imagenet does not exist"


# --- GPU-only failures, quoted from public issues -----------------------------------------------------------------

@pytest.mark.parametrize("text, details", [
    (OOM_NEW, "tried to allocate 22.00 MiB on GPU 0, which has 23.65 GiB in all and 11.06 MiB free"),
    (OOM_OLD, "tried to allocate 12.50 MiB on GPU 0, which has 10.92 GiB in all and 9.28 GiB free"),
    (OOM_2_1, "tried to allocate 55.57 GiB on GPU 0, which has 12.00 GiB in all and 9.02 GiB free"),
])
def test_cuda_out_of_memory(text, details):
    found = classify(1, text, [])
    assert found.kind == "cuda_oom" and details in found.message
    assert "batch size" in found.hint and "bf16" in found.hint and "gradient checkpointing" in found.hint


def test_cuda_out_of_memory_names_the_rank_from_torchrun_output():
    log = fixture("torchrun_rank1_valueerror.stderr.txt").replace("ValueError: loss became NaN at step 17", OOM_NEW)
    found = classify(1, log, [])
    assert (found.kind, found.rank) == ("cuda_oom", 1) and found.message.startswith("Rank 1 ran out of GPU memory")


@pytest.mark.parametrize("text", [
    # xformers on a V100; microsoft/TRELLIS.2 issue #23.
    "`cutlassF-pt` is not supported because:\n    bf16 is only supported on A100+ GPUs",
    # vLLM on a T4; substratusai/vllm-docker issue #37.
    "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has "
    "compute capability 7.5. You can use float16 instead by explicitly setting the`dtype` flag in CLI, for example: "
    "--dtype=half.",
    # Triton's ptxas on a V100; facebookresearch/chameleon issue #39.
    "ptxas /tmp/compile-ptx-src-ac38de, line 523; error   : Feature '.bf16' requires .target sm_80 or higher",
])
def test_bf16_on_a_gpu_before_ampere(text):
    found = classify(1, text, [])
    assert found.kind == "precision_unsupported" and "fp16" in found.hint


def test_cuda_build_without_a_driver():
    found = classify(1, NO_DRIVER, [])
    assert found.kind == "needs_gpu" and "Found no NVIDIA driver on your system" in found.message


def test_more_processes_than_gpus():
    # torch.distributed.launch --nproc_per_node=2 on a host with one GPU; cfzd/Ultra-Fast-Lane-Detection issue #193.
    text = ('Traceback (most recent call last):\n  File "train.py", line 107, in <module>\n'
            "    torch.cuda.set_device(args.local_rank)\n"
            '  File "/home/firdanis/anaconda3/envs/lane-det/lib/python3.7/site-packages/torch/cuda/__init__.py", '
            "line 261, in set_device\n    torch._C._cuda_setDevice(device)\n"
            "RuntimeError: CUDA error: invalid device ordinal\n")
    found = classify(1, text, [])
    assert found.kind == "gpu_ordinal" and "RuntimeError: CUDA error: invalid device ordinal" in found.message
    assert "one process per GPU" in found.hint and "LOCAL_RANK" in found.hint


def test_cuda_driver_older_than_the_torch_build():
    # torch 2.11 (cu130) on a CUDA 12.8 driver; awslabs keys_values README.
    text = ("RuntimeError: The NVIDIA driver on your system is too old (found version 12080). Please update your GPU "
            "driver by downloading and installing a new version from the URL: "
            "http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to install a "
            "PyTorch version that has been compiled with your version of the CUDA driver.")
    found = classify(1, text, [])
    assert found.kind == "cuda_driver_too_old" and "12080" in found.message


def test_torch_too_old():
    # What torch 1.x answers to torch.compile (Python's wording for a missing module attribute).
    found = classify(1, "AttributeError: module 'torch' has no attribute 'compile'", [])
    assert found.kind == "torch_too_old" and "2.1" in found.hint


# --- exit codes and signals ---------------------------------------------------------------------------------------

def test_sigkill_without_any_output():
    found = classify(-signal.SIGKILL, "", [])
    assert found.kind == "killed" and "out-of-memory killer" in found.message


def test_sigterm_that_was_asked_for_and_one_that_was_not():
    assert classify(-signal.SIGTERM, "", [], stop_requested=True) == \
        Diagnosis("stopped", "The run was stopped on request.", "")
    outside = classify(-signal.SIGTERM, "", [])
    assert outside.kind == "stopped" and "outside the app" in outside.message


def test_another_signal():
    found = classify(-signal.SIGSEGV, "", [])
    assert found.kind == "killed" and "SIGSEGV" in found.message


def test_nothing_to_go_on():
    assert classify(1, "", []).message == "The run failed (exit code 1), with no error in its logs."


# --- the run directory --------------------------------------------------------------------------------------------

def write_error(run_dir, rank, exc_type, message, **extra):
    """The record train.py writes for a rank that raised (without "t", which diagnose then takes from the file)."""
    record = dict({"rank": rank, "type": exc_type, "message": message,
                   "traceback": "Traceback (most recent call last):\n"}, **extra)
    (run_dir / ("error-rank%d.json" % rank)).write_text(json.dumps(record))


def test_diagnose_prefers_the_ranks_error_file(tmp_path):
    (tmp_path / STDERR).write_text(fixture("torchrun_rank1_valueerror.stderr.txt"))
    write_error(tmp_path, 1, "ValueError", "loss became NaN at step 17")
    found = diagnose(str(tmp_path), 1)
    assert (found.kind, found.rank) == ("rank_died", 1)
    assert found.message == "Rank 1 raised ValueError: loss became NaN at step 17."


def test_diagnose_finds_a_known_error_in_an_error_file(tmp_path):
    (tmp_path / STDOUT).write_text("step 10 loss 2.31\n")
    message = OOM_NEW.split(": ", 1)[1]
    write_error(tmp_path, 3, "torch.OutOfMemoryError", message)
    found = diagnose(str(tmp_path), 1)
    assert (found.kind, found.rank) == ("cuda_oom", 3) and "22.00 MiB" in found.message


def test_diagnose_names_the_first_rank_that_failed(tmp_path):
    write_error(tmp_path, 0, "RuntimeError", "Connection closed by peer [127.0.0.1]:14736")
    write_error(tmp_path, 2, "ValueError", "bad shape")
    os.utime(tmp_path / "error-rank0.json", (2_000_000_000, 2_000_000_000))
    os.utime(tmp_path / "error-rank2.json", (1_900_000_000, 1_900_000_000))
    assert diagnose(str(tmp_path), 1).rank == 2


def test_the_runners_own_hint_wins(tmp_path):
    with pytest.raises(BackendError) as raised:
        resolve_backend("nccl", cuda=True, nccl=False)
    write_error(tmp_path, 0, "BackendError", str(raised.value), hint=raised.value.hint)
    found = diagnose(str(tmp_path), 1)
    assert (found.kind, found.rank, found.hint) == ("nccl_unavailable", 0, raised.value.hint)
    write_error(tmp_path, 0, "RuntimeError", "dataset shard 3 is empty", hint="upload the dataset again")
    assert diagnose(str(tmp_path), 1) == Diagnosis("rank_died", "Rank 0 raised RuntimeError: dataset shard 3 is "
                                                   "empty.", "upload the dataset again", 0)


def test_diagnose_reads_only_the_tail_and_survives_broken_files(tmp_path):
    # Older than the tail: an error that would win over the port if it were read.
    (tmp_path / STDERR).write_text("ModuleNotFoundError: No module named 'torch'\n" + "x" * 100_000 + "\n" +
                                   fixture("torchrun_port_in_use.stderr.txt"))
    (tmp_path / "error-rank0.json").write_text('{"rank": 0, "type": "Val')  # cut short by a kill
    assert diagnose(str(tmp_path), 1).kind == "addr_in_use"


def test_diagnose_sees_a_stop_that_was_asked_for(tmp_path):
    write_status(str(tmp_path), state="stopped")
    assert diagnose(str(tmp_path), -signal.SIGTERM).message == "The run was stopped on request."


def test_diagnose_of_an_empty_run_directory(tmp_path):
    assert diagnose(str(tmp_path), None).message == "The run failed (no exit code), with no error in its logs."


# --- live: the real torchrun and torch.compile --------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("poll", ["0.1", "2"])  # at 2 s both ranks end within one poll and torchrun blames rank 0
def test_live_torchrun_rank_failure(tmp_path, poll):
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--monitor-interval", poll,
                           "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
                           str(FIXTURES / "fail_rank1.py")],
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=240)
    found = classify(proc.returncode, proc.stderr, [])
    assert (found.kind, found.rank) == ("rank_died", 1)
    assert found.message == "Rank 1 raised ValueError: loss became NaN at step 17."


@pytest.mark.slow
def test_live_torch_compile_without_a_compiler(tmp_path):
    script = tmp_path / "compiled.py"
    script.write_text("import torch\n\n@torch.compile\ndef f(x):\n    return (x * 2).sin() + 1\n\nf(torch.randn(8))\n")
    env = dict(os.environ, CC="/nonexistent/gcc", CXX="/nonexistent/g++",
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor-cache"))
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0 and shutil.which("/nonexistent/g++") is None
    assert classify(proc.returncode, proc.stderr, []).kind == "compile_no_compiler"
