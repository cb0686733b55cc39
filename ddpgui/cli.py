"""The command-line mirror of the app: thin, it calls ddpgui.core.

Exit codes: 0 the run finished (or the command succeeded), 1 the run failed,
2 the request was refused (bad settings, unknown host), 3 the run was stopped,
130 interrupted (the run goes on on its host).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from remote_runner.config import (BACKENDS, COMPILE_MODES, INFERENCE_PRECISIONS, OPTIMIZERS, PRECISIONS, WORKLOADS,
                                  ConfigError)

from .core.live import LiveRun, format_duration, format_rate, progress_line
from .core.protocol import Chunk, End, parse_records
from .core.runs import make_config, start_run
from .core.targets.base import ConnectionLost, Target, TargetError

EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_STOPPED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
_STATE_EXIT = {"finished": EXIT_OK, "failed": EXIT_FAILED, "stopped": EXIT_STOPPED}


def _open_target(name: str, args: argparse.Namespace) -> Target:
    from .core.targets.local import LOCAL_NAME, LocalTarget

    if name == LOCAL_NAME:
        return LocalTarget()
    from .cli_hosts import open_cli_target

    return open_cli_target(name, args)


def _settings(args: argparse.Namespace) -> dict:
    length = {"steps": args.steps, "epochs": args.epochs, "minutes": args.minutes}
    settings = {
        "name": args.name, "mode": args.mode, "workload": args.workload, "nproc_per_node": args.nproc,
        "backend": args.backend, "compile": args.compile, "precision": args.precision,
        "batch_size": args.batch_size, "grad_accum": args.grad_accum, "lr": args.lr, "optimizer": args.optimizer,
        "seed": args.seed, "warmup_steps": args.warmup_steps, "num_workers": args.workers,
        "grad_checkpointing": args.grad_checkpointing or None, "log_every": args.log_every,
        "tags": args.tag or None, "env": dict(args.env) if args.env else None, **length,
    }
    if args.inference_precisions:
        settings["inference_precisions"] = args.inference_precisions.split(",")
    if args.script:
        settings["mode"] = "script"
        settings["script"] = {"dir": args.script, "entry": args.entry, "args": list(args.script_args),
                              "metric_regex": args.metric_regex}
    return settings


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def cmd_launch(args: argparse.Namespace) -> int:
    try:
        cfg = make_config(_settings(args))
    except ConfigError as exc:
        print(f"ddpgui: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        with _open_target(args.host, args) as target:
            if cfg.mode == "script":
                from .core.uploads import upload_script_dir

                remote_dir = upload_script_dir(target, cfg.script.dir, progress=_upload_progress)
                cfg.script.dir = remote_dir
            result = start_run(target, cfg, progress=_upload_progress)
            print(f"launched {cfg.name!r} on {target.name} as {cfg.run_id} (pid {result.pid}, dir {result.run_dir})",
                  file=sys.stderr)
            if not args.follow:
                print(json.dumps({"run_id": cfg.run_id, "run_dir": result.run_dir, "pid": result.pid}))
                return EXIT_OK
            return follow_and_print(target, result.run_dir, LiveRun(total_steps=cfg.steps, total_minutes=cfg.minutes))
    except TargetError as exc:
        print(f"ddpgui: {exc}", file=sys.stderr)
        return EXIT_REFUSED


def _upload_progress(done: int, total: int, files_done: int, files_total: int) -> None:
    if total and sys.stderr.isatty():
        print(f"\ruploading {done / 1e6:.1f}/{total / 1e6:.1f} MB ({files_done}/{files_total} files)",
              end="" if done < total else "\n", file=sys.stderr)


def follow_and_print(target: Target, run_dir: str, live: LiveRun, line_interval_s: float = 0.5) -> int:
    """Follow a run to its end, printing a live line at most every ``line_interval_s``; returns the exit code."""
    offsets: dict[str, int] = {}
    tty = sys.stdout.isatty()
    last_print = 0.0
    status: dict = {}
    retries = 0
    try:
        while True:
            try:
                for message in target.follow(run_dir, offsets):
                    retries = 0
                    if isinstance(message, Chunk):
                        offsets[message.spool] = message.end
                        if message.spool.endswith(".jsonl"):
                            records, _bad = parse_records(message.data)
                            for rec in records:
                                live.add(message.spool, rec)
                                _print_event(message.spool, rec)
                    elif isinstance(message, End):
                        status = message.status
                    now = time.monotonic()
                    if now - last_print >= line_interval_s and live.step:
                        print(("\r" if tty else "") + progress_line(live), end="" if tty else "\n", flush=True)
                        last_print = now
                break
            except ConnectionLost as exc:
                retries += 1
                if retries > 5:
                    raise
                print(f"\n{exc}; reconnecting ({retries}/5)", file=sys.stderr)
                time.sleep(min(2 ** retries, 15))
    except KeyboardInterrupt:
        print(f"\ninterrupted; the run goes on on {target.name} ({run_dir})", file=sys.stderr)
        return EXIT_INTERRUPTED
    if tty:
        print()
    _print_summary(live, status)
    return _STATE_EXIT.get(status.get("state"), EXIT_FAILED)


def _print_event(spool: str, rec: dict) -> None:
    if spool != "events.jsonl":
        return
    event = rec.get("event")
    if event == "compile_end":
        print(f"  compiled in {rec.get('duration_s', 0):.1f} s", file=sys.stderr)
    elif event == "warmup_done":
        print(f"  warm-up done at step {rec.get('step')}", file=sys.stderr)
    elif event in ("warning", "retry"):
        print(f"  {event}: {rec.get('message') or rec.get('reason')}", file=sys.stderr)
    elif event == "inference_unsupported":
        print(f"  {rec.get('precision')}: {rec.get('reason')}", file=sys.stderr)


def _print_summary(live: LiveRun, status: dict) -> None:
    state = status.get("state", "unknown")
    print(f"run {state} after {format_duration(live.elapsed_s)}: {live.step} steps")
    if live.loss is not None:
        print(f"  final loss          {live.loss:.4f}")
    if live.steady_samples_per_s is not None:
        print(f"  steady throughput   {format_rate(live.steady_samples_per_s, 'samples/s')}")
    if live.summary.get("steady_tokens_per_s") is not None:
        print(f"  steady tokens       {format_rate(live.summary['steady_tokens_per_s'], 'tok/s')}")
    if live.mem_peak_gib is not None:
        print(f"  peak memory         {live.mem_peak_gib:.2f} GiB")
    if live.compile_s is not None:
        print(f"  compile time        {live.compile_s:.1f} s")
    for rec in live.inference:
        if rec.get("event") == "inference_summary":
            print(f"  inference {rec.get('precision'):5} p50 {rec.get('latency_p50_ms', 0):.2f} ms  "
                  f"p99 {rec.get('latency_p99_ms', 0):.2f} ms  {format_rate(rec.get('samples_per_s'), 'samples/s')}")
        else:
            print(f"  inference {rec.get('precision'):5} {rec.get('reason')}")
    if state == "failed":
        print(f"  error: {status.get('message')}")
        if status.get("hint"):
            print(f"  hint:  {status.get('hint')}")


def add_launch_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("launch", help="start a DDP run on a host (local = this computer)",
                       description="Start a DDP run. Everything after -- goes to your script.")
    p.add_argument("host", help="host profile name; 'local' is this computer")
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
    p.add_argument("--env", action="append", type=_env_pair, metavar="KEY=VALUE", help="environment for the run")
    p.add_argument("--name", default=None)
    p.add_argument("--tag", action="append", default=None)
    p.add_argument("--follow", action="store_true", help="stay and print live progress until the run ends")
    p.add_argument("--accept-new-host-key", action="store_true", help="trust an unknown SSH host key without asking")
    p.add_argument("script_args", nargs="*", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_launch)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ddpgui", description="Launch, watch and compare PyTorch DDP experiments.")
    from . import __version__

    parser.add_argument("--version", action="version", version=f"ddpgui {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_launch_command(sub)
    try:
        from .cli_hosts import add_host_commands
    except ImportError:
        pass
    else:
        add_host_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)
