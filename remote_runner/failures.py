"""Why a run died, as a message and a hint.

:func:`diagnose` reads the run directory (the tails of stderr.log and
stdout.log, the ``error-rank<R>.json`` files the training worker writes, and
status.json) and hands the text to :func:`classify`, a pure function tested on
captured output.  The first known error pattern wins (in the order of
``_PATTERNS``); then a rank that raised or was killed; then the exit code.
"""
import glob
import json
import os
import re
import signal
from dataclasses import dataclass
from typing import Optional

from . import capabilities
from .capabilities import MIN_TORCH
from .fsutil import NO_SPACE, free_bytes
from .spools import STDERR, STDOUT
from .status import read_status

#: How much of the end of each log is read.
TAIL_BYTES = 65536
#: A line the supervisor may write to stderr.log before each torchrun attempt: only
#: the text after the last one is classified, so an earlier attempt's error is not
#: taken for the last one's.
ATTEMPT_MARKER = "==> ddpgui: starting torchrun"


@dataclass
class Diagnosis:
    """What happened (``kind``), in plain words (``message``), and what to do (``hint``)."""

    kind: str
    message: str
    hint: str
    rank: Optional[int] = None
    path: Optional[str] = None  # the file a disk_full failure could not write, when its message names one


def diagnose(run_dir: str, exit_code: Optional[int]) -> Diagnosis:
    """Diagnose the run in ``run_dir`` that ended with ``exit_code`` (negative: killed by that signal)."""
    log_text = _tail(os.path.join(run_dir, STDERR)) + "\n" + _tail(os.path.join(run_dir, STDOUT))
    errors = []
    for path in glob.glob(os.path.join(run_dir, "error-rank*.json")):
        try:
            with open(path, encoding="utf-8") as fh:
                record = json.load(fh)
        except (OSError, ValueError):  # being written right now, or cut short by a kill
            continue
        if isinstance(record, dict):
            record.setdefault("t", os.path.getmtime(path))  # the first rank to fail comes first
            errors.append(record)
    stop_requested = (read_status(run_dir) or {}).get("state") == "stopped"
    found = classify(exit_code, log_text, errors, stop_requested=stop_requested)
    free = free_bytes(run_dir)
    if found.kind not in ("disk_full", "stopped") and free is not None and free < _FULL_BELOW:
        # A run that failed on a full disk often could not even write its traceback to stderr.log.
        found = Diagnosis("disk_full", "", DISK_FULL_HINT, found.rank)
    if found.kind == "disk_full":  # the free space is measured now, on the disk that filled up
        found.message = disk_full_text(found.path or run_dir,
                                       "rank %d" % found.rank if found.rank is not None else "the run")
    if found.kind == "needs_gpu":  # what the host has decides what to do
        found.hint = needs_gpu_hint(found.message)
    return found


DISK_FULL_HINT = ("free space on the host (df -h shows which disk is full) or put runs on a larger disk; checkpoints, "
                   "~/.cache and /tmp/torchinductor_* can be large")
#: Free bytes below which a failed run's disk counts as full whatever its logs say.
_FULL_BELOW = 64 << 10
#: A full disk (or quota) in the last line of a runner traceback (the client reads it: targets.base).
NO_SPACE_TEXT = re.compile(r"No space left on device|\[Errno 28\]|ENOSPC|\[Errno 122\]|Disk quota exceeded")
NO_SPACE_PATH = re.compile(r"(?:No space left on device|Disk quota exceeded): '([^']+)'")


def disk_full_text(path: str, who: str) -> str:
    """"The host's disk is full (PATH, N bytes free): WHO could not write there." """
    free = free_bytes(path)
    return "The host's disk is full (%s, %s bytes free): %s could not write there." % (
        path, "unknown" if free is None else free, who)


def os_error_text(exc: OSError) -> tuple[str, str]:
    """(message, hint) for an OSError the runner itself met (a full disk, a directory removed under it)."""
    if exc.errno in NO_SPACE:
        return disk_full_text(exc.filename or os.getcwd(), "the runner"), DISK_FULL_HINT
    where = " (%s)" % exc.filename if exc.filename else ""
    return ("the runner could not use a file on the host: %s%s" % (exc.strerror or exc, where),
            "check that the run directory exists and is writable by the SSH user")


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - TAIL_BYTES))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _backend_errors() -> list[tuple[str, str]]:
    """(message, hint) of every BackendError the runner raises, taken from capabilities itself."""
    found = []
    for requested, cuda, xpu, nccl in (("nccl", False, False, True), ("nccl", True, False, False),
                                       ("xccl", False, False, True)):
        try:
            capabilities.resolve_backend(requested, cuda=cuda, xpu=xpu, nccl=nccl)
        except capabilities.BackendError as exc:
            found.append((str(exc), exc.hint))
    return found


