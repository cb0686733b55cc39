"""The run commands: ``launch``, ``follow``, ``runs``, ``show``, ``stop``, ``delete``, ``rerun`` and ``export``."""
from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time

from ..core.gpus.picker import GpuChoiceError
from ..core.runs import launches
from ..core.runs.config import make_config, settings_text
from ..core.runs.manager import RunManager
from ..core.runs.nodes import node_states
from ..core.runs.reported import script_reports, script_settings_lines
from ..core.runs.series import run_series_lines
from ..core.store import RunRecord, RunStore
from ..core.targets.fingerprint import summary as code_summary
from .common import EXIT_OK, CLIError, find_run, open_manager, terminal_text
from .options import add_launch_settings, gpu_settings, launch_settings, out_folder, run_name, run_tag
from .render import follow_live, print_runs_table


def register(sub: argparse._SubParsersAction) -> None:
    """Register ``launch`` and the run commands on the CLI's subparsers; each sets ``func(args) -> int``."""
    _add_launch_command(sub)
    _add_run_commands(sub)


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
    settings = launch_settings(args)
    with open_manager(args) as manager:
        if (args.nnodes or 1) > 1 and not (args.host and not args.nodes and manager.is_slurm(args.host)):
            raise CLIError(f"--nnodes {args.nnodes} is for a Slurm cluster host"
                           + (f", and {args.host} is not one" if args.host else ""),
                           "for one run across SSH hosts name them: ddpgui launch --nodes A,B (one node each)")
        if args.gpus is not None:
            settings = _on_gpus(manager, args, settings)
        if args.queue:
            return _queue(manager, args, settings)
        cfg = manager.config_for(args.host, settings) if args.host and not args.nodes else make_config(settings)
        if args.nodes:
            record = _launch_nodes(manager, args, cfg)
        elif args.host:
            record = manager.launch(args.host, cfg, progress=_upload_progress, follow=args.follow)
        else:
            raise CLIError("name the host to run on", "ddpgui launch HOST ..., or ddpgui launch --nodes A,B ... for "
                           "one run across several hosts")
        return _launched(manager, record, args.follow)


def _queue(manager: RunManager, args: argparse.Namespace, settings: dict) -> int:
    """``launch --queue``: the run goes to the host's own queue, after what runs there (a sweep of one run), and
    starts there with this computer gone."""
    from ..core.sweeps import SweepRunner
    from ..core.sweeps.hostqueue import queue_one

    if not args.host or args.nodes:
        raise CLIError("--queue queues a run on one SSH host", "ddpgui launch HOST --queue ...")
    make_config(settings)  # refused here, before anything is sent
    with SweepRunner(manager) as runner:
        try:
            cell = queue_one(runner, args.host, settings)
        except ValueError as exc:
            raise CLIError(str(exc), "launch it without --queue") from None
        if cell.state == "pending" and cell.run_id:
            print(f"queued on {args.host} as run {cell.run_id} (sweep {cell.sweep_id}): it starts when what runs "
                  f"there now has ended, with or without this computer; ddpgui follow {cell.run_id} once it runs, "
                  f"ddpgui sweep-stop {cell.sweep_id} to take it back", file=sys.stderr)
        elif cell.state not in ("pending", "running"):
            raise CLIError(f"the run was not queued: {cell.reason}", cell.hint or "")
        if not args.follow:
            print(json.dumps({"run_id": cell.run_id, "sweep_id": cell.sweep_id, "queued_on": args.host}))
            return EXIT_OK
        while cell.state == "pending" and manager.store.get_sweep(cell.sweep_id).active:
            time.sleep(0.5)  # behind what runs there now
            cell = manager.store.sweep_cells(cell.sweep_id)[0]
        if cell.state == "pending" or not runner.run_of(cell):
            raise CLIError(f"the queued run did not start: {cell.reason or manager.store.get_sweep(cell.sweep_id).message}",
                           cell.hint or "")
        return follow_live(manager, cell.run_id)


