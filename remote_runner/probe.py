"""What a host has for DDP runs, and what stands in its way, in plain words.

:func:`gather_facts` reads the raw facts; every part of it is guarded, so a
part that fails becomes None and an entry in ``probe_errors``.
:func:`find_problems` is a pure function from those facts to problems with a
hint, so it is tested on facts captured from real hosts.  nvidia-smi is spawned
at most once, and only when NVML (nvidia-ml-py) does not load; its plain output
has both the driver version and the newest CUDA the driver supports.
"""
import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import warnings
from typing import Callable, Optional

from . import capabilities
from .config import PRECISIONS
from .fsutil import atomic_write
from .telemetry import Nvml

SCHEMA = 1
MIN_TORCH = capabilities.MIN_TORCH
#: Below this much free disk under the run root, runs may fail to write checkpoints and compile caches.
LOW_DISK_GIB = 5.0
SMI_TIMEOUT_S = 15.0
#: The CUDA versions of PyTorch's wheel indexes (download.pytorch.org/whl/cuXYZ) that hold torch 2.1 or newer.
TORCH_WHEEL_CUDA = ((11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (12, 9), (13, 0))
_GIB = float(1 << 30)
_BUILD_ESSENTIALS = ("install a compiler: sudo apt install build-essential (Debian/Ubuntu) or "
                     "sudo dnf install gcc gcc-c++ (Fedora/RHEL), or point CC/CXX at one")


def probe(run_root: Optional[str] = None, cache_dir: Optional[str] = None) -> dict:
    """The host report printed by ``python -m remote_runner probe``; never raises.

    With ``cache_dir``, torch's facts are kept there between probes (see :func:`_torch_facts_cached`)."""
    try:
        facts = gather_facts(run_root, cache_dir)
    except Exception as exc:  # a bug in a part not guarded on its own: still answer with JSON
        facts = {"schema": SCHEMA, "probe_errors": [{"part": "probe", "error": _describe(exc)}]}
    facts["problems"] = find_problems(facts)
    return facts


def _describe(exc: BaseException) -> str:
    return "%s: %s" % (type(exc).__name__, exc)


class _Parts:
    """Runs each part of the probe; a part that raises gives its default and is listed in ``errors``."""

    def __init__(self) -> None:
        self.errors: list[dict] = []

    def get(self, name: str, read: Callable[[], object], default: object = None) -> object:
        try:
            return read()
        except Exception as exc:
            self.errors.append({"part": name, "error": _describe(exc)})
            return default


def gather_facts(run_root: Optional[str] = None, cache_dir: Optional[str] = None) -> dict:
    """The raw facts of this host (see the module docstring); JSON-able."""
    parts = _Parts()
    disk_path = parts.get("disk_path", lambda: _existing_dir(run_root or os.path.expanduser("~")))
    facts = {
        "schema": SCHEMA,
        "hostname": parts.get("hostname", socket.gethostname),
        "os": parts.get("os", platform.platform),
        "kernel": parts.get("kernel", platform.release),
        "cpu_count": os.cpu_count(),
        "cpu_model": parts.get("cpu_model", _cpu_model),
        "ram_gib": parts.get("ram_gib", _ram_gib),
        "disk_path": disk_path,
        "disk_free_gib": parts.get("disk_free_gib", lambda: round(shutil.disk_usage(disk_path).free / _GIB, 1)),
        "python": {"version": platform.python_version(), "executable": sys.executable},
    }
    driver = parts.get("driver", driver_facts, {}) or {}
    facts["torch"], facts["torch_import_error"], torch_gpus = parts.get(
        "torch", lambda: _torch_facts_cached(parts, driver, cache_dir),
        (None, "could not inspect torch (see probe_errors)", []))
    facts["driver_source"] = driver.get("source")
    facts["driver_version"] = driver.get("driver_version")
    facts["driver_cuda_version"] = driver.get("cuda_version")
    facts["driver_error"] = driver.get("error")
    facts["driver_gpus"] = driver.get("gpus", [])
    facts["gpus"] = [_describe_gpu(g) for g in (torch_gpus or driver.get("gpus", []))]
    facts["best_device"] = _best_device(facts["torch"], facts["gpus"])
    facts["compile"] = parts.get("compile", lambda: _compile_facts(facts["torch"], facts["best_device"]))
    facts["precisions"] = precision_problems(facts)
    facts["probe_errors"] = parts.errors
    return facts


def _existing_dir(path: str) -> str:
    """``path`` or its nearest existing parent (the run root may not exist yet)."""
    path = os.path.abspath(path)
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _cpu_model() -> Optional[str]:
    if os.path.isfile("/proc/cpuinfo"):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                # x86 says "model name"; many ARM kernels only say "Model" or nothing.
                if key.strip() in ("model name", "Model"):
                    return value.strip()
    return platform.processor() or None


def _ram_gib() -> float:
    return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / _GIB, 1)