_BACKEND_ERRORS = _backend_errors()


def _any_of(texts: list[str]) -> str:
    """A regular expression matching any of ``texts`` literally (nothing when there are none)."""
    return "|".join(re.escape(t) for t in texts) or r"(?!)"


_OOM_HINT = ("lower the batch size, use bf16 or fp16 precision, or turn on gradient checkpointing; when the message "
             "shows much reserved but unallocated memory, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps")
_COMPILER_HINT = ("install a compiler (sudo apt install build-essential on Debian/Ubuntu, sudo dnf install gcc gcc-c++ "
                  "on Fedora/RHEL) or point CC/CXX at one, or run with compile off")

#: What torch says when code asks for CUDA or NCCL that this host or this PyTorch does not have (a script
#: written for GPUs, run on a CPU host): a CPU-only build says the first three, a CUDA build the others.
_CPU_BUILD_NEEDS_GPU = (r"Torch not compiled with CUDA enabled|module 'torch\._C' has no attribute '_cuda_\w+'|"
                        r"Distributed package doesn't have NCCL built in")
_NEEDS_GPU = re.compile(r"(?<![\"'])(?:" + _CPU_BUILD_NEEDS_GPU + r"|Found no NVIDIA driver on your system|"
                        r"No CUDA GPUs are available|ProcessGroupNCCL is only supported with GPUs, no GPUs found)")
# (not in the quoted text of a ``raise`` line of the traceback: the exception's own line is the one to show)
_NEEDS_GPU_HINT = ("run it on a host with an NVIDIA GPU, or make it run on the CPU: device cpu and backend gloo "
                   "(for your own script, in its code or arguments, e.g. nanoGPT's --device=cpu --backend=gloo)")


def needs_gpu_hint(message: str, gpus: Optional[list[dict]] = None) -> str:
    """What to do about a run that needed an NVIDIA GPU (``message``: its needs_gpu diagnosis).

    ``gpus`` are the NVIDIA GPUs the host has, as the probe finds them (NVML or nvidia-smi);
    found here when not given.
    """
    if gpus is None:
        from .probe import driver_facts

        driver = driver_facts()
        gpus = driver.get("gpus") or []
    else:
        driver = {}
    if not gpus:
        return "this host has no NVIDIA GPU (its probe finds no NVIDIA driver or GPU): " + _NEEDS_GPU_HINT
    names = "%d GPU%s (%s)" % (len(gpus), "" if len(gpus) == 1 else "s", gpus[0].get("name") or "NVIDIA")
    if re.search(_CPU_BUILD_NEEDS_GPU, message):
        from .probe import wheel_hint

        return "the host has %s but this PyTorch is a CPU-only build: %s" % (names, wheel_hint(driver.get("cuda_version")))
    return ("the host has %s but the run sees none: check CUDA_VISIBLE_DEVICES in the host profile's environment "
            "and that the SSH user may open /dev/nvidia* (nvidia-smi as that user)" % names)


