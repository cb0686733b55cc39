"""The run settings options of ``launch`` and ``sweep``, the settings they give, and the argparse types for
comma lists and KEY=VALUE."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from remote_runner.config import (
    BACKENDS,
    COMPILE_MODES,
    INFERENCE_PRECISIONS,
    MODEL_SIZES,
    OPTIMIZERS,
    PRECISIONS,
    WORKLOADS,
    env_problem,
)

from ..core.gpus.launching import pool_snapshot_of, resolve_gpus
from ..core.gpus.picker import GpuChoice, GpuChoiceError, parse_gpu_choice
from ..core.names import name_problem
from ..core.sweeps.plan import arg_option, split_values
from .common import CLIError, terminal_text

if TYPE_CHECKING:
    from ..core.runs.manager import RunManager

#: Launch options that set one config field each (option dest → field); ``ddpgui sweep`` takes each as a list.
SCALAR_SETTINGS = {
    "mode": "mode", "workload": "workload", "model_size": "model_size", "nproc": "nproc_per_node", "nnodes": "nnodes",
    "backend": "backend", "compile": "compile", "precision": "precision", "batch_size": "batch_size",
    "grad_accum": "grad_accum", "lr": "lr", "optimizer": "optimizer", "seed": "seed", "warmup_steps": "warmup_steps",
    "workers": "num_workers", "log_every": "log_every", "steps": "steps", "epochs": "epochs", "minutes": "minutes",
}


def launch_settings(args: argparse.Namespace) -> dict:
    """The run settings given by the options of :func:`add_launch_settings` (and ``--name``, ``--tag``)."""
    settings = {key: getattr(args, dest) for dest, key in SCALAR_SETTINGS.items()}
    settings.update(name=args.name, grad_checkpointing=args.grad_checkpointing or None, tags=args.tag or None,
                    env=dict(args.env) if args.env else None, outputs_dir=args.outputs_dir,
                    keep_outputs=args.keep_outputs or None)
    if args.inference_precisions:
        settings["inference_precisions"] = args.inference_precisions.split(",")
    if args.script:
        settings["mode"] = "script"
        settings["script"] = {"dir": args.script, "entry": args.entry, "args": list(args.script_args),
                              "metric_regex": args.metric_regex, "loss_series": args.loss_series,
                              "options": dict(args.arg or [])}
    elif args.arg:
        raise CLIError(f"--arg {args.arg[0][0]}=... is an argument of your script, and this runs no script",
                       "give --script DIR (and --entry FILE), or pass the built-in workload's settings as options")
    return settings


def add_launch_settings(p: argparse.ArgumentParser) -> None:
    """The run settings of ``launch`` (``sweep`` takes the same, each as a comma list)."""
    what = p.add_mutually_exclusive_group()
    what.add_argument("--workload", choices=WORKLOADS, default=None)
    what.add_argument("--script", metavar="DIR", help="your own script's directory (run in place on local; "
                      "uploaded to other hosts, less what its .gitignore/.ddpguiignore leave out)")
    p.add_argument("--entry", default="train.py", help="entry file inside --script DIR")
    p.add_argument("--metric-regex", default=None, help="regex with named groups step/loss/... for your script's output")
    p.add_argument("--loss-series", default=None, metavar="NAME",
                   help="the series that is your script's loss (e.g. val_loss); default: the first loss-like one "
                        "(loss, train_loss, ...); change it later with: ddpgui series RUN --loss NAME")
    p.add_argument("--arg", action="append", type=arg_pair, metavar="--NAME=VALUE",
                   help="a named argument for your script, passed as --NAME=VALUE (ddpgui sweep: --NAME=A,B is an "
                        "axis); fixed arguments go after --")
    p.add_argument("--model-size", choices=MODEL_SIZES, default=None,
                   help="the built-in workload's size: small takes seconds on a CPU, large keeps a GPU busy (the "
                        "transformer: 0.5 M or 43 M parameters); auto (default): large on a GPU, small elsewhere")
    p.add_argument("--mode", choices=("train", "inference"), default=None)
    p.add_argument("--inference-precisions", default=None, help=f"comma list of {','.join(INFERENCE_PRECISIONS)}")
    p.add_argument("--nproc", type=int, default=None, help="processes (GPUs) per node")
    p.add_argument("--nnodes", type=int, default=None,
                   help="nodes, on a Slurm cluster host (one job across N nodes; --nproc is per node)")
    p.add_argument("--backend", choices=BACKENDS, default=None)
    p.add_argument("--compile", choices=COMPILE_MODES, default=None)
    p.add_argument("--precision", choices=PRECISIONS, default=None)
    p.add_argument("--batch-size", type=int, default=None, help="per process")
    p.add_argument("--grad-accum", type=int, default=None)
    length = p.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, default=None)
    length.add_argument("--epochs", type=int, default=None)
    length.add_argument("--minutes", type=float, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--warmup-steps", type=int, default=None)
    p.add_argument("--workers", type=int, default=None, help="DataLoader workers per process")
    p.add_argument("--grad-checkpointing", action="store_true")
    p.add_argument("--log-every", type=int, default=None)
    p.add_argument("--env", action="append", type=env_pair, metavar="KEY=VALUE", help="environment for the run")
    p.add_argument("--outputs-dir", default=None, metavar="DIR",
                   help="a folder on the host the run writes its files to (relative: to your script's folder); "
                        "ddpgui pull lists it beside the run's own folder")
    p.add_argument("--keep-outputs", action="store_true",
                   help="download the files the run writes (its outputs folder, else its own folder) to "
                        "DATA_DIR/outputs/RUN as it ends, whenever ddpgui is connected; a release that destroys the "
                        "host's disk waits for them")
    p.add_argument("--gpus", type=gpu_choice, default=None, metavar="0,3|free:N",
                   help="the host's GPUs to run on (nvidia-smi's indices), or any N free ones; one process per GPU "
                        "(--nproc follows); see them with: ddpgui gpus HOST")


def run_name(text: str) -> str:
    """A run's ``--name`` (argparse type; empty: the default name)."""
    problem = name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"the name {problem}")
    return text


