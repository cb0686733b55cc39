"""Where a rank runs: its device, backend and process group; precision checks, autocast, device sync and memory."""
import contextlib
import os
import resource
import sys
import warnings
from dataclasses import dataclass
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist

from remote_runner.capabilities import precision_problem, resolve_backend, resolve_device
from remote_runner.config import RunConfig

GIB = float(2 ** 30)


class PrecisionError(RuntimeError):
    """A precision this device cannot run; the message says why in plain words."""


class DeviceError(RuntimeError):
    """A device that this host does not have."""


@dataclass
class Env:
    """Where this process runs: its ranks, device and process-group backend."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str
    gpu_name: Optional[str] = None
    capability: Optional[tuple[int, int]] = None

    @property
    def master(self) -> bool:
        """Global rank 0: the only process that writes metrics and events."""
        return self.rank == 0

    @property
    def kind(self) -> str:
        return self.device.type


def setup(cfg: RunConfig) -> Env:
    """Pick the device and backend, bind this process to its GPU and join the process group."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    present = {
        "cpu": True,
        "cuda": torch.cuda.is_available(),
        "xpu": hasattr(torch, "xpu") and torch.xpu.is_available(),
        "mps": torch.backends.mps.is_available(),
    }
    kind = resolve_device(cfg.device, present["cuda"], present["xpu"], present["mps"])
    if not present[kind]:
        raise DeviceError("device %s was requested but this host's PyTorch sees none" % kind)
    backend = resolve_backend(cfg.backend, cuda=kind == "cuda", xpu=kind == "xpu", nccl=dist.is_nccl_available())
    device, gpu_name, capability = torch.device(kind), None, None
    if kind in ("cuda", "xpu"):
        device = torch.device(kind, local_rank)
        # before init_process_group: NCCL/XCCL bind this process to the GPU that is current now
        getattr(torch, kind).set_device(device)
    if kind == "cuda":
        gpu_name, capability = torch.cuda.get_device_name(device), torch.cuda.get_device_capability(device)
        # cuDNN uses TF32 convolutions by default: fp32 has to switch them off to measure fp32
        torch.backends.cuda.matmul.allow_tf32 = cfg.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = cfg.precision == "tf32"
    # the timeout bounds every collective, so a dead peer cannot hang the others forever
    dist.init_process_group(backend, timeout=timedelta(seconds=cfg.rank_failure_timeout_s))
    return Env(dist.get_rank(), local_rank, dist.get_world_size(), device, backend, gpu_name, capability)


def check_precision(precision: str, env: Env) -> None:
    """Raise :class:`PrecisionError` with the plain-words reason when the device cannot run ``precision``."""
    problem = precision_problem(precision, env.kind, env.capability,
                                cpu_fp16_autocast=env.kind != "cpu" or cpu_fp16_autocast())
    if problem:
        raise PrecisionError(problem)


def cpu_fp16_autocast() -> bool:
    """Whether this PyTorch really computes in fp16 under CPU autocast (older builds warn and fall back)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autocast("cpu", dtype=torch.float16):
            return torch.mm(torch.ones(1, 1), torch.ones(1, 1)).dtype == torch.float16


def compile_mode(name: str) -> Optional[str]:
    """torch.compile's ``mode`` for a config value: "default" is torch's None."""
    return None if name == "default" else name


def autocast(precision: str, kind: str) -> contextlib.AbstractContextManager:
    """Mixed precision for fp16/bf16; fp32 and tf32 run without autocast."""
    if precision in ("fp16", "bf16"):
        return torch.autocast(kind, dtype=torch.float16 if precision == "fp16" else torch.bfloat16)
    return contextlib.nullcontext()


def grad_scaler(kind: str, enabled: bool):
    """A GradScaler for ``kind``; disabled, its methods pass through unchanged."""
    if hasattr(torch.amp, "GradScaler"):  # torch >= 2.3, with CPU support
        return torch.amp.GradScaler(kind, enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work; CPU work is never queued."""
    if device.type != "cpu":
        getattr(torch, device.type).synchronize()


def peak_memory_gib(device: torch.device) -> float:
    """Peak memory of this process: allocated CUDA memory, else the peak resident set size."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / GIB
    # ru_maxrss is in KiB on Linux and in bytes on macOS
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (GIB if sys.platform == "darwin" else GIB / 1024)