#: (kind, pattern, hint) in the order they are tried; _matched() words the message.
_PATTERNS = (
    ("config_error", re.compile(r"config field '[^']+': .*"),
     "fix that field of the run configuration and launch again"),
    ("torch_missing", re.compile(r"No module named '?torch'?(?![\w.])"),
     "install PyTorch into the host's Python (pip install torch) or choose a Python that has it in the host profile"),
    ("torch_too_old", re.compile(r"PyTorch \S+ is too old.*|module 'torch' has no attribute 'compile'|"
                                 r"No module named '?torch\.distributed\.run'?"),
     "upgrade PyTorch on the host to %d.%d or newer: pip install -U torch" % MIN_TORCH),
    ("needs_gpu", _NEEDS_GPU, _NEEDS_GPU_HINT),
    ("gpu_ordinal", re.compile(r"(?<![\"'])(?:CUDA error: )?invalid device ordinal"),
     "start at most one process per GPU (processes per node no more than the GPUs the host's probe shows, or "
     "than CUDA_VISIBLE_DEVICES lists), and index GPUs by LOCAL_RANK, not RANK, on multi-node runs"),
    ("nccl_unavailable", re.compile(_any_of([m for m, _ in _BACKEND_ERRORS if m.startswith("nccl")])),
     "choose backend gloo (or auto) to run without NCCL, or use a host with NVIDIA GPUs and a CUDA build of PyTorch"),
    ("backend_unavailable", re.compile(_any_of([m for m, _ in _BACKEND_ERRORS if not m.startswith("nccl")])),
     "choose backend auto"),
    ("cuda_driver_too_old", re.compile(r"NVIDIA driver on your system is too old[^\n]*|CUDA driver version is "
                                       r"insufficient for CUDA runtime version"),
     "install a PyTorch built for the CUDA version nvidia-smi shows (pip install torch --index-url "
     "https://download.pytorch.org/whl/cuXY), or upgrade the NVIDIA driver"),
    # Transformers' TrainingArguments with --bf16 True on a host without a GPU
    ("precision_unsupported", re.compile(r"Your setup doesn't support bf16/gpu[^\n]*"),
     "Transformers runs bf16 on a CPU only when told to: add --use_cpu True to the script's arguments, or choose "
     "fp32"),
    ("precision_unsupported", re.compile(
        r"(?:bf16|tf32|fp16) needs compute capability [^\n]*|(?:bf16|tf32) is not supported on Apple MPS[^\n]*|"
        r"tf32 is (?:a|an NVIDIA) tensor-core mode[^\n]*|bf16 is only supported on A100\+ GPUs|"
        r"Bfloat16 is only supported on GPUs with compute capability of at least 8\.0[^\n]*|"
        r"Feature '\.bf16' requires \.target sm_80 or higher|bfloat16 is not supported[^\n]*|"
        r"not implemented for 'BFloat16'|has no fp16 autocast on CPU[^\n]*", re.IGNORECASE),
     "choose a precision the device runs: fp16 or fp32 on GPUs older than Ampere (compute capability 8.0), "
     "fp32 or bf16 on CPUs"),
    ("cuda_oom", re.compile(r"OutOfMemoryError[^\n]*|CUDA out of memory[^\n]*|(?:MPS backend|XPU) out of memory[^\n]*"),
     _OOM_HINT),
    ("disk_full", re.compile(r"No space left on device|\[Errno 28\]|ENOSPC"), DISK_FULL_HINT),
    ("compile_no_compiler", re.compile(r"InvalidCxxCompiler[^\n]*|Invalid C\+\+ compiler[^\n]*|No working C\+\+ "
                                       r"compiler found[^\n]*|Failed to find C compiler[^\n]*|compiler not found[^\n]*",
                                       re.IGNORECASE), _COMPILER_HINT),
    ("addr_in_use", re.compile(r"EADDRINUSE[^\n]*|address already in use[^\n]*|\[Errno 98\][^\n]*", re.IGNORECASE),
     "another program holds that port: launch again (a new rendezvous port is picked), or for multi-node runs "
     "choose a free port in the rendezvous endpoint"),
)

#: What a rank says when another rank (on another node, or its node itself) vanished: a consequence, not a cause.
_PEER_LOST = re.compile(r"Connection (?:reset|closed) by peer|Broken pipe|Timed out waiting \d+ ?ms for (?:recv|send)|"
                        r"remote process exited or there was a network error|ncclRemoteError|"
                        r"Watchdog caught collective operation timeout")

_RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:\s?", re.MULTILINE)
_EXCEPTION_LINE = re.compile(r"^(?:\[(?:rank|default)(\d+)\]:\s*)?((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*"
                             r"(?:Error|Exception|Interrupt|Exit|Failure))(?::\s*(.*))?$", re.MULTILINE)
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.{0,400}?rank\s*:\s*(\d+).{0,400}?"
                         r"exitcode\s*:\s*(-?\d+)", re.DOTALL)