#: The environment that changes what ``import torch`` finds or which GPUs it sees.
_TORCH_ENV = ("PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "LD_PRELOAD", "CUDA_VISIBLE_DEVICES", "CUDA_HOME",
              "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK", "PYTORCH_ENABLE_MPS_FALLBACK")
#: A cached entry older than this is read again whatever its key says.
TORCH_CACHE_MAX_AGE_S = 24 * 3600.0


def default_cache_dir() -> str:
    """Where the probe keeps what it learned of torch on this host: ``$XDG_CACHE_HOME/ddpgui-runner``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ddpgui-runner")


def _torch_cache_key(driver: dict) -> Optional[str]:
    """What torch's facts depend on, hashed: this interpreter, the torch install it imports (each file's path,
    size and mtime), the probe's own code, the environment that steers the import, the driver and its GPUs, and
    the boot.  None when torch cannot be found (nothing to cache)."""
    import hashlib
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    folder = os.path.dirname(spec.origin)
    stamps = []
    for path in [spec.origin, os.path.join(folder, "version.py")] + sorted(
            os.path.join(folder, name) for name in os.listdir(folder) if name.startswith("_C")):
        try:
            st = os.stat(path)
            stamps.append((path, st.st_size, st.st_mtime_ns, st.st_ino))
        except OSError:
            stamps.append((path, None))
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            boot = fh.read().strip()
    except OSError:
        boot = None
    gpus = [(g.get("index"), g.get("name"), g.get("memory_total_gib")) for g in driver.get("gpus") or []]
    material = repr((SCHEMA, _own_code(), os.path.realpath(sys.executable), sys.version, stamps, boot,
                     [(name, os.environ.get(name)) for name in _TORCH_ENV],
                     driver.get("driver_version"), driver.get("cuda_version"), gpus))
    return hashlib.sha256(material.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _own_code() -> str:
    """This module's code, hashed: the cache key's part for the probe itself.  Its content, not its path: the
    runner is a zipapp named per run root, so a path (or a stat of it, which fails inside a zip) would give
    every run root its own cache entry and make each one's first launch import torch again."""
    import hashlib

    try:
        code = __loader__.get_data(__file__)  # type: ignore[name-defined]  # a plain file or a zipapp member
    except (AttributeError, OSError):
        return __file__
    return hashlib.sha256(code).hexdigest()


