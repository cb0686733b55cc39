"""Decisions about what a device can do, as pure functions of what the probe saw.

They take plain values (device kind, compute capability, GPU name) so that the
same decision is made by the runner before training, by the probe's report and
by the app when it disables a choice, and so that they are tested on captured
output from real GPUs.
"""
from typing import Optional

#: The oldest torch the runner supports.
MIN_TORCH = (2, 1)


def torch_too_old(version: Optional[str]) -> Optional[str]:
    """"PyTorch X is too old (the runner needs 2.1 or newer)" for a torch version (``2.0.1+cu118``) below
    :data:`MIN_TORCH`; None for a newer one or one that does not start with numbers (torchrun tells then).
    The probe, ``launch`` and ``hosts test`` all refuse with these words."""
    import re

    match = re.match(r"(\d+)\.(\d+)", version or "")
    if match is None or (int(match.group(1)), int(match.group(2))) >= MIN_TORCH:
        return None
    return "PyTorch %s is too old (the runner needs %d.%d or newer)" % ((version,) + MIN_TORCH)

#: Dense (no sparsity) peak TFLOP/s per GPU from the vendors' data sheets: bf16 and fp16
#: tensor-core math, tf32, and plain fp32.  None where the GPU has no such mode (no bf16
#: before Ampere).  Matched by substring of the CUDA device name, most specific first.
#: Unknown GPUs give None (MFU is then null).
PEAK_TFLOPS = (
    # name substring, bf16, fp16, tf32, fp32
    ("H200", 989.0, 989.0, 494.0, 67.0),
    ("H100 PCIe", 756.0, 756.0, 378.0, 51.0),
    ("H100", 989.0, 989.0, 494.0, 67.0),
    ("GH200", 989.0, 989.0, 494.0, 67.0),
    ("B200", 2250.0, 2250.0, 1100.0, 80.0),
    ("A100", 312.0, 312.0, 156.0, 19.5),
    ("A10G", 70.0, 70.0, 35.0, 31.2),
    ("A10", 125.0, 125.0, 62.5, 31.2),
    ("L40S", 362.0, 362.0, 183.0, 91.6),
    ("L4", 121.0, 121.0, 60.0, 30.3),
    ("RTX 4090", 165.2, 165.2, 82.6, 82.6),
    ("RTX 3090", 71.0, 71.0, 35.6, 35.6),
    ("RTX A6000", 154.8, 154.8, 77.4, 38.7),
    ("V100", None, 125.0, None, 15.7),
    ("T4", None, 65.0, None, 8.1),
)


def peak_tflops(gpu_name: Optional[str], precision: str) -> Optional[float]:
    """The GPU's peak TFLOP/s for ``precision``, or None when unknown or the GPU has no such mode."""
    if not gpu_name:
        return None
    column = {"bf16": 1, "fp16": 2, "tf32": 3}.get(precision, 4)
    for row in PEAK_TFLOPS:
        if row[0] in gpu_name:
            return row[column]
    return None


def precision_problem(precision: str, device_kind: str, capability: Optional[tuple[int, int]] = None,
                      cpu_fp16_autocast: bool = True) -> Optional[str]:
    """Why ``precision`` cannot run on this device, in plain words; None when it can.

    ``device_kind`` is "cuda", "cpu", "xpu" or "mps"; ``capability`` is the CUDA
    compute capability (major, minor) for "cuda".
    """
    if precision == "fp32":
        return None
    if device_kind == "cuda":
        if capability is None:
            return None
        major, minor = capability
        if precision in ("bf16", "tf32") and major < 8:
            return ("%s needs compute capability 8.0 (Ampere or newer); this GPU is %d.%d. Use fp16 or fp32."
                    % (precision, major, minor))
        if precision == "fp16" and (major, minor) < (5, 3):
            return "fp16 needs compute capability 5.3 or newer; this GPU is %d.%d. Use fp32." % (major, minor)
        return None
    if device_kind == "cpu":
        if precision == "tf32":
            return "tf32 is a tensor-core mode of NVIDIA GPUs (Ampere or newer); on a CPU use fp32 or bf16."
        if precision == "fp16" and not cpu_fp16_autocast:
            return "this PyTorch has no fp16 autocast on CPU; use bf16 or fp32."
        return None
    if device_kind == "mps" and precision in ("bf16", "tf32"):
        return "%s is not supported on Apple MPS; use fp16 or fp32." % precision
    if device_kind == "xpu" and precision == "tf32":
        return "tf32 is an NVIDIA tensor-core mode; on XPU use bf16, fp16 or fp32."
    return None


def bf16_supported(capability: Optional[tuple[int, int]]) -> bool:
    """Whether a CUDA GPU of this compute capability runs bf16 natively (Ampere, 8.0, or newer)."""
    return capability is not None and capability[0] >= 8


class BackendError(ValueError):
    """A backend that cannot run here; ``hint`` says what to do."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


def resolve_backend(requested: str, cuda: bool, xpu: bool = False, nccl: bool = True) -> str:
    """The process-group backend for ``requested`` ("auto", "nccl", "gloo", "xccl")."""
    if requested == "auto":
        if cuda and nccl:
            return "nccl"
        if xpu:
            return "xccl"
        return "gloo"
    if requested == "nccl":
        if not cuda:
            raise BackendError("nccl was requested but CUDA is not available on this host",
                               "choose backend gloo (or auto) to run on the CPU, or use a host with NVIDIA GPUs")
        if not nccl:
            raise BackendError("nccl was requested but this PyTorch build has no NCCL",
                               "install a CUDA build of PyTorch with NCCL, or choose backend gloo")
    if requested == "xccl" and not xpu:
        raise BackendError("xccl was requested but no Intel XPU is available on this host",
                           "choose backend gloo (or auto), or use a host with Intel GPUs")
    return requested


def resolve_device(requested: str, cuda: bool, xpu: bool = False, mps: bool = False) -> str:
    """The device kind the ranks train on: the requested one, or the best one present."""
    if requested != "auto":
        return requested
    if cuda:
        return "cuda"
    if xpu:
        return "xpu"
    if mps:
        return "mps"
    return "cpu"
