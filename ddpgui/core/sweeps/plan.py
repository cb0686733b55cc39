"""Sweep planning (pure): a SweepSpec expanded into validated cells, axis names, cell labels and the seed policy.

:func:`plan_sweep` expands a :class:`SweepSpec` into cells and validates every one
with ``make_config`` before anything is stored, so a bad value is refused with
the axis that holds it and nothing is created.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import time
from collections import Counter
from dataclasses import dataclass, field

from remote_runner.config import ConfigError, RunConfig, env_problem

from ..gpus.picker import GpuChoiceError, parse_gpu_choice
from ..hosts import HostNotFound, HostStore
from ..hosts.precisions import host_precision_problems
from ..names import name_problem
from ..runs.config import make_config, new_run_id
from ..store import SweepCell, SweepRecord

#: Short axis names (as the CLI's options) → the config field they set.
AXIS_ALIASES = {"nproc": "nproc_per_node", "workers": "num_workers"}
_SHORT_NAMES = {field_name: short for short, field_name in AXIS_ALIASES.items()}
_CONFIG_FIELDS = frozenset(f.name for f in dataclasses.fields(RunConfig))
_NOT_AXES = frozenset({"schema", "run_id", "name"})


class SweepError(ValueError):
    """A sweep that must not start; ``axis`` names the offending axis (None: the sweep as a whole)."""

    def __init__(self, message: str, hint: str = "", axis: str | None = None):
        super().__init__(message)
        self.hint = hint
        self.axis = axis


@dataclass
class SweepSpec:
    """What to sweep.

    ``base``: the settings every cell shares (the dict ``make_config`` takes);
    ``matrix``: axis → values, an axis being any config setting (``nproc`` and
    ``workers`` are accepted for ``nproc_per_node`` and ``num_workers``);
    ``repeats``: runs per combination; ``hosts``: every combination runs on each.
    """

    hosts: list[str]
    base: dict = field(default_factory=dict)
    matrix: dict[str, list] = field(default_factory=dict)
    repeats: int = 1
    parallel: bool = False
    name: str = ""



#: An axis over one of a script's arguments (``arg:--lr``: the cells pass ``--lr=VALUE``) or over an environment
#: variable (``env:OMP_NUM_THREADS``).
ARG_AXIS = "arg:"
ENV_AXIS = "env:"


def axis_field(name: str) -> str:
    """The config field an axis name sets (``nproc`` → ``nproc_per_node``, ``batch-size`` → ``batch_size``);
    an ``arg:`` or ``env:`` axis keeps its name."""
    name = name.strip()
    if name.startswith((ARG_AXIS, ENV_AXIS)):
        return name
    name = name.replace("-", "_")
    return AXIS_ALIASES.get(name, name)


def _short(field_name: str) -> str:
    if field_name.startswith((ARG_AXIS, ENV_AXIS)):
        return field_name.split(":", 1)[1]
    return _SHORT_NAMES.get(field_name, field_name)


def split_values(text: str) -> list[str]:
    """``a,b,c`` → its values; ``\\,`` is a comma inside a value (``--env CUDA_VISIBLE_DEVICES=0\\,1``)."""
    parts, current, escaped = [], [], False
    for char in text:
        if escaped:
            current.append(char if char == "," else "\\" + char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ",":
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current) + ("\\" if escaped else ""))
    return parts


def arg_option(text: str) -> tuple[str, str]:
    """``--NAME=VALUE`` → (``--NAME``, ``VALUE``): a script's named argument, data never a shell's; raises
    ValueError for anything else."""
    name, sep, value = text.partition("=")
    if not sep or not name.startswith("-") or not name.strip("-") or any(c.isspace() for c in name):
        raise ValueError(f"expected --NAME=VALUE (e.g. --lr=3e-4), got {text!r}")
    return name, value


def put_named_axes(base: dict, matrix: dict, args=(), env=()) -> None:
    """A script's ``--NAME=A,B`` (``args``) and ``NAME=A,B`` (``env``) pairs, as (name, values text): several
    values make an ``arg:``/``env:`` axis of ``matrix``, one value a fixed argument or variable of ``base``."""
    if args and base.get("mode") != "script":
        raise SweepError(f"{args[0][0]} is an argument of your script, and this sweep runs no script",
                         "give --script DIR (and --entry FILE)")
    for pairs, prefix in ((args, ARG_AXIS), (env, ENV_AXIS)):
        for name, text in pairs:
            values = split_values(text)
            if prefix == ARG_AXIS:
                script = base["script"] = dict(base.get("script") or {})
                fixed = script["options"] = dict(script.get("options") or {})
            else:
                fixed = base["env"] = dict(base.get("env") or {})
            fixed.pop(name, None)
            if len(values) > 1:
                matrix[prefix + name] = values
            else:
                fixed[name] = values[0]
    if base.get("env") == {}:
        base["env"] = None


def _check_named_axis(name: str, key: str, base: dict) -> None:
    """An ``arg:``/``env:`` axis: a name a script or an environment can take, not also given as fixed."""
    bare = key.split(":", 1)[1]
    if key.startswith(ARG_AXIS):
        if not bare.startswith("-") or "=" in bare or not bare.strip("-") or any(c.isspace() for c in bare):
            raise SweepError(f"sweep axis {name!r}: an argument axis names an option such as --lr",
                             "e.g. --arg \"--lr=1e-4,3e-4\"", axis=name)
        if base.get("mode") != "script":
            raise SweepError(f"sweep axis {bare} is an argument of your script, and this sweep runs no script",
                             "give --script DIR (and --entry FILE)", axis=name)
        if bare in ((base.get("script") or {}).get("options") or {}):
            raise SweepError(f"{bare} is both a fixed argument and a sweep axis", "drop one of them", axis=name)
    else:
        problem = env_problem(bare)
        if problem:
            raise SweepError(f"sweep axis {name!r}: {problem}", "e.g. --env OMP_NUM_THREADS=1,4", axis=name)
        if bare in (base.get("env") or {}):
            raise SweepError(f"{bare} is both a fixed environment variable and a sweep axis", "drop one of them",
                             axis=name)


def cell_settings(base: dict, values: dict) -> dict:
    """The settings of the cell with the axis ``values``: an ``arg:`` value goes to the script's named
    arguments, an ``env:`` value to the run's environment, any other to its setting."""
    settings = dict(base)
    for key, value in values.items():
        if key.startswith(ARG_AXIS):
            script = dict(settings.get("script") or {})
            script["options"] = {**(script.get("options") or {}), key[len(ARG_AXIS):]: str(value)}
            settings["script"] = script
        elif key.startswith(ENV_AXIS):
            settings["env"] = {**(settings.get("env") or {}), key[len(ENV_AXIS):]: str(value)}
        else:
            settings[key] = value
    return settings