def _torch_facts_cached(parts: _Parts, driver: dict, cache_dir: Optional[str]) -> tuple:
    """:func:`_torch_facts`, kept in ``cache_dir`` under a key of all it depends on (:func:`_torch_cache_key`).

    Importing torch is most of a probe's time (3 s of CPU on a small machine, more where CUDA starts), and a
    probe runs before every launch; the answer changes only when one of the key's parts does.  A torch that
    fails to import, or a part that failed, is never cached: the next probe tries again.  An unreadable or
    unwritable cache is only slower."""
    if not cache_dir:
        return _torch_facts(parts)
    import json

    key = parts.get("torch_cache_key", lambda: _torch_cache_key(driver))
    path = os.path.join(cache_dir, "torch-%s.json" % key) if key else None
    if path:
        try:
            if time.time() - os.stat(path).st_mtime < TORCH_CACHE_MAX_AGE_S:
                with open(path, encoding="utf-8") as fh:
                    entry = json.load(fh)
                return entry["facts"], None, entry["gpus"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    errors_before = len(parts.errors)
    facts, error, gpus = _torch_facts(parts)
    if path and facts is not None and error is None and len(parts.errors) == errors_before:
        try:
            os.makedirs(cache_dir, mode=0o700, exist_ok=True)
            atomic_write(path, json.dumps({"facts": facts, "gpus": gpus}).encode("utf-8"))
        except OSError:
            pass
    return facts, error, gpus


def _torch_facts(parts: _Parts) -> tuple[Optional[dict], Optional[str], list[dict]]:
    """(torch facts, import error, GPUs as torch sees them); (None, error, []) when torch does not import."""
    try:
        import torch
    except Exception as exc:  # ImportError, or a broken install (a missing shared library raises OSError)
        return None, _describe(exc), []
    import torch.distributed as dist

    facts: dict[str, object] = {
        "version": torch.__version__,
        "cuda_build": torch.version.cuda,
        "compile_api": hasattr(torch, "compile"),
        "distributed_available": parts.get("torch.distributed", dist.is_available, False),
    }
    with warnings.catch_warnings(record=True) as caught:
        # torch explains a CUDA it cannot use in a warning ("the NVIDIA driver on your system is too old").
        warnings.simplefilter("always")
        facts["cuda_available"] = parts.get("torch.cuda", torch.cuda.is_available, False)
    facts["cuda_warning"] = next((str(w.message) for w in caught if "CUDA" in str(w.message)), None)
    facts["cudnn"] = parts.get("torch.cudnn", torch.backends.cudnn.version) if torch.version.cuda else None
    distributed = bool(facts["distributed_available"])
    facts["nccl"] = {"available": distributed and bool(parts.get("nccl", dist.is_nccl_available, False)),
                     "version": parts.get("nccl.version", lambda: _nccl_version(torch)) if torch.version.cuda else None}
    facts["gloo_available"] = distributed and bool(parts.get("gloo", dist.is_gloo_available, False))
    is_xccl = getattr(dist, "is_xccl_available", None)
    facts["xccl_available"] = bool(is_xccl and distributed and parts.get("xccl", is_xccl, False))
    xpu = getattr(torch, "xpu", None)
    facts["xpu_available"] = bool(xpu is not None and parts.get("torch.xpu", xpu.is_available, False))
    facts["mps_available"] = bool(parts.get("torch.mps", torch.backends.mps.is_available, False))
    facts["cpu_fp16_autocast"] = parts.get("cpu_fp16_autocast", lambda: _cpu_fp16_autocast(torch), False)
    gpus: list[dict] = []
    if facts["cuda_available"]:
        gpus = parts.get("torch.cuda.devices", lambda: _torch_gpus(torch), []) or []
    return facts, None, gpus


def _nccl_version(torch: object) -> str:
    version = torch.cuda.nccl.version()
    return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)


