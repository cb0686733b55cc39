"""The run configuration: one dataclass, validated before anything starts.

The client writes it as ``config.json`` in the run directory; the supervisor and
every rank read it back with :func:`load_config`.  An unknown key or a value of
the wrong type is refused with an error that names the field.
"""
import dataclasses
import json
import os
import re
import typing
from dataclasses import dataclass, field
from typing import Optional

SCHEMA_VERSION = 1

WORKLOADS = ("linear", "mlp", "transformer", "cnn")
MODES = ("train", "inference", "script")
SCHEDULERS = ("none", "slurm")
BACKENDS = ("auto", "nccl", "gloo", "xccl")
DEVICES = ("auto", "cpu", "cuda", "xpu", "mps")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
INFERENCE_PRECISIONS = ("fp32", "fp16", "bf16", "int8")
OPTIMIZERS = ("sgd", "adam", "adamw")
#: A built-in workload's size: "small" takes seconds on a CPU, "large" keeps one GPU busy; "auto" is large on a
#: GPU, small elsewhere (remote_runner.workloads.resolve_model_size).
MODEL_SIZES = ("auto", "small", "large")
#: The run settings a user's script can be given, in its framework's words or the user's mapping.
SCRIPT_SETTINGS = ("compile", "precision", "batch_size")
_ENDPOINT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):\d{1,5}$")
#: An environment variable name as POSIX shells accept it (``NCCL_DEBUG``, ``_X1``): the one rule for
#: ``launch --env``, ``hosts --node-env``, a host profile's env, sweeps, the app's forms and config.json.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ConfigError(ValueError):
    """A config that must not start: ``field`` names the offending key."""

    def __init__(self, field_name: str, message: str):
        super().__init__("config field %r: %s" % (field_name, message))
        self.field = field_name


def env_problem(name: object, value: object = "") -> Optional[str]:
    """Why ``name=value`` cannot be an environment variable (None when it can)."""
    if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
        return ("%r is not an environment variable name (environment variable names are letters, digits and '_', "
                "not starting with a digit, e.g. NCCL_DEBUG)" % (name,))
    if not isinstance(value, str):
        return "the value of %s must be text, got %r" % (name, value)
    if "\0" in value:
        return "the value of %s holds a NUL character" % name
    return None


def check_env(env: object, field_name: str = "env") -> None:
    """Raise ConfigError(field_name) naming the first bad variable of ``env`` (a mapping of name to text)."""
    if not isinstance(env, dict):
        raise ConfigError(field_name, "must map environment variable names to text values, got %r" % (env,))
    for name, value in env.items():
        problem = env_problem(name, value)
        if problem:
            raise ConfigError(field_name, problem)


@dataclass
class ScriptConfig:
    """The user's own training script ("script" mode)."""

    dir: str = ""
    entry: str = "train.py"
    args: list[str] = field(default_factory=list)
    metric_regex: Optional[str] = None
    #: The series that is the run's loss (e.g. "val_loss"); None: the first loss-like series the script gives.
    loss_series: Optional[str] = None
    #: What code ran: {"git_commit", "git_dirty" (sha256 of the uncommitted changes, or None), "content_sha256"}.
    fingerprint: Optional[dict[str, Optional[str]]] = None
    #: The folder on the client the script was taken from (``dir`` is where the host runs it: an upload).
    source: Optional[str] = None
    #: Named arguments (a sweep's ``--arg`` axes and fixed ones): ``{"--lr": "3e-4"}`` is passed as ``--lr=3e-4``.
    options: dict[str, str] = field(default_factory=dict)
    #: The framework the client recognised in the entry file (transformers, accelerate, lightning-cli, nanogpt),
    #: None for another script; ``mapping`` names where the settings' words came from when a ddpgui.toml gave them.
    framework: Optional[str] = None
    #: Which of the run's compile, precision and batch_size settings the script was given (in its own words:
    #: ``passed_args`` and ``passed_env``); the others are the script's own business.
    applied: list[str] = field(default_factory=list)
    passed_args: list[str] = field(default_factory=list)
    passed_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.loss_series is not None and (not isinstance(self.loss_series, str) or not self.loss_series.strip()):
            raise ConfigError("script.loss_series", "must name a series, got %r" % (self.loss_series,))
        if not self.entry or os.path.isabs(self.entry) or ".." in self.entry.split("/"):
            raise ConfigError("script.entry", "must be a relative path inside the script directory, got %r" % self.entry)
        if self.metric_regex is not None:
            try:
                re.compile(self.metric_regex)
            except re.error as exc:
                raise ConfigError("script.metric_regex", "not a valid regular expression: %s" % exc) from None
        for name in self.options:
            if not name.startswith("-") or "=" in name or not name.strip("-") or any(c.isspace() for c in name):
                raise ConfigError("script.options", "an argument's name starts with '-' and holds no '=' or space "
                                  "(e.g. --lr), got %r" % (name,))
        for name in self.applied:
            if name not in SCRIPT_SETTINGS:
                raise ConfigError("script.applied", "must name settings among %s, got %r"
                                  % (", ".join(SCRIPT_SETTINGS), name))
        check_env(self.passed_env, "script.passed_env")

    def argv(self) -> list:
        """The script's arguments: the fixed ones, the named ones, then the settings in the script's words (last,
        so that they win over a fixed argument that gives the same option)."""
        return list(self.args) + ["%s=%s" % item for item in self.options.items()] + list(self.passed_args)