def classify(exit_code: Optional[int], log_text: str, errors: list[dict], stop_requested: bool = False) -> Diagnosis:
    """The diagnosis for a run that ended with ``exit_code`` after writing ``log_text``.

    ``errors`` are the ranks' error records ({"rank", "type", "message",
    "traceback", and optionally "t" and "hint"}: a hint the runner gave its own
    error wins); ``stop_requested`` says the user asked the run to stop.
    """
    if stop_requested:
        return Diagnosis("stopped", "The run was stopped on request.", "")
    if ATTEMPT_MARKER in log_text:
        log_text = log_text.rsplit(ATTEMPT_MARKER, 1)[1]
    errors = sorted((e for e in errors if isinstance(e, dict)), key=_failure_order)
    root = _ROOT_CAUSE.findall(log_text)
    root_rank, root_exit = (int(root[-1][0]), int(root[-1][1])) if root else (None, None)

    texts = [(e, "%s: %s\n%s" % (e.get("type"), e.get("message"), e.get("traceback") or "")) for e in errors]
    for kind, pattern, hint in _PATTERNS:
        for error, text in texts + [({}, log_text)]:
            match = pattern.search(text)
            if match:
                line_rank, line = _line_at(text, match.start())
                rank = _int(error.get("rank"))
                rank = next((r for r in (rank, line_rank, root_rank) if r is not None), None)
                found = _matched(kind, line, hint, rank)
                if error.get("hint"):
                    found.hint = error["hint"]
                return found

    killed = exit_code == -signal.SIGKILL or root_exit == -signal.SIGKILL
    consequences = bool(errors) and all(_PEER_LOST.search(text) for _, text in texts)
    if consequences and not killed:
        first = errors[0]
        cause = _PEER_LOST.search(texts[0][1]).group(0)
        return Diagnosis("peer_lost", "Rank %s lost its connection to another rank (%s): that rank, or its node, "
                         "failed first." % (first.get("rank"), cause),
                         "find the rank that failed first: on a multi-node run look at the other nodes (ddpgui show "
                         "RUN); if none failed, check the network between the nodes (NCCL_SOCKET_IFNAME or "
                         "GLOO_SOCKET_IFNAME in the host profile's environment)", _int(first.get("rank")))
    if errors and not consequences:
        first = next(e for e, text in texts if not _PEER_LOST.search(text))  # the cause, not its echo
        found = _rank_died(_int(first.get("rank")), first.get("type"), first.get("message"))
        found.hint = first.get("hint") or found.hint
        return found
    if killed:
        who = "Rank %d was" % root_rank if root_exit == -signal.SIGKILL else "The run was"
        return Diagnosis("killed", "%s killed with SIGKILL, most often by the kernel's out-of-memory killer when "
                         "the host runs out of RAM." % who,
                         "check dmesg for \"Out of memory: Killed process\"; lower the batch size, num_workers or "
                         "the number of processes, or use a host with more RAM", root_rank)
    if root_rank is not None and root_exit not in (None, -signal.SIGTERM):
        exc_type, exc_message = _exception_of(log_text, root_rank)
        if exc_message and _PEER_LOST.search(exc_message):
            # torchrun names the first failure it polled: when both ranks end within one poll that can be the rank
            # whose collective saw the other go. The rank that raised something else is the cause.
            cause = _first_cause(log_text, root_rank)
            if cause:
                return _rank_died(*cause)
        return _rank_died(root_rank, exc_type, exc_message, root_exit)
    if exit_code == -signal.SIGTERM or root_exit == -signal.SIGTERM:
        return Diagnosis("stopped", "The run was ended by SIGTERM from outside the app (a host shutdown, a job "
                         "scheduler, or someone running kill).",
                         "run it again; if a scheduler ends it, ask for a longer time limit", root_rank)
    if exit_code is not None and exit_code < 0:
        return Diagnosis("killed", "The run was killed by signal %d (%s)." % (-exit_code, _signal_name(-exit_code)),
                         "look at the end of stderr.log; a SIGSEGV or SIGBUS points to a crash in a native library "
                         "or a full /dev/shm")
    line = _last_error_line(log_text)
    ending = "exit code %s" % exit_code if exit_code is not None else "no exit code"
    what = ": " + line if line else ", with no error in its logs."
    return Diagnosis("unknown", "The run failed (%s)%s" % (ending, what),
                     "read stderr.log in the run directory for the full output")


def _failure_order(error: dict) -> tuple[float, int]:
    """Earliest first; ranks in order when the times are equal or unknown."""
    rank = _int(error.get("rank"))
    return float(error.get("t") or 0), rank if rank is not None else 1 << 30


def _int(value: object) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"


def _line_at(text: str, at: int) -> tuple[Optional[int], str]:
    """(rank of its "[rank3]: " prefix or None, the line without the prefix) of the line holding position ``at``."""
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    line = text[start:] if end < 0 else text[start:end]
    prefix = _RANK_PREFIX.match(line)
    if prefix:
        return int(prefix.group(1)), line[prefix.end():].strip()
    return None, line.strip()


def _exception_of(log_text: str, rank: Optional[int]) -> tuple[Optional[str], Optional[str]]:
    """(type, message) of the last exception line of ``rank`` (or of any line when the rank prints none)."""
    found = [(m.group(1), m.group(2), m.group(3)) for m in _EXCEPTION_LINE.finditer(log_text)
             if not m.group(2).endswith("ChildFailedError")]
    mine = [f for f in found if f[0] is not None and int(f[0]) == rank] or [f for f in found if f[0] is None]
    if not mine:
        return None, None
    return mine[-1][1].rsplit(".", 1)[-1], (mine[-1][2] or "").strip() or None