def _cpu_fp16_autocast(torch: object) -> bool:
    """Whether CPU autocast accepts fp16 (older torch warns and disables itself)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ctx = torch.autocast("cpu", dtype=torch.float16)
    return not caught and bool(getattr(ctx, "_enabled", True))


def _torch_gpus(torch: object) -> list[dict]:
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append({"index": index, "name": props.name, "memory_total_gib": round(props.total_memory / _GIB, 2),
                     "capability": (props.major, props.minor), "source": "torch"})
    return gpus


def driver_facts() -> dict:
    """Driver version, its newest CUDA and the GPUs it sees, from NVML or (once) from nvidia-smi."""
    nvml = Nvml.open()
    if nvml is not None:
        try:
            gpus = [{"index": i, "name": nvml.name(i), "memory_total_gib": nvml.memory_total_gib(i),
                     "capability": nvml.compute_capability(i), "source": "nvml"} for i in range(nvml.device_count())]
            return {"source": "nvml", "driver_version": nvml.driver_version(),
                    "cuda_version": nvml.cuda_driver_version(), "gpus": gpus}
        finally:
            nvml.close()
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"source": None, "gpus": []}
    try:
        proc = subprocess.run([smi], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=SMI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"source": "nvidia-smi", "gpus": [], "error": "nvidia-smi did not answer in %.0f s" % SMI_TIMEOUT_S}
    if proc.returncode != 0:
        error = proc.stdout.strip()[-400:] or "exit code %d" % proc.returncode
        return {"source": "nvidia-smi", "gpus": [], "error": error}
    return dict(parse_smi_summary(proc.stdout), source="nvidia-smi")


def parse_smi_summary(text: str) -> dict:
    """Driver version, newest CUDA and GPUs (index, name, memory) from plain ``nvidia-smi`` output.

    Drivers before R610 print ``Driver Version: 535.86.10  CUDA Version: 12.2``;
    R610 and later print ``KMD Version: 610.43.02  CUDA UMD Version: 13.3``.  The
    table truncates long GPU names ("NVIDIA A100-SXM...").  The versions are also
    read from ``nvidia-smi -q`` output, which has no table.
    """
    driver = re.search(r"(?:Driver|KMD) Version\s*:\s*([0-9][0-9.]*)", text)
    cuda = re.search(r"CUDA (?:UMD )?Version\s*:\s*([0-9][0-9.]*)", text)
    gpus: list[dict] = []
    for line in text.splitlines():
        row = re.match(r"\|\s+(\d+)\s+(.+?)\s+(?:On|Off)\s+\|", line)
        if row:
            gpus.append({"index": int(row.group(1)), "name": row.group(2).strip(), "memory_total_gib": None,
                         "capability": None, "source": "nvidia-smi"})
            continue
        memory = re.search(r"(\d+)MiB\s*/\s*(\d+)MiB", line)
        if memory and gpus and gpus[-1]["memory_total_gib"] is None:
            gpus[-1]["memory_total_gib"] = round(int(memory.group(2)) / 1024.0, 2)
    return {"driver_version": driver.group(1) if driver else None, "cuda_version": cuda.group(1) if cuda else None,
            "gpus": gpus}


def _describe_gpu(gpu: dict) -> dict:
    cap = gpu.get("capability")
    bf16 = capabilities.bf16_supported(tuple(cap)) if cap else None
    return {"index": gpu["index"], "name": gpu.get("name"), "memory_total_gib": gpu.get("memory_total_gib"),
            "compute_capability": "%d.%d" % tuple(cap) if cap else None, "bf16": bf16,
            # The table is matched by name; the compute capability decides whether bf16 runs at all.
            "peak_tflops_bf16": None if bf16 is False else capabilities.peak_tflops(gpu.get("name"), "bf16"),
            "source": gpu.get("source")}


def _best_device(torch_facts: Optional[dict], gpus: list[dict]) -> str:
    """The device kind a run would train on here."""
    if not torch_facts:
        return "cpu"
    return capabilities.resolve_device("auto", cuda=bool(torch_facts.get("cuda_available") and gpus),
                                       xpu=bool(torch_facts.get("xpu_available")),
                                       mps=bool(torch_facts.get("mps_available")))


def _find_compiler(env_var: str, names: tuple[str, ...]) -> Optional[str]:
    chosen = os.environ.get(env_var, "").strip()
    if chosen:  # CC may carry a launcher and flags: "ccache gcc -m64"
        words = shlex.split(chosen)
        return shutil.which(words[0]) if words else None
    return next((path for path in map(shutil.which, names) if path), None)


def _compile_facts(torch_facts: Optional[dict], device: str) -> dict:
    """Whether torch.compile can work: Inductor needs a C++ compiler on the CPU, Triton and a C compiler on GPUs."""
    import importlib.util

    facts = {"c_compiler": _find_compiler("CC", ("cc", "gcc", "clang")),
             "cxx_compiler": _find_compiler("CXX", ("c++", "g++", "clang++")),
             "triton": importlib.util.find_spec("triton") is not None}
    if not torch_facts or not torch_facts.get("compile_api"):
        possible = False
    elif device in ("cuda", "xpu"):
        possible = facts["triton"] and facts["c_compiler"] is not None
    elif device == "cpu":
        possible = facts["cxx_compiler"] is not None
    else:  # mps: Inductor emits Metal shaders, no host compiler
        possible = True
    return dict(facts, possible=possible, device=device)


def precision_problems(report: dict) -> dict[str, Optional[str]]:
    """precision -> None when it runs on the best device, else the reason it does not.

    Takes the probe's facts or its JSON report (the app decides its choices from the latter).
    """
    gpus = report.get("gpus") or []
    device = report.get("best_device") or ("cuda" if gpus else "cpu")
    cap = None
    if device == "cuda" and gpus and gpus[0].get("compute_capability"):
        cap = tuple(int(v) for v in str(gpus[0]["compute_capability"]).split(".")[:2])
    cpu_fp16 = bool((report.get("torch") or {}).get("cpu_fp16_autocast", True))
    return {p: capabilities.precision_problem(p, device, cap, cpu_fp16_autocast=cpu_fp16) for p in PRECISIONS}


def _version_tuple(text: Optional[str]) -> Optional[tuple[int, ...]]:
    """(major, minor) of a version such as 2.4.1+cu121 or 12.2; None when it does not start with numbers."""
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def _problem(code: str, message: str, hint: str, severity: str = "error") -> dict:
    return {"code": code, "severity": severity, "message": message, "hint": hint}


def wheel_hint(driver_cuda: Optional[str]) -> str:
    """Which PyTorch wheel to install for a driver that supports CUDA ``driver_cuda`` at most."""
    supported = _version_tuple(driver_cuda)
    if supported is None:
        return "install a CUDA build of PyTorch (pytorch.org gives the command for your driver)"
    fitting = [v for v in TORCH_WHEEL_CUDA if v <= supported]
    if not fitting:
        return ("upgrade the NVIDIA driver: it supports CUDA %s, and PyTorch %d.%d and newer are built for CUDA "
                "%d.%d or newer"
                % ((driver_cuda,) + MIN_TORCH + TORCH_WHEEL_CUDA[0]))
    return ("install a PyTorch built for CUDA %d.%d, which this driver (CUDA %s) runs: pip install torch "
            "--index-url https://download.pytorch.org/whl/cu%d%d" % (fitting[-1] + (driver_cuda,) + fitting[-1]))


def find_problems(facts: dict) -> list[dict]:
    """Problems in plain words, each {code, severity ("error" or "warning"), message, hint}, from gathered facts."""
    problems = [_problem("probe_error", "The probe could not read %s (%s)." % (e.get("part"), e.get("error")),
                         "the rest of the report is still valid; if this persists, report it along with the host's OS",
                         "warning") for e in facts.get("probe_errors") or []]
    torch_facts = facts.get("torch")
    driver_gpus = facts.get("driver_gpus") or []
    driver_cuda = facts.get("driver_cuda_version")
    if "torch" in facts and torch_facts is None:  # no "torch" at all: the probe failed before it got there
        error = facts.get("torch_import_error") or ""
        if re.search(r"No module named '?torch'?(?![\w.])", error) or not error:
            problems.append(_problem("torch_missing", "PyTorch is not installed for %s."
                                     % (facts.get("python") or {}).get("executable", "this Python"),
                                     "pip install torch in that environment, or choose the Python of a venv or "
                                     "conda env that has it in the host profile; on GPU hosts, "
                                     + wheel_hint(driver_cuda)))
        else:
            problems.append(_problem("torch_broken", "PyTorch is installed but fails to import: %s" % error,
                                     "reinstall it: pip install --force-reinstall torch"))
    elif torch_facts is not None:
        problems.extend(_torch_problems(torch_facts, facts, driver_gpus, driver_cuda))
    if facts.get("driver_error"):
        problems.append(_problem("driver_unreachable", "nvidia-smi is installed but fails: %s" % facts["driver_error"],
                                 "the NVIDIA driver may not be loaded: check dmesg, reinstall the driver or reboot"))
    free = facts.get("disk_free_gib")
    if free is not None and free < LOW_DISK_GIB:
        problems.append(_problem("low_disk", "Only %.1f GiB of disk is free under %s." % (free, facts.get("disk_path")),
                                 "free some space or choose a run directory on a larger disk: checkpoints, "
                                 "logs and torch.compile caches need several GiB"))
    names = sorted({g.get("name") for g in facts.get("gpus") or driver_gpus if g.get("name")})
    if len(names) > 1:
        problems.append(_problem("mixed_gpus", "This host has GPUs of different models: %s." % ", ".join(names),
                                 "DDP runs at the pace of the slowest GPU; choose GPUs of one model "
                                 "(CUDA_VISIBLE_DEVICES) for clean benchmarks", "warning"))
    return problems


def _torch_problems(torch_facts: dict, facts: dict, driver_gpus: list[dict], driver_cuda: Optional[str]) -> list[dict]:
    problems = []
    version = torch_facts.get("version")
    too_old = capabilities.torch_too_old(version)
    if too_old:
        problems.append(_problem("torch_too_old", too_old + ".",
                                 "upgrade it: pip install -U torch (on GPU hosts, " + wheel_hint(driver_cuda) + ")"))
    cuda_build = torch_facts.get("cuda_build")
    built, supported = _version_tuple(cuda_build), _version_tuple(driver_cuda)
    if built and supported and built > supported:
        fatal = built[0] > supported[0]
        problems.append(_problem(
            "cuda_driver_too_old",
            "This PyTorch is built for CUDA %s but the NVIDIA driver (%s) supports CUDA %s at most%s."
            % (cuda_build, facts.get("driver_version") or "version unknown", driver_cuda,
               "" if fatal else ", so kernels compiled at run time (torch.compile, Triton) may fail to load"),
            wheel_hint(driver_cuda) + ("" if wheel_hint(driver_cuda).startswith("upgrade") else
                                        ", or upgrade the NVIDIA driver to one for CUDA %s" % cuda_build),
            "error" if fatal else "warning"))
    if driver_gpus and not torch_facts.get("cuda_available"):
        if not cuda_build:
            problems.append(_problem("torch_cpu_only",
                                     "The driver sees %d NVIDIA GPU(s) but this PyTorch (%s) is a CPU-only build, "
                                     "so runs would use the CPU." % (len(driver_gpus), version),
                                     wheel_hint(driver_cuda)))
        else:
            why = torch_facts.get("cuda_warning") or "torch.cuda.is_available() is False"
            problems.append(_problem("cuda_unavailable",
                                     "The driver sees %d NVIDIA GPU(s) but PyTorch (CUDA %s) cannot use them: %s"
                                     % (len(driver_gpus), cuda_build, why),
                                     "check that CUDA_VISIBLE_DEVICES is not empty, that this user may open "
                                     "/dev/nvidia*, and that the driver supports CUDA %s" % cuda_build))
    if not torch_facts.get("distributed_available"):
        problems.append(_problem("distributed_missing", "This PyTorch was built without torch.distributed.",
                                 "install an official PyTorch build; DDP needs torch.distributed"))
    elif cuda_build and not (torch_facts.get("nccl") or {}).get("available"):
        problems.append(_problem("nccl_missing", "This CUDA build of PyTorch has no NCCL, so multi-GPU runs "
                                 "cannot use the nccl backend.",
                                 "install an official Linux CUDA build of PyTorch (it bundles NCCL), or run with "
                                 "backend gloo (much slower between GPUs)"))
    compile_facts = facts.get("compile") or {}
    device = compile_facts.get("device")
    if torch_facts.get("compile_api") and not compile_facts.get("possible"):
        if device in ("cuda", "xpu") and not compile_facts.get("triton"):
            problems.append(_problem("no_triton", "torch.compile on the GPU needs Triton, which is not installed.",
                                     "pip install triton (the version that matches PyTorch %s; the default Linux "
                                     "CUDA wheels bring it along)" % version))
        if device in ("cuda", "xpu") and not compile_facts.get("c_compiler"):
            problems.append(_problem("no_compiler", "torch.compile on the GPU needs a C compiler (Triton builds its "
                                     "launcher with it) and none was found.", _BUILD_ESSENTIALS))
        if device == "cpu" and not compile_facts.get("cxx_compiler"):
            problems.append(_problem("no_compiler", "torch.compile on the CPU needs a C++ compiler and none was found.",
                                     _BUILD_ESSENTIALS))
    return problems
