"""The command-line mirror of the app: thin, it calls ddpgui.core.

Exit codes: 0 the run finished (or the command succeeded), 1 the run failed,
2 the request was refused (bad settings, unknown host), 3 the run was stopped,
130 interrupted (the run goes on on its host).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time
from pathlib import Path

from remote_runner.config import (
    BACKENDS,
    COMPILE_MODES,
    INFERENCE_PRECISIONS,
    OPTIMIZERS,
    PRECISIONS,
    WORKLOADS,
    ConfigError,
)

from ..core.errors import describe
from ..core.hosts import HostError, HostNotFound, HostStore
from ..core.hosts.secrets import SecretsUnavailable
from ..core.runs import launches
from ..core.runs.config import make_config, settings_text
from ..core.runs.live import LiveRun, format_rate, progress_line, run_summary, summary_lines
from ..core.runs.manager import RunManager, RunUpdate
from ..core.runs.multinode import node_states
from ..core.store import RunRecord, RunStore, StoreError
from ..core.sweeps import SweepError
from ..core.targets.base import TargetError
from .compare import add_compare_command
from .hosts import add_host_commands, env_pair, open_cli_target
from .output import EXIT_INTERRUPTED, run_command, terminal_text

EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_STOPPED = 0, 1, 2, 3
_STATE_EXIT = {"finished": EXIT_OK, "failed": EXIT_FAILED, "stopped": EXIT_STOPPED}


def _manager(args: argparse.Namespace) -> RunManager:
    """The run manager over the app's store and host profiles, asking on the terminal when it must."""
    hosts = HostStore()
    return RunManager(RunStore(), hosts, lambda name: open_cli_target(name, args, hosts))


def _find_run(store: RunStore, text: str) -> RunRecord:
    """A run by id, unique id prefix or unique name."""
    try:
        return store.get_run(text)
    except KeyError:
        pass
    return find_one(store.list_runs(), text, "run", "ddpgui runs")


def find_one(records: list, text: str, what: str, listing: str):
    """The record (run or sweep) whose id starts with ``text``, or else whose name is ``text``; one or CLIError."""
    matches = [r for r in records if r.id.startswith(text)] or [r for r in records if r.name == text]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CLIError(f"no {what} {text!r}", f"list {what}s with: {listing}")
    raise CLIError(f"{text!r} matches {len(matches)} {what}s: " + ", ".join(r.id for r in matches[:5]),
                   f"give more of the {what} id")


class CLIError(Exception):
    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


#: Launch options that set one config field each (option dest → field); ``ddpgui sweep`` takes each as a list.
SCALAR_SETTINGS = {
    "mode": "mode", "workload": "workload", "nproc": "nproc_per_node", "backend": "backend", "compile": "compile",
    "precision": "precision", "batch_size": "batch_size", "grad_accum": "grad_accum", "lr": "lr",
    "optimizer": "optimizer", "seed": "seed", "warmup_steps": "warmup_steps", "workers": "num_workers",
    "log_every": "log_every", "steps": "steps", "epochs": "epochs", "minutes": "minutes",
}


def _settings(args: argparse.Namespace) -> dict:
    settings = {key: getattr(args, dest) for dest, key in SCALAR_SETTINGS.items()}
    settings.update(name=args.name, grad_checkpointing=args.grad_checkpointing or None, tags=args.tag or None,
                    env=dict(args.env) if args.env else None)
    if args.inference_precisions:
        settings["inference_precisions"] = args.inference_precisions.split(",")
    if args.script:
        settings["mode"] = "script"
        settings["script"] = {"dir": args.script, "entry": args.entry, "args": list(args.script_args),
                              "metric_regex": args.metric_regex}
    return settings


def _launched(manager: RunManager, record: RunRecord, follow: bool) -> int:
    """After a launch: print the run's id and dir as JSON, or follow it live."""
    print(f"launched {record.name!r} on {', '.join(record.hosts)} as {record.id} ({record.run_dirs[0]})",
          file=sys.stderr)
    if not follow:
        extra = {"run_dirs": record.run_dirs} if len(record.run_dirs) > 1 else {}
        print(json.dumps({"run_id": record.id, "run_dir": record.run_dirs[0], **extra}))
        return EXIT_OK
    return follow_live(manager, record.id)


def cmd_launch(args: argparse.Namespace) -> int:
    cfg = make_config(_settings(args))
    with _manager(args) as manager:
        if args.nodes:
            record = _launch_nodes(manager, args, cfg)
        elif args.host:
            record = manager.launch(args.host, cfg, progress=_upload_progress, follow=args.follow)
        else:
            raise CLIError("name the host to run on", "ddpgui launch HOST ..., or ddpgui launch --nodes A,B ... for "
                           "one run across several hosts")
        return _launched(manager, record, args.follow)