def _first_cause(log_text: str, besides: int) -> Optional[tuple[int, str, Optional[str]]]:
    """(rank, type, message) of the first exception line of a rank other than ``besides`` that is not a lost peer."""
    for m in _EXCEPTION_LINE.finditer(log_text):
        if m.group(1) is not None and int(m.group(1)) != besides and not m.group(2).endswith("ChildFailedError") \
                and not _PEER_LOST.search(m.group(3) or ""):
            return int(m.group(1)), m.group(2).rsplit(".", 1)[-1], (m.group(3) or "").strip() or None
    return None


def _rank_died(rank: Optional[int], exc_type: Optional[str], exc_message: Optional[str],
               exit_code: Optional[int] = None) -> Diagnosis:
    who = "Rank %d" % rank if rank is not None else "A rank"
    if exc_type:
        what = "%s raised %s: %s" % (who, exc_type, exc_message) if exc_message else "%s raised %s" % (who, exc_type)
    else:
        what = "%s exited with code %s" % (who, exit_code)
    return Diagnosis("rank_died", what + ".",
                     "fix the error shown in that rank's traceback (stderr.log), then run again", rank)


def _matched(kind: str, line: str, hint: str, rank: Optional[int]) -> Diagnosis:
    where = "rank %d" % rank if rank is not None else "the run"
    found = _shorten(line)
    if kind == "config_error":
        message = "The run configuration was refused (%s)." % found
    elif kind == "torch_missing":
        message = "PyTorch is not installed in the Python the run uses (%s)." % found
    elif kind == "torch_too_old":
        message = "The PyTorch on the host is too old for this run (%s)." % found
    elif kind in ("nccl_unavailable", "backend_unavailable"):
        message = "The process-group backend cannot run here (%s)." % found
        hint = next((h for m, h in _BACKEND_ERRORS if m in found), hint)
    elif kind == "gpu_ordinal":
        message = "%s asked for a GPU that the host does not have (%s)." % (where[0].upper() + where[1:], found)
    elif kind == "needs_gpu":
        message = "%s needs an NVIDIA GPU with CUDA, which it did not find (%s)." % (where[0].upper() + where[1:], found)
    elif kind == "cuda_driver_too_old":
        message = "The NVIDIA driver is older than the CUDA this PyTorch was built for (%s)." % found
    elif kind == "precision_unsupported":
        message = "The chosen precision is not supported by this device (%s)." % found
    elif kind == "cuda_oom":
        message = "%s ran out of GPU memory%s." % (where[0].upper() + where[1:], _oom_details(line))
    elif kind == "disk_full":
        path = NO_SPACE_PATH.search(line)
        message = "The host's disk is full%s: %s could not write there (No space left on device)." % (
            " (%s)" % path.group(1) if path else "", where)
        return Diagnosis(kind, message, hint, rank, path.group(1) if path else None)
    elif kind == "compile_no_compiler":
        message = "torch.compile found no working C/C++ compiler on the host (%s)." % found
    else:
        port = re.search(r"port:? (\d+)", found)
        message = ("The rendezvous port %s is already in use on the host." % port.group(1) if port
                   else "A network port the run needs is already in use (%s)." % found)
    return Diagnosis(kind, message, hint, rank)


def _oom_details(line: str) -> str:
    """The sizes in torch's message: ": it tried to allocate 2.00 GiB on GPU 0, which has 23.65 GiB in all and ..."."""
    size = r"([\d.]+ [KMGT]?i?B)"
    tried = re.search(r"Tried to allocate " + size, line)
    # torch >= 2.1: "GPU 0 has a total capacity of 23.65 GiB of which 11.06 MiB is free" (2.1 spelled it "capacty");
    # older: "(GPU 0; 10.92 GiB total capacity; ...; 9.28 GiB free; ...)".
    gpu = (re.search(r"GPU (\d+) has a total capac\w* of " + size + " of which " + size + " is free", line)
           or re.search(r"GPU (\d+); " + size + r" total capac\w*;.*?" + size + " free", line))
    if not tried:
        return " (%s)" % _shorten(line)
    details = ": it tried to allocate %s" % tried.group(1)
    if gpu:
        details += " on GPU %s, which has %s in all and %s free" % gpu.groups()
    return details


def _shorten(text: str, limit: int = 200) -> str:
    text = text.rstrip(". ")
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def _last_error_line(log_text: str) -> Optional[str]:
    """The last line of the log that looks like an error, without its rank prefix."""
    for line in reversed(log_text.splitlines()):
        line = _RANK_PREFIX.sub("", line).strip()
        if re.search(r"error|exception|fatal|failed|traceback|killed", line, re.IGNORECASE) and \
                "To enable traceback see" not in line:
            return _shorten(line)
    return None
