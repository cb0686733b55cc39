"""The Slurm options of a cluster host profile (kind ``slurm``): partition, account, limits, GPUs, extra lines.

A cluster profile is an SSH profile to the cluster's login node; these options say how its jobs are
submitted (``sbatch``).  Everything here is validated so that it can be written into a job script as
it is: names are ``[A-Za-z0-9_.-]`` only, lines are one line each, and ``#SBATCH`` lines never set
what ddpgui sets itself.  Time limits are Slurm's formats (:func:`time_limit_seconds`).
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import HostError, shown

#: How a job asks for its GPUs: ``--gres=gpu:N`` or ``--gpus-per-node=N``.
GPU_FLAGS = ("gres", "gpus-per-node")

_NAME = r"[A-Za-z0-9_.][A-Za-z0-9_.-]*"
_ONE_NAME = re.compile(f"^{_NAME}$")
_NAME_LIST = re.compile(f"^{_NAME}(?:,{_NAME})*$")
_MEM = re.compile(r"^\d{1,12}[KMGTkmgt]?$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_OPTION = re.compile(r"^(--[A-Za-z0-9][A-Za-z0-9-]*|-[A-Za-z])")
_SBATCH = "#SBATCH"

TIME_FORMATS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. 30, 2:00:00 or 1-12:00:00), or UNLIMITED"
_TIME = [  # (pattern, seconds per group, upper bound of each group after the first)
    (re.compile(r"^(\d{1,9})$"), (60,)),
    (re.compile(r"^(\d{1,9}):(\d{1,2})$"), (60, 1)),
    (re.compile(r"^(\d{1,9}):(\d{1,2}):(\d{1,2})$"), (3600, 60, 1)),
    (re.compile(r"^(\d{1,9})-(\d{1,2})$"), (86400, 3600)),
    (re.compile(r"^(\d{1,9})-(\d{1,2}):(\d{1,2})$"), (86400, 3600, 60)),
    (re.compile(r"^(\d{1,9})-(\d{1,2}):(\d{1,2}):(\d{1,2})$"), (86400, 3600, 60, 1)),
]
_UPPER = {3600: 24, 60: 60, 1: 60}  # hours after days, minutes and seconds after a larger unit

#: ``#SBATCH`` options with a field of their own (the option → the field).
_OWN_FIELD = {"--partition": "partition", "-p": "partition", "--account": "account", "-A": "account",
              "--qos": "qos", "-q": "qos", "--time": "time_limit", "-t": "time_limit",
              "--cpus-per-task": "cpus_per_task", "-c": "cpus_per_task", "--mem": "mem"}
#: ``#SBATCH`` options ddpgui sets itself, or that would break how it submits and follows a job.
_DDPGUI_SETS = {"--nodes": "the launch's node count", "-N": "the launch's node count",
                "--ntasks": "one task per node", "-n": "one task per node",
                "--ntasks-per-node": "one task per node", "--output": "the job's log file", "-o": "the job's log file",
                "--error": "the job's log file", "-e": "the job's log file", "--chdir": "the run directory",
                "-D": "the run directory", "--array": "one job per run", "-a": "one job per run",
                "--wrap": "the job script", "--wait": "sbatch returning at once", "-W": "sbatch returning at once",
                "--test-only": "a job that really is submitted"}


def time_limit_seconds(text: str) -> int | None:
    """A Slurm time limit in seconds: ``"90"`` (minutes) → 5400, ``"1:30"`` (MM:SS) → 90, ``"01:00:00"`` → 3600,
    ``"2-00"`` (D-HH) → 172800; ``""``, ``UNLIMITED``, ``INFINITE`` (any case) and a zero limit (Slurm's
    "no limit") → None.  Anything else raises :class:`ValueError` saying the accepted formats."""
    text = text.strip()
    if text == "" or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    for pattern, units in _TIME:
        m = pattern.match(text)
        if m:
            values = [int(g) for g in m.groups()]
            if any(v >= _UPPER[unit] for v, unit in list(zip(values, units))[1:]):
                break
            return sum(v * unit for v, unit in zip(values, units)) or None
    raise ValueError(f"{text!r} is not a Slurm time limit: write {TIME_FORMATS}")


def format_time_limit(seconds: int | None) -> str:
    """Seconds as Slurm writes a time limit: 3600 → ``1:00:00``, 172800 → ``2-00:00:00``, None → ``unlimited``."""
    if seconds is None:
        return "unlimited"
    if seconds < 0:
        raise ValueError(f"a time limit cannot be negative, got {seconds}")
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}" if days else f"{hours}:{minutes:02d}:{secs:02d}"


def strip_sbatch(line: str) -> str:
    """An extra sbatch line as stored: surrounding blanks and a leading ``#SBATCH`` removed."""
    line = line.strip()
    return line[len(_SBATCH):].strip() if line.startswith(_SBATCH) else line