def _shown(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def cell_label(values: dict, repeat: int, repeats: int, host: str, several_hosts: bool) -> str:
    """``compile=default precision=bf16 nproc=2 #2 @gpu1``: the axis values, the repeat and the host."""
    parts = [f"{_short(k)}={_shown(v)}" for k, v in values.items()]
    if repeats > 1:
        parts.append(f"#{repeat + 1}")
    if several_hosts:
        parts.append(f"@{host}")
    return " ".join(parts) or "run"


def _checked_matrix(matrix: dict[str, list], base: dict) -> dict[str, list]:
    out: dict[str, list] = {}
    for name, values in matrix.items():
        key = axis_field(name)
        if key.startswith((ARG_AXIS, ENV_AXIS)):
            _check_named_axis(name, key, base)
        elif key not in _CONFIG_FIELDS or key in _NOT_AXES:
            raise SweepError(f"sweep axis {name!r} is not a run setting",
                             "an axis is a setting such as compile, precision, nproc, batch_size, workload, lr, "
                             "steps, a script's argument (arg:--lr) or an environment variable (env:NAME)",
                             axis=name)
        if key in out:
            raise SweepError(f"sweep axis {name!r} is given twice (as {_short(key)} and {key})",
                             "give each setting once", axis=name)
        if base.get(key) is not None:
            raise SweepError(f"{_short(key)} is both a fixed setting ({_shown(base[key])}) and a sweep axis",
                             "drop one of them", axis=name)
        if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)) or not values:
            raise SweepError(f"sweep axis {name!r} needs a non-empty list of values, got {values!r}",
                             "e.g. precision: [fp32, bf16]", axis=name)
        shown = [json.dumps(v, sort_keys=True) for v in values]
        twice = [v for v, n in Counter(shown).items() if n > 1]
        if twice:
            raise SweepError(f"sweep axis {name!r} lists {twice[0]} more than once", "give each value once",
                             axis=name)
        out[key] = list(values)
    return out


def _seed_policy(base: dict, matrix: dict[str, list], repeats: int) -> tuple[bool, str]:
    """(whether repeats get seeds of their own, the sentence that says which seeds the runs use)."""
    if "seed" in matrix:
        return False, "seed is an axis: the repeats of a combination share its seed"
    if base.get("mode") == "script":
        return False, ("your script chooses its own seeds (ddpgui gives a script none; sweep an argument, e.g. "
                       "--arg \"--seed=0,1\", to vary them)")
    if base.get("seed") is not None:
        return False, f"seed {base['seed']} fixed by you: every run uses it"
    if repeats == 1:
        return False, "seed 0 (the default) in every run"
    return True, f"repeat r uses seed r (0..{repeats - 1}), so the repeats differ; fix --seed to give all one seed"