def _launch_nodes(manager: RunManager, args: argparse.Namespace, cfg) -> RunRecord:
    """``launch --nodes A,B``: preflight (its warnings printed), then one run across the hosts."""
    if args.host:
        raise CLIError(f"with --nodes, give no HOST (got {args.host!r})", "arguments for your script go after --")
    hosts = [h.strip() for h in args.nodes.split(",") if h.strip()]
    checked = manager.preflight(hosts, cfg)
    for warning in checked.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return manager.launch_nodes(hosts, cfg, progress=_upload_progress, follow=args.follow, checked=checked)


def cmd_follow(args: argparse.Namespace) -> int:
    with _manager(args) as manager:
        record = _find_run(manager.store, args.run)
        if launches.in_progress(record):
            print(f"run {record.id} is being launched by {launches.being_launched(record)}; waiting for it to start",
                  file=sys.stderr)
        while launches.in_progress(record):
            time.sleep(0.5)  # until its launcher started it, or is gone
            record = manager.store.get_run(record.id)
        record = launches.settle(manager.store, record)
        if record.active and not record.run_dirs:  # no launcher is recorded (a row of an older version)
            raise CLIError(f"run {record.id} has no run directory on a host: its launch has not finished",
                           f"if the app that launched it is gone, stop it (ddpgui stop {record.id}) or delete it")
        if record.active:
            manager.follow(record.id)
        return follow_live(manager, record.id)