@dataclass
class SlurmOptions:
    """How a cluster profile's jobs are submitted; "" / None / 0 leave a setting to Slurm's defaults."""

    partition: str
    account: str = ""
    qos: str = ""
    time_limit: str = ""
    gpus_per_node: int = 0
    gpu_flag: str = "gres"
    cpus_per_task: int | None = None
    mem: str = ""
    sbatch_lines: list[str] = field(default_factory=list)
    setup_lines: list[str] = field(default_factory=list)
    max_queued_jobs: int = 8

    def __post_init__(self) -> None:
        if isinstance(self.sbatch_lines, list):
            self.sbatch_lines = [strip_sbatch(line) if isinstance(line, str) else line for line in self.sbatch_lines]
        self.validate()

    @property
    def time_limit_s(self) -> int | None:
        """The time limit in seconds; None: the partition's default (or no limit)."""
        return time_limit_seconds(self.time_limit)

    def validate(self) -> None:
        """Raise :class:`HostError` (field ``slurm.<name>``) for the first setting that cannot be used."""
        _check(isinstance(self.partition, str) and self.partition != "", "partition",
               "a Slurm cluster needs a partition to submit to", "e.g. gpu; `sinfo -s` on the login node lists them")
        _check(len(self.partition) <= 200 and bool(_NAME_LIST.match(self.partition)), "partition",
               f"must be a partition name (letters, digits, '_', '.', '-'), or several separated by commas, "
               f"got {shown(self.partition)}", "e.g. gpu or gpu,gpu-long")
        for name in ("account", "qos"):
            value = getattr(self, name)
            _check(isinstance(value, str) and (value == "" or (len(value) <= 200 and bool(_ONE_NAME.match(value)))),
                   name, f"must be one name of letters, digits, '_', '.', '-', or empty for your default, "
                         f"got {shown(value)}")
        _check(isinstance(self.time_limit, str), "time_limit", f"must be text, got {shown(self.time_limit)}")
        try:
            time_limit_seconds(self.time_limit)
        except ValueError:
            raise HostError("slurm.time_limit", f"{shown(self.time_limit)} is not a Slurm time limit",
                            f"write {TIME_FORMATS}; leave it empty for the partition's default") from None
        _check(_is_int(self.gpus_per_node) and self.gpus_per_node >= 0, "gpus_per_node",
               f"must be a whole number >= 0 (0: CPU jobs), got {shown(self.gpus_per_node)}")
        _check(self.gpu_flag in GPU_FLAGS, "gpu_flag",
               f"must be {' or '.join(GPU_FLAGS)}, got {shown(self.gpu_flag)}",
               "gres asks for GPUs with --gres=gpu:N, gpus-per-node with --gpus-per-node=N")
        _check(self.cpus_per_task is None or (_is_int(self.cpus_per_task) and self.cpus_per_task >= 1),
               "cpus_per_task", f"must be a whole number >= 1, or empty for Slurm's default, "
                                f"got {shown(self.cpus_per_task)}")
        _check(isinstance(self.mem, str) and (self.mem == "" or bool(_MEM.match(self.mem))), "mem",
               f"must be a memory size such as 32G, got {shown(self.mem)}",
               "digits with an optional unit K, M, G or T (no unit: megabytes); 0 is all of a node's memory; "
               "empty: the partition's default")
        _check(_is_int(self.max_queued_jobs) and self.max_queued_jobs >= 1, "max_queued_jobs",
               f"must be a whole number >= 1, got {shown(self.max_queued_jobs)}")
        _check(_is_str_list(self.sbatch_lines), "sbatch_lines", "must be a list of lines")
        for line in self.sbatch_lines:
            self._check_sbatch_line(line)
        _check(_is_str_list(self.setup_lines), "setup_lines", "must be a list of lines")
        for line in self.setup_lines:
            _check("\n" not in line and "\r" not in line and "\x00" not in line, "setup_lines",
                   f"each setup line must be one line, got {shown(line)}", "put each command on a line of its own")

    def _check_sbatch_line(self, line: str) -> None:
        _check(not _CONTROL.search(line), "sbatch_lines", f"each #SBATCH line must be one line of text, got "
                                                         f"{shown(line)}", "put each option on a line of its own")
        _check(line.startswith("-"), "sbatch_lines", f"an #SBATCH line must be an sbatch option, got {shown(line)}",
               "e.g. --constraint=a100 or --exclusive (the #SBATCH in front is optional)")
        m = _OPTION.match(line)
        option = m.group(1) if m else line
        if option in _OWN_FIELD:
            raise HostError("slurm.sbatch_lines", f"{shown(line)} sets {option}, which has a field of its own",
                            f"set the profile's {_OWN_FIELD[option]} instead")
        if option in ("--gres", "--gpus-per-node") and self.gpus_per_node:
            raise HostError("slurm.sbatch_lines", f"{shown(line)} asks for GPUs, and so does gpus_per_node "
                                                  f"({self.gpus_per_node})",
                            "leave one of them: gpus_per_node with gpu_flag, or GPUs per node 0 and your own line")
        if option in _DDPGUI_SETS:
            raise HostError("slurm.sbatch_lines", f"{shown(line)} sets {option}, which ddpgui decides "
                                                  f"({_DDPGUI_SETS[option]})", "remove that line")

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: object) -> SlurmOptions:
        """The options from their JSON object; a :class:`HostError` names the field (``slurm.<key>``)."""
        if not isinstance(data, dict):
            raise HostError("slurm", f"must be an object of Slurm options, got {shown(data)}")
        unknown = sorted(set(data) - set(_FIELD_TYPES))
        if unknown:
            raise HostError(f"slurm.{unknown[0]}", "unknown field (this version of ddpgui knows "
                                                   f"{', '.join(_FIELD_TYPES)})")
        if "partition" not in data:
            raise HostError("slurm.partition", "a Slurm cluster needs a partition to submit to")
        for name, value in data.items():
            kind, ok = _FIELD_TYPES[name]
            if not ok(value):
                raise HostError(f"slurm.{name}", f"must be {kind} (got {shown(value)})")
        return cls(**data)


def _check(ok: bool, name: str, message: str, hint: str = "") -> None:
    if not ok:
        raise HostError(f"slurm.{name}", message, hint)


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_str_list(value: object) -> bool:
    return isinstance(value, list) and all(map(_is_str, value))


_FIELD_TYPES: dict[str, tuple[str, Callable[[object], bool]]] = {
    "partition": ("a string", _is_str), "account": ("a string", _is_str), "qos": ("a string", _is_str),
    "time_limit": ("a string", _is_str), "gpus_per_node": ("an integer", _is_int), "gpu_flag": ("a string", _is_str),
    "cpus_per_task": ("an integer or null", lambda v: v is None or _is_int(v)), "mem": ("a string", _is_str),
    "sbatch_lines": ("a list of strings", _is_str_list), "setup_lines": ("a list of strings", _is_str_list),
    "max_queued_jobs": ("an integer", _is_int),
}