@dataclass
class RunConfig:
    """Everything a run needs; field names are the JSON keys of config.json."""

    schema: int = SCHEMA_VERSION
    run_id: str = ""
    name: str = ""
    mode: str = "train"
    workload: str = "mlp"
    #: The built-in workload's size (MODEL_SIZES); a user's script ignores it.
    model_size: str = "auto"
    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: Optional[str] = None
    backend: str = "auto"
    device: str = "auto"
    compile: str = "off"
    precision: str = "fp32"
    inference_precisions: list[str] = field(default_factory=lambda: list(INFERENCE_PRECISIONS))
    batch_size: int = 32
    grad_accum: int = 1
    steps: Optional[int] = None
    epochs: Optional[int] = None
    minutes: Optional[float] = None
    dataset_size: int = 8192
    lr: float = 1e-3
    optimizer: str = "adamw"
    seed: int = 0
    warmup_steps: int = 5
    grad_checkpointing: bool = False
    num_workers: int = 0
    log_every: int = 1
    telemetry_interval_s: float = 0.5
    stop_grace_s: float = 10.0
    rank_failure_timeout_s: float = 60.0
    #: Multi-node: how long node 0 waits for every node to join, and each node to reach node 0.
    rdzv_timeout_s: float = 120.0
    #: "slurm": the run is one Slurm job; its nodes' rendezvous endpoint is filled in when the job starts
    #: (remote_runner.slurm), so a multi-node config may have none before.
    scheduler: str = "none"
    script: Optional[ScriptConfig] = None
    env: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    #: The host's GPUs the run was given (nvidia-smi's indices, one per process of a node; ``--gpus 0,3``),
    #: or None for the host's default.  ``env`` then carries the matching CUDA_VISIBLE_DEVICES.
    gpus: Optional[list[int]] = None
    #: How ``gpus`` were chosen when they were picked for the run, ``"free:N"`` (any N free ones): a rerun or a
    #: duplicate picks free GPUs again rather than the same ones.  Read by the client only.
    gpu_choice: Optional[str] = None
    #: A folder the run writes its outputs to besides the run directory (absolute, ``~/``, or relative to where
    #: the run works: a script's folder, else the run directory), listed by ``outputs`` for ``ddpgui pull``.
    outputs_dir: Optional[str] = None
    #: Download the run's outputs as it ends, whenever a client is connected (``launch --keep-outputs``); a release
    #: that destroys the host's disk waits for them (remote_runner/release.py).
    keep_outputs: bool = False

    def __post_init__(self) -> None:
        if self.schema != SCHEMA_VERSION:
            raise ConfigError("schema", "this runner reads schema %d, got %r" % (SCHEMA_VERSION, self.schema))
        _one_of("mode", self.mode, MODES)
        _one_of("workload", self.workload, WORKLOADS)
        _one_of("model_size", self.model_size, MODEL_SIZES)
        _one_of("backend", self.backend, BACKENDS)
        _one_of("device", self.device, DEVICES)
        _one_of("compile", self.compile, COMPILE_MODES)
        _one_of("precision", self.precision, PRECISIONS)
        _one_of("optimizer", self.optimizer, OPTIMIZERS)
        for p in self.inference_precisions:
            _one_of("inference_precisions", p, INFERENCE_PRECISIONS)
        for name in ("nproc_per_node", "nnodes", "batch_size", "grad_accum", "dataset_size", "log_every"):
            if getattr(self, name) < 1:
                raise ConfigError(name, "must be at least 1, got %r" % getattr(self, name))
        for name in ("warmup_steps", "num_workers", "seed", "node_rank"):
            if getattr(self, name) < 0:
                raise ConfigError(name, "must not be negative, got %r" % getattr(self, name))
        if self.node_rank >= self.nnodes:
            raise ConfigError("node_rank", "must be below nnodes (%d), got %d" % (self.nnodes, self.node_rank))
        _one_of("scheduler", self.scheduler, SCHEDULERS)
        if self.nnodes > 1 and not self.rdzv_endpoint and self.scheduler != "slurm":
            raise ConfigError("rdzv_endpoint", "a run on %d nodes needs the rendezvous endpoint host:port" % self.nnodes)
        if self.rdzv_endpoint and not _ENDPOINT.match(self.rdzv_endpoint):
            raise ConfigError("rdzv_endpoint", "must be host:port or [ipv6]:port, got %r" % self.rdzv_endpoint)
        for name in ("lr", "telemetry_interval_s", "stop_grace_s", "rank_failure_timeout_s", "rdzv_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(name, "must be positive, got %r" % getattr(self, name))
        lengths = [n for n in ("steps", "epochs", "minutes") if getattr(self, n) is not None]
        if len(lengths) > 1:
            raise ConfigError(lengths[1], "give the length as one of steps, epochs or minutes, not %s" % " and ".join(lengths))
        if not lengths and self.mode != "script":  # a script's length is its own: unknown unless given
            self.steps = 200
        for name in ("steps", "epochs"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(name, "must be at least 1, got %r" % value)
        if self.minutes is not None and not self.minutes > 0:
            raise ConfigError("minutes", "must be positive, got %r" % self.minutes)
        if self.mode == "script" and self.script is None:
            raise ConfigError("script", "script mode needs script.dir and script.entry")
        check_env(self.env)
        if self.gpus is not None:
            _check_gpus(self.gpus, self.nproc_per_node, self.env)
        if self.outputs_dir is not None and (not self.outputs_dir.strip() or "\0" in self.outputs_dir):
            raise ConfigError("outputs_dir", "must name a folder (or be left out), got %r" % (self.outputs_dir,))
        if self.gpu_choice is not None and (self.gpus is None or not re.match(r"free:\d+$", str(self.gpu_choice))):
            raise ConfigError("gpu_choice", "'free:N' beside the gpus it chose, got %r" % (self.gpu_choice,))

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def _check_gpus(gpus: list, nproc: int, env: dict) -> None:
    """``gpus``: distinct indices, one per process of a node, agreeing with env's CUDA_VISIBLE_DEVICES."""
    if not gpus:
        raise ConfigError("gpus", "name at least one GPU, or leave gpus out for the host's default")
    for index in gpus:
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ConfigError("gpus", "GPU indices are whole numbers from 0, got %r" % (index,))
    if len(set(gpus)) != len(gpus):
        raise ConfigError("gpus", "each GPU may be named once, got %s" % ",".join(map(str, gpus)))
    if len(gpus) != nproc:
        raise ConfigError("gpus", "%d GPU%s (%s) for %d process%s per node: give one GPU per process "
                          "(--nproc %d), or name %d GPU%s" % (
                              len(gpus), "" if len(gpus) == 1 else "s", ",".join(map(str, gpus)), nproc,
                              "" if nproc == 1 else "es", len(gpus), nproc, "" if nproc == 1 else "s"))
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible != ",".join(map(str, gpus)):
        raise ConfigError("gpus", "the run is given GPUs %s but its environment sets CUDA_VISIBLE_DEVICES=%s: "
                          "leave CUDA_VISIBLE_DEVICES out of env, the GPUs choice sets it"
                          % (",".join(map(str, gpus)), visible))


def _one_of(name: str, value: object, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(name, "must be one of %s, got %r" % (", ".join(allowed), value))


def _check_type(path: str, value: object, annotation: object) -> object:
    """Check ``value`` against a field annotation; returns the value to store."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _check_type(path, value, inner[0])
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, "expected true or false, got %s" % _typename(value))
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, "expected an integer, got %s" % _typename(value))
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(path, "expected a number, got %s" % _typename(value))
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(path, "expected a string, got %s" % _typename(value))
        return value
    if origin in (list, list):
        if not isinstance(value, list):
            raise ConfigError(path, "expected a list, got %s" % _typename(value))
        return [_check_type("%s[%d]" % (path, i), v, args[0]) for i, v in enumerate(value)]
    if origin in (dict, dict):
        if not isinstance(value, dict):
            raise ConfigError(path, "expected an object, got %s" % _typename(value))
        return {_check_type(path + " key", k, args[0]): _check_type("%s[%r]" % (path, k), v, args[1]) for k, v in value.items()}
    if dataclasses.is_dataclass(annotation):
        return _from_dict(annotation, value, path + ".")
    raise TypeError("unsupported annotation %r" % (annotation,))


def _typename(value: object) -> str:
    return {type(None): "null", bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _from_dict(cls, data: object, prefix: str = ""):
    if not isinstance(data, dict):
        raise ConfigError(prefix.rstrip(".") or "config", "expected an object, got %s" % _typename(data))
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            raise ConfigError(prefix + str(key), "unknown key (known keys: %s)" % ", ".join(sorted(names)))
    values = {key: _check_type(prefix + key, value, hints[key]) for key, value in data.items()}
    try:
        return cls(**values)
    except ConfigError as exc:
        if prefix and not exc.field.startswith(prefix):
            raise ConfigError(prefix + exc.field.split(".")[-1], str(exc).split(": ", 1)[1]) from None
        raise


def config_from_dict(data: object) -> RunConfig:
    """Build and validate a :class:`RunConfig`; raises :class:`ConfigError`."""
    return _from_dict(RunConfig, data)


def load_config(path: str) -> RunConfig:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise ConfigError("config", "%s is not valid JSON: %s" % (path, exc)) from None
    return config_from_dict(data)