def cmd_runs(args: argparse.Namespace) -> int:
    with RunStore() as store:
        launches.settle_all(store)  # a launch whose app was closed mid-way is shown as such, not as "launching"
        runs = store.list_runs(state=args.state, host=args.host, tag=args.tag, text=args.text)
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in runs], indent=1))
        return EXIT_OK
    if not runs:
        print("no runs yet: ddpgui launch local --workload mlp --nproc 2 --follow")
        return EXIT_OK
    print(f"{'id':<22} {'name':<32} {'host':<12} {'state':<9} {'step':>11} {'samples/s':>10}")
    for r in runs:
        step = f"{r.last_step or 0}/{r.total_steps}" if r.total_steps else str(r.last_step or 0)
        rate = r.summary.get("steady_samples_per_s")
        print(f"{r.id:<22} {terminal_text(r.name)[:32]:<32} {terminal_text(r.host)[:12]:<12} {r.state:<9} {step:>11} "
              f"{format_rate(rate, '') if rate else '-':>10}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    with RunStore() as store:
        record = _find_run(store, args.run)
        if args.json:
            print(json.dumps(dataclasses.asdict(record), indent=1))
            return EXIT_OK
        cfg = record.config
        text = terminal_text
        print(f"{text(record.name)}  ({record.id})")
        if record.tags:
            print(f"  tags        {', '.join(map(text, record.tags))}")
        print(f"  host        {text(', '.join(record.hosts))}   dir {text(record.run_dirs.get(0, '-'))}")
        print(f"  state       {record.state}" + (f"  — {text(record.message, True)}" if record.message else ""))
        if len(record.run_dirs) > 1:
            for node in node_states(store, record):
                print(f"  node {node.node:<6} {text(node.host)}: {node.state}" +
                      (f" — {text(node.message, True)}" if node.message else "") + f"   dir {text(node.run_dir)}")
        if record.hint:
            print(f"  hint        {text(record.hint, True)}")
        print(f"  settings    {text(settings_text(cfg))}")
        print(f"  steps       {record.last_step or 0}" + (f"/{record.total_steps}" if record.total_steps else ""))
        for key in ("steady_samples_per_s", "steady_tokens_per_s", "final_loss", "best_loss", "mem_peak_gib"):
            if record.summary.get(key) is not None:
                print(f"  {key:<22}{record.summary[key]:.4g}")
        env = record.environment
        if env:
            print(terminal_text(f"  environment {env.get('hostname')}: torch {env.get('torch')}, CUDA {env.get('cuda')}, "
                                f"GPU {env.get('gpu') or 'none'}"))
        if record.corrupt_lines:
            print(f"  skipped     {record.corrupt_lines} corrupt spool line(s)")
    return EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    with _manager(args) as manager:
        record = _find_run(manager.store, args.run)
        if not record.active:
            print(f"run {record.id} is already {record.state}")
            return EXIT_OK
        record = manager.stop(record.id)
        try:
            record = manager.wait(record.id, timeout=60)
        except TimeoutError:
            raise CLIError(f"run {record.id} did not report its end within 60 s of the stop (still {record.state} in "
                           "the run store)", f"look at it with: ddpgui show {record.id}; ddpgui follow {record.id} "
                           "picks up its end once the host reports it") from None
        print(f"run {record.id} {record.state}" + (f": {record.message}" if record.message else ""))
        return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    with _manager(args) as manager:
        record = _find_run(manager.store, args.run)
        if not record.run_dirs:
            where = " (it has no run directory on a host: its launch never finished)"
        elif args.keep_remote:
            where = ""
        else:
            where = f" and its director{'ies' if len(record.run_dirs) > 1 else 'y'} " + ", ".join(
                f"{d} on {record.hosts[int(n)]}" for n, d in sorted(record.run_dirs.items()))
        if not args.yes:
            if not sys.stdin.isatty():
                raise CLIError(f"deleting run {record.id} needs confirmation", "pass --yes to delete without asking")
            if input(f"Delete run {record.name!r} ({record.id}){where}? [y/N] ").strip().lower() not in ("y", "yes"):
                print("nothing deleted")
                return EXIT_OK
        manager.delete(record.id, remote=not args.keep_remote)
        print(f"deleted run {record.id}{where}")
        return EXIT_OK


def cmd_rerun(args: argparse.Namespace) -> int:
    with _manager(args) as manager:
        record = manager.rerun(_find_run(manager.store, args.run).id, progress=_upload_progress)
        return _launched(manager, record, args.follow)


def cmd_export(args: argparse.Namespace) -> int:
    from ..core.outputs.points import write_points_csv

    with RunStore() as store:
        runs = [_find_run(store, text) for text in args.runs]
        paths = write_points_csv(store, [r.id for r in runs], Path(args.out))
    for path in paths:
        print(path)
    return EXIT_OK


def _upload_progress(done: int, total: int, files_done: int, files_total: int) -> None:
    if total and sys.stderr.isatty():
        print(f"\ruploading {done / 1e6:.1f}/{total / 1e6:.1f} MB ({files_done}/{files_total} files)",
              end="" if done < total else "\n", file=sys.stderr)


def follow_live(manager: RunManager, run_id: str, line_interval_s: float = 0.5) -> int:
    """Print a live line (at most every ``line_interval_s``) until the run has ended; returns the exit code."""
    record = manager.store.get_run(run_id)
    live = LiveRun(total_steps=record.total_steps, total_minutes=record.config.get("minutes"))
    lock = threading.Lock()
    for rec in manager.store.records(run_id, "events.jsonl"):
        live.add_event(rec)

    def on_update(update: RunUpdate) -> None:
        if update.run_id != run_id:
            if update.connection == "lost":
                print(f"\nconnection to {terminal_text(update.host)} lost; reconnecting", file=sys.stderr)
            return
        with lock:
            for spool, records in update.records.items():
                for rec in records:
                    live.add(spool, rec)
                    _print_event(spool, rec)

    unsubscribe = manager.subscribe(on_update)
    tty = sys.stdout.isatty()
    last_step = -1
    try:
        while True:
            try:
                record = manager.wait(run_id, timeout=line_interval_s)
                break
            except TimeoutError:
                pass
            with lock:
                if live.step != last_step and live.step:
                    print(("\r" if tty else "") + progress_line(live), end="" if tty else "\n", flush=True)
                    last_step = live.step
    except KeyboardInterrupt:
        print(f"\ninterrupted; the run goes on on its host (ddpgui follow {run_id})", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        unsubscribe()
    if tty:
        print()
    _print_summary(manager.store, run_id)
    return _STATE_EXIT.get(record.state, EXIT_FAILED)


def _print_event(spool: str, rec: dict) -> None:
    if spool != "events.jsonl":
        return
    event = rec.get("event")
    if event == "compile_end":
        print(f"  compiled in {rec.get('duration_s', 0):.1f} s", file=sys.stderr)
    elif event == "warmup_done":
        print(f"  warm-up done at step {rec.get('step')}", file=sys.stderr)
    elif event in ("warning", "retry"):
        print(f"  {event}: {terminal_text(rec.get('message') or rec.get('reason'))}", file=sys.stderr)
    elif event == "inference_unsupported":
        print(f"  {terminal_text(rec.get('precision'))}: {terminal_text(rec.get('reason'))}", file=sys.stderr)


def _print_summary(store: RunStore, run_id: str) -> None:
    """The ended run's summary, from the store: every follower of the run prints the same."""
    for line in summary_lines(run_summary(store, run_id)):
        print(terminal_text(line, multiline=True))


def add_launch_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("launch", help="start a DDP run on a host (local = this computer)",
                       description="Start a DDP run. Everything after -- goes to your script.")
    p.add_argument("host", nargs="?", help="host profile name; 'local' is this computer")
    p.add_argument("--nodes", metavar="A,B,...", help="one run across several host profiles (multi-node torchrun), "
                   "node 0 first: it hosts the rendezvous; --nproc is per node")
    add_launch_settings(p)
    p.add_argument("--name", default=None)
    p.add_argument("--tag", action="append", default=None)
    p.add_argument("--follow", action="store_true", help="stay and print live progress until the run ends")
    p.add_argument("--accept-new-host-key", action="store_true", help="trust an unknown SSH host key without asking")
    p.add_argument("script_args", nargs="*", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_launch)


def add_launch_settings(p: argparse.ArgumentParser) -> None:
    """The run settings of ``launch`` (``sweep`` takes the same, each as a comma list)."""
    what = p.add_mutually_exclusive_group()
    what.add_argument("--workload", choices=WORKLOADS, default=None)
    what.add_argument("--script", metavar="DIR", help="your own script's directory (uploaded with it)")
    p.add_argument("--entry", default="train.py", help="entry file inside --script DIR")
    p.add_argument("--metric-regex", default=None, help="regex with named groups step/loss/... for your script's output")
    p.add_argument("--mode", choices=("train", "inference"), default=None)
    p.add_argument("--inference-precisions", default=None, help=f"comma list of {','.join(INFERENCE_PRECISIONS)}")
    p.add_argument("--nproc", type=int, default=None, help="processes (GPUs) per node")
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


def _add_run_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runs", help="list runs (newest first)")
    p.add_argument("text", nargs="?", default=None, help="filter by text in name, id or host")
    p.add_argument("--state", default=None)
    p.add_argument("--host", default=None)
    p.add_argument("--tag", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_runs)
    p = sub.add_parser("show", help="a run's settings, state and results")
    p.add_argument("run", help="run id, id prefix or name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_show)
    for name, func, text in (("follow", cmd_follow, "follow a run live until it ends (reattaches after a restart)"),
                             ("stop", cmd_stop, "stop a run: every process of it on its host")):
        p = sub.add_parser(name, help=text)
        p.add_argument("run")
        p.add_argument("--accept-new-host-key", action="store_true")
        p.set_defaults(func=func)
    p = sub.add_parser("delete", help="delete a run from the store and its directory on the host")
    p.add_argument("run")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--keep-remote", action="store_true", help="keep the run directory on the host")
    p.add_argument("--accept-new-host-key", action="store_true")
    p.set_defaults(func=cmd_delete)
    p = sub.add_parser("rerun", help="launch a run again with the same settings")
    p.add_argument("run")
    p.add_argument("--follow", action="store_true")
    p.add_argument("--accept-new-host-key", action="store_true")
    p.set_defaults(func=cmd_rerun)
    p = sub.add_parser("export", help="export runs' points as tidy CSV")
    p.add_argument("runs", nargs="+")
    p.add_argument("--format", choices=("csv",), default="csv")
    p.add_argument("--out", required=True, help="output directory")
    p.set_defaults(func=cmd_export)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="ddpgui", description="Launch, watch and compare PyTorch DDP experiments.")
    parser.add_argument("--version", action="version", version=f"ddpgui {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_launch_command(sub)
    _add_run_commands(sub)
    add_host_commands(sub)
    add_compare_command(sub)
    from .sweeps import add_sweep_commands
    add_sweep_commands(sub)
    from .adopt import add_adopt_command
    add_adopt_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return run_command(lambda: _parse_and_run(argv))  # Ctrl-C and closed pipes, from the first line of output on


def _parse_and_run(argv: list[str]) -> int:
    # What follows "--" is the script's (argparse would mistake it for an optional HOST).
    head, script_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = build_parser()
    args = parser.parse_args(head)
    if script_args:
        if not hasattr(args, "script_args"):
            parser.error(f"unexpected arguments after --: {' '.join(script_args)}")
        args.script_args = [*args.script_args, *script_args]
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return args.func(args)
    except (ConfigError, CLIError, HostError, HostNotFound, SweepError) as exc:
        return _report(exc, EXIT_REFUSED)
    except (TargetError, StoreError, SecretsUnavailable) as exc:
        return _report(exc, EXIT_FAILED)
    except BrokenPipeError:
        raise  # a closed stdout: run_command leaves quietly
    except OSError as exc:  # a data or config folder that cannot be made, a file that cannot be read or written
        return _report(exc, EXIT_FAILED)


def _report(exc: Exception, code: int) -> int:
    """Print what went wrong and what to do (the hint on a line of its own); returns ``code``."""
    message, hint = describe(exc)
    print(f"ddpgui: {terminal_text(message, multiline=True)}", file=sys.stderr)
    if hint:
        print(f"hint: {terminal_text(hint, multiline=True)}", file=sys.stderr)
    return code