def _on_gpus(manager: RunManager, args: argparse.Namespace, settings: dict) -> dict:
    """``--gpus``: the settings for the chosen GPUs of the run's host(s), after one snapshot of each."""
    hosts = [h.strip() for h in args.nodes.split(",") if h.strip()] if args.nodes else [args.host] if args.host else []
    return gpu_settings(args.gpus, settings, hosts, manager)


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
    with open_manager(args) as manager:
        record = find_run(manager.store, args.run)
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
        if record.active or launches.unconfirmed(record):  # unconfirmed: its start's answer was lost to a drop
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
    print_runs_table(runs)
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    with RunStore() as store:
        record = find_run(store, args.run)
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
        code = code_summary((cfg.get("script") or {}).get("fingerprint"))
        if code:
            print(f"  code        {text(code)}")
        if cfg.get("mode") == "script":
            for label, line in script_settings_lines(cfg, script_reports(store, record.id)):
                print(f"  {label:<12}{text(line, True)}")
        if cfg.get("gpus") is not None:
            how = f", picked as {cfg['gpu_choice']}" if cfg.get("gpu_choice") else ""
            print(f"  gpus        {','.join(map(str, cfg['gpus']))} (CUDA_VISIBLE_DEVICES{how})")
        print(f"  steps       {record.last_step or 0}" + (f"/{record.total_steps}" if record.total_steps else ""))
        for label, line in run_series_lines(store, record.id):
            print(f"  {label:<12}{text(line, True)}")
        for key in ("steady_samples_per_s", "steady_tokens_per_s", "final_loss", "best_loss", "mem_peak_gib"):
            if record.summary.get(key) is not None:
                print(f"  {key:<22}{record.summary[key]:.4g}")
        env = record.environment
        if env.get("imported_from"):
            files = len(env.get("event_files") or [])
            print(terminal_text(f"  imported    from {env['imported_from']} ({files} event file{'' if files == 1 else 's'})"))
        elif any(env.get(key) is not None for key in ("hostname", "torch", "python")):  # the host's probe
            print(terminal_text(f"  environment {env.get('hostname') or '?'}: torch {env.get('torch') or 'none'}, "
                                f"CUDA {env.get('cuda') or 'none'}, GPU {env.get('gpu') or 'none'}"))
        else:  # a launch that ended before the host was probed
            print("  environment not probed")
        if record.corrupt_lines:
            print(f"  skipped     {record.corrupt_lines} corrupt spool line(s)")
    return EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    with open_manager(args) as manager:
        record = find_run(manager.store, args.run)
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
    with open_manager(args) as manager:
        record = find_run(manager.store, args.run)
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
    with open_manager(args) as manager:
        try:
            record = manager.rerun(find_run(manager.store, args.run).id, progress=_upload_progress,
                                   warn=lambda warning: print(f"warning: {terminal_text(warning)}; running on it "
                                                              "anyway", file=sys.stderr))
        except GpuChoiceError as exc:  # a GPU it had is lost or gone, or too few are free now
            raise CLIError(f"not rerun: {exc}", exc.hint) from None
        return _launched(manager, record, args.follow)


def cmd_export(args: argparse.Namespace) -> int:
    from ..core.outputs.points import write_points_csv
    from ..core.outputs.tensorboard import export_tensorboard

    out = out_folder(args.out)
    with RunStore() as store:
        runs = [find_run(store, text) for text in args.runs]
        if args.format == "tensorboard":
            written = export_tensorboard(store, [r.id for r in runs], out)
            for folder, scalars in written.items():
                print(f"{folder}  ({scalars} values)")
            print(f"open it with: tensorboard --logdir {shlex.quote(args.out)}")
            return EXIT_OK
        paths = write_points_csv(store, [r.id for r in runs], out)
    for path in paths:
        print(path)
    return EXIT_OK


def _upload_progress(done: int, total: int, files_done: int, files_total: int) -> None:
    if total and sys.stderr.isatty():
        print(f"\ruploading {done / 1e6:.1f}/{total / 1e6:.1f} MB ({files_done}/{files_total} files)",
              end="" if done < total else "\n", file=sys.stderr)


def _add_launch_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("launch", help="start a DDP run on a host (local = this computer)",
                       description="Start a DDP run. Everything after -- goes to your script.")
    p.add_argument("host", nargs="?", help="host profile name; 'local' is this computer")
    p.add_argument("--nodes", metavar="A,B,...", help="one run across several host profiles (multi-node torchrun), "
                   "node 0 first: it hosts the rendezvous; --nproc is per node")
    add_launch_settings(p)
    p.add_argument("--name", type=run_name, default=None)
    p.add_argument("--tag", type=run_tag, action="append", default=None)
    p.add_argument("--follow", action="store_true", help="stay and print live progress until the run ends")
    p.add_argument("--queue", action="store_true",
                   help="SSH hosts: run it after what runs there now, from the host's own queue (it starts with "
                        "this computer closed)")
    p.add_argument("--accept-new-host-key", action="store_true", help="trust an unknown SSH host key without asking")
    p.add_argument("script_args", nargs="*", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_launch)


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
    p = sub.add_parser("export", help="export runs' points as tidy CSV, or as a TensorBoard log folder")
    p.add_argument("runs", nargs="+")
    p.add_argument("--format", choices=("csv", "tensorboard"), default="csv",
                   help="tensorboard: one subfolder per run, every series at its step and wall time")
    p.add_argument("--out", required=True, help="output directory")
    p.set_defaults(func=cmd_export)