def plan_sweep(spec: SweepSpec, hosts: HostStore | None = None,
               probes: dict[str, dict | None] | None = None) -> tuple[SweepRecord, list[SweepCell]]:
    """The sweep and its cells, every cell validated with make_config; raises SweepError (nothing is stored).

    ``probes`` (host → its probe report, None where not probed): a cell's precision a host is not offered (the
    launch form's rule, :func:`~ddpgui.core.hosts.precisions.host_precision_problems`) is refused with the reason.
    Cells are ordered repeat by repeat (every combination once, then again), so
    the first results cover the whole matrix; each host takes its cells in that order.
    """
    problem = name_problem(spec.name)
    if problem:
        raise SweepError(f"the sweep's name {problem}", "give it a shorter name (it is also a tag on its runs)")
    names = [h.strip() for h in spec.hosts if h and h.strip()]
    if not names:
        raise SweepError("a sweep needs at least one host", "e.g. local (this computer)")
    if len(set(names)) != len(names):
        raise SweepError(f"a host is listed twice: {', '.join(names)}", "give each host once")
    for name in names:
        if hosts is not None:
            try:
                hosts.get(name)
            except HostNotFound as exc:
                raise SweepError(str(exc), "add it with: ddpgui hosts add, or pick another host") from None
    if isinstance(spec.repeats, bool) or not isinstance(spec.repeats, int) or spec.repeats < 1:
        raise SweepError(f"repeats must be a whole number of at least 1, got {spec.repeats!r}", "e.g. 3",
                         axis="repeats")
    base = {k: v for k, v in spec.base.items() if v is not None}
    for key in ("run_id", "name"):
        if base.pop(key, None):
            raise SweepError(f"a sweep sets each run's {key} itself", f"leave {key} out of the settings; name the "
                             "sweep instead")
    matrix = _checked_matrix(spec.matrix, base)
    own_seeds, seeds = _seed_policy(base, matrix, spec.repeats)
    sweep_id = new_run_id()
    name = spec.name.strip() or f"{'×'.join(map(_short, matrix)) or 'repeat'} sweep {time.strftime('%Y-%m-%d %H:%M')}"
    cells: list[SweepCell] = []
    combos = [dict(zip(matrix, values)) for values in itertools.product(*matrix.values())]
    for repeat in range(spec.repeats):
        for values in combos:
            settings = cell_settings(base, {**values, **({"seed": repeat} if own_seeds else {})})
            for slurm in sorted({hosts is not None and hosts.get(h).is_slurm for h in names}):
                # A cluster's runs are Slurm jobs: several nodes need no endpoint (the job finds its own)
                _validate(dict(settings, scheduler="slurm") if slurm else settings, values)
            for host in names:
                if probes is not None:
                    _check_precision(settings.get("precision"), host, probes.get(host), hosts)
                cells.append(SweepCell(sweep_id=sweep_id, index=len(cells), host=host, settings=settings,
                                       repeat=repeat, label=cell_label(values, repeat, spec.repeats, host,
                                                                       len(names) > 1)))
    sweep = SweepRecord(id=sweep_id, name=name, hosts=names, base=base, matrix=matrix, repeats=spec.repeats,
                        parallel=bool(spec.parallel), seeds=seeds)
    return sweep, cells


def _check_precision(precision: str | None, host: str, probe: dict | None, hosts: HostStore | None) -> None:
    profile = hosts.get(host) if hosts is not None else None
    cluster = profile.slurm if profile is not None and profile.is_slurm else None
    reason = host_precision_problems(probe, cluster).get(precision) if precision else None
    if reason:
        shown = profile.display_name if profile is not None else host
        raise SweepError(f"precision {precision} on {shown}: {reason}", f"untick {precision}, or leave {shown} out",
                         axis="precision")


def _validate(settings: dict, values: dict) -> None:
    if isinstance(settings.get("gpus"), str):  # the launch form's "free:N": resolved when the sweep starts
        try:
            parse_gpu_choice(settings["gpus"])
        except GpuChoiceError as exc:
            raise SweepError(f"setting gpus is refused: {exc}", exc.hint) from None
        settings = {key: value for key, value in settings.items() if key != "gpus"}
    try:
        make_config(settings)
    except ConfigError as exc:
        top = exc.field.split(".")[0].split("[")[0]
        reason = str(exc).split(": ", 1)[-1]
        if top in values:
            raise SweepError(f"sweep axis {_short(top)} = {_shown(values[top])} is refused: {reason}",
                             f"fix or drop that value of {_short(top)}", axis=_short(top)) from None
        others = ", ".join(f"{_short(k)}={_shown(v)}" for k, v in values.items())
        where = f" (with {others})" if others else ""
        raise SweepError(f"setting {exc.field}{where} is refused: {reason}", "fix the fixed settings of the sweep",
                         axis=_short(top) if top in settings else None) from None
