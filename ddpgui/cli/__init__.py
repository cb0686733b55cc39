"""The command-line mirror of the app: thin, it calls ddpgui.core.

:func:`main` parses and runs one command; :func:`build_parser` registers the commands of each command module
(runs, hosts, compare, sweeps, adopt, gpus, scripts, pull: each has ``register(subparsers)``). Exit codes: see :mod:`.common`.
"""
from __future__ import annotations

import argparse
import sys

from . import adopt, compare, gpus, hosts, pull, runs, scripts, sweeps, tensorboard
from .common import execute
from .process import run_command


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="ddpgui", description="Launch, watch and compare PyTorch DDP experiments.")
    parser.add_argument("--version", action="version", version=f"ddpgui {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for commands in (runs, hosts, compare, sweeps, adopt, gpus, scripts, tensorboard, pull):
        commands.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return run_command(lambda: _parse_and_run(argv))  # Ctrl-C and closed pipes, from the first line of output on


def _joined_arg_values(argv: list[str]) -> list[str]:
    """``--arg --lr=3e-4`` as ``--arg=--lr=3e-4``: argparse takes a value that starts with '-' for an option."""
    out: list[str] = []
    for token in argv:
        if out and out[-1] == "--arg" and token.startswith("-"):
            out[-1] = f"--arg={token}"
        else:
            out.append(token)
    return out


def parse_command(argv: list[str]) -> argparse.Namespace:
    """The parsed command line; what follows "--" is the script's (argparse would mistake it for an optional
    HOST)."""
    head, script_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = build_parser()
    args = parser.parse_args(_joined_arg_values(head))
    if script_args:
        if not hasattr(args, "script_args"):
            parser.error(f"unexpected arguments after --: {' '.join(script_args)}")
        args.script_args = [*args.script_args, *script_args]
    return args


def _parse_and_run(argv: list[str]) -> int:
    return execute(parse_command(argv))