def run_tag(text: str) -> str:
    """A ``--tag`` (argparse type)."""
    problem = name_problem(text, empty_ok=False)
    if problem:
        raise argparse.ArgumentTypeError(f"the tag {problem}")
    return text


def out_folder(text: str) -> Path:
    """The ``--out`` folder of ``export`` and ``compare``; an empty one (which would mean wherever the command
    happens to run) is refused."""
    if not text.strip():
        raise CLIError("--out is empty: it names the folder the files are written to",
                       "give a folder, e.g. --out results (it is made when it does not exist)")
    return Path(text)


def gpu_choice(text: str) -> GpuChoice:
    """The ``--gpus`` value (argparse type)."""
    try:
        return parse_gpu_choice(text)
    except GpuChoiceError as exc:
        raise argparse.ArgumentTypeError(f"{exc} ({exc.hint})" if exc.hint else str(exc)) from None


def gpu_settings(choice: GpuChoice, settings: dict, hosts: list[str], manager: RunManager,
                 nproc: int | list[int] | None = None) -> dict:
    """``settings`` for a run (or a sweep's every cell) on the chosen GPUs of ``hosts``, after one snapshot of
    each host over the manager's connections (:func:`~ddpgui.core.gpus.launching.resolve_gpus`); a busy GPU is
    a warning on stderr naming who holds it, a contradiction, a missing GPU or a Slurm cluster (its scheduler
    gives the GPUs) a CLIError."""
    try:
        resolved, warnings = resolve_gpus(settings, hosts, pool_snapshot_of(manager.targets), manager.is_slurm,
                                          choice=choice, nproc=nproc)
    except GpuChoiceError as exc:
        raise CLIError(str(exc), exc.hint) from None
    for warning in warnings:
        print(f"warning: {terminal_text(warning)}; running on it anyway", file=sys.stderr)
    return resolved


def env_pair(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of an ``--env``-like option (argparse type)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    problem = env_problem(key, value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return key, value


def arg_pair(text: str) -> tuple[str, str]:
    """``--NAME=VALUE`` of ``--arg`` (argparse type): the script's option and its value, data never a shell's."""
    try:
        return arg_option(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def comma_list(convert: Callable | None, choices: tuple | None) -> Callable[[str], list]:
    """An argparse type: ``a,b,c`` → a list of values, each converted and checked like the launch option's one."""
    def parse(text: str) -> list:
        values = []
        for part in split_values(text):
            part = part.strip()
            if not part:
                raise argparse.ArgumentTypeError(f"an empty value in {text!r}")
            try:
                value = convert(part) if convert else part
            except ValueError:
                raise argparse.ArgumentTypeError(f"{part!r} is not a valid {convert.__name__}") from None
            if choices and value not in choices:
                raise argparse.ArgumentTypeError(f"{part!r} is not one of {', '.join(map(str, choices))}")
            values.append(value)
        return values
    return parse
