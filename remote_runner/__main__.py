"""Command line of the runner: ``probe | launch RUN_DIR | status RUN_DIR | stop RUN_DIR | follow RUN_DIR``
(and ``runs RUN_ROOT``, the run directories there; ``rdzv-listen`` / ``rdzv-check``, the multi-node preflight;
``slurm-job`` / ``slurm-node``, a run as one Slurm job: remote_runner.slurm; ``monitor``, the host's GPUs and
processes as a JSON line every few seconds: remote_runner.gpumonitor; ``outputs``, the files a run wrote:
remote_runner.outputs).

Each command prints JSON on stdout (``follow`` prints the framed stream of
docs/PROTOCOL.md) and exits 0 on success, 2 when the request was refused.
The same commands work from the zipapp: ``python runner-<hash>.pyz probe``.
"""
import argparse
import json
import os
import signal
import sys
from typing import Optional

from .capabilities import torch_too_old
from .scriptmode import SCRIPT_COMMAND


def _print(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def _refuse(error: str, hint: str = "", **fields: object) -> int:
    _print(dict(fields, ok=False, error=error, hint=hint))
    return 2


def _torch_problem() -> Optional[dict]:
    """Whether this interpreter has a usable torch, checked without importing it (fast)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return {"error": "PyTorch is not installed for %s" % sys.executable,
                "hint": "install torch into this environment (pip install torch), or point the host profile at "
                        "the Python of a venv/conda env that has it"}
    try:
        from importlib.metadata import version

        found = version("torch")
    except Exception:  # an unusual install without metadata: let torchrun tell
        return None
    too_old = torch_too_old(found)
    if too_old:
        return {"error": too_old,
                "hint": "upgrade torch in %s (pip install -U torch)" % sys.executable}
    return None


def cmd_probe(args: argparse.Namespace) -> int:
    from .probe import default_cache_dir, probe

    _print(probe(args.run_root, cache_dir=None if args.fresh else default_cache_dir()))
    return 0


def cmd_launch(args: argparse.Namespace) -> int:
    run_dir = os.path.abspath(args.run_dir)
    if not args.new:
        return _launch(run_dir, args)
    from .launching import Refused, launch_new

    try:
        return launch_new(run_dir, sys.stdin.buffer.read(), args.retry, lambda: _launch(run_dir, args), _print)
    except Refused as refused:
        return _refuse(refused.error, refused.hint, **refused.fields)


def _launch(run_dir: str, args: argparse.Namespace) -> int:
    """Check RUN_DIR's config and start its run (``--no-start``: only check it)."""
    from .config import ConfigError, load_config
    from .status import CONFIG, read_status
    from .supervisor import start

    if not os.path.isdir(run_dir):
        return _refuse("run directory %s does not exist" % run_dir, "the client creates it and writes config.json")
    os.chmod(run_dir, 0o700)
    try:
        config = load_config(os.path.join(run_dir, CONFIG))
    except FileNotFoundError:
        return _refuse("%s has no config.json" % run_dir)
    except ConfigError as exc:
        return _refuse(str(exc), "fix the field and launch again", field=exc.field)
    os.chmod(os.path.join(run_dir, CONFIG), 0o600)
    if config.mode == "script" and not os.path.isfile(os.path.join(config.script.dir, config.script.entry)):
        return _refuse("the script %s is not on this host" % os.path.join(config.script.dir, config.script.entry),
                       "upload the script directory first", field="script.entry")
    if args.no_start:  # a Slurm run: the job starts it on the compute nodes, whose Python may differ from this one
        _print({"ok": True, "pid": 0, "run_dir": run_dir})
        return 0
    problem = _torch_problem()
    if problem:
        return _refuse(problem["error"], problem["hint"], failure="torch_missing")
    status = read_status(run_dir)
    if status is not None:
        return _refuse("run %s was already launched (state %s)" % (run_dir, status.get("state")),
                       "use rerun to start it again")
    pid = start(run_dir, args.profile)
    _print({"ok": True, "pid": pid, "run_dir": run_dir})
    return 0


def _watch_release(args: argparse.Namespace) -> None:
    """A host with a release action is watched again once used (``launch``, ``queue-add``): after a reboot no
    watcher runs (remote_runner/release.py)."""
    from .release import ensure_watcher

    run_root = args.run_root if args.command == "queue-add" else os.path.dirname(os.path.dirname(
        os.path.abspath(args.run_dir)))
    try:
        ensure_watcher(run_root)
    except OSError:
        pass  # what was asked is done: the release is the watcher's business


def cmd_runs(args: argparse.Namespace) -> int:
    """Every run directory under RUN_ROOT/runs: its path, config, reconciled status and spool sizes."""
    from .spools import SPOOLS
    from .status import CONFIG, this_host
    from .supervisor import reconcile

    runs_dir = os.path.join(os.path.abspath(args.run_root), "runs")
    try:
        names = sorted(os.listdir(runs_dir))
    except FileNotFoundError:
        names = []
    runs = []
    for name in names:
        run_dir = os.path.join(runs_dir, name)
        if not os.path.isdir(run_dir):
            continue
        entry = {"run_dir": run_dir}  # type: dict
        try:
            with open(os.path.join(run_dir, CONFIG), encoding="utf-8") as fh:
                entry["config"] = json.load(fh)
        except (OSError, ValueError) as exc:
            entry["error"] = "no readable config.json: %s" % exc
        else:
            entry["status"] = reconcile(run_dir)
            entry["sizes"] = {spool: os.path.getsize(os.path.join(run_dir, spool)) for spool in SPOOLS
                              if os.path.isfile(os.path.join(run_dir, spool))}
        runs.append(entry)
    _print({"ok": True, "host": this_host(), "runs_dir": runs_dir, "runs": runs})
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from .supervisor import reconcile

    status = reconcile(os.path.abspath(args.run_dir))
    if status is None:
        return _refuse("no run in %s" % args.run_dir)
    _print(dict(status, ok=True))
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from . import proctree
    from .config import load_config
    from .status import CONFIG, FINAL_STATES, runs_elsewhere, this_host
    from .supervisor import reconcile, record_end, supervisor_pid

    run_dir = os.path.abspath(args.run_dir)
    if not os.path.isdir(run_dir):
        return _refuse("no run in %s: the directory is gone" % run_dir, "", failure="run_dir_missing")
    status = reconcile(run_dir)
    if status is None and supervisor_pid(run_dir) is None:
        # A launch that never started its supervisor (the client went away mid-launch): nothing runs.
        status = record_end(run_dir, "stopped", message="stopped before its launch had finished", hint="")
        _print(dict(status, ok=True, remaining_pids=[]))
        return 0
    status = status or {}
    elsewhere = runs_elsewhere(status)
    if elsewhere and status.get("state") in FINAL_STATES:
        _print(dict(status, ok=True, remaining_pids=[]))  # ended there; nothing here is the run's
        return 0
    if elsewhere:
        # A run root shared by several machines: the pids in status.json are that machine's, not ours.
        return _refuse("run %s runs on host %s, not on this host (%s): its processes are not signalled from here"
                       % (run_dir, elsewhere, this_host()),
                       "stop it through the host profile of %s (the directory is shared between the hosts)"
                       % elsewhere, host=elsewhere)
    try:
        grace = load_config(os.path.join(run_dir, CONFIG)).stop_grace_s
    except Exception:
        grace = 10.0
    supervisor = supervisor_pid(run_dir)
    roots = [p for p in (supervisor, status.get("torchrun_pid")) if p]
    pids = proctree.run_processes(run_dir, roots)
    if supervisor in pids:
        # The supervisor ends its tree and records "stopped"; we wait a little longer than its grace,
        # then end whatever is still there ourselves.
        proctree.signal_all([supervisor], signal.SIGTERM)
        pids = proctree.wait_gone(pids, grace + 3.0)
    proctree.end_run_processes(run_dir, pids, grace, "stop")
    status = reconcile(run_dir) or {}
    if status.get("state") not in FINAL_STATES:
        status = record_end(run_dir, "stopped", message="stopped on request", hint="")
    left = proctree.run_processes(run_dir, roots)
    _print(dict(status, ok=not left, remaining_pids=left))
    return 0 if not left else 1


def cmd_follow(args: argparse.Namespace) -> int:
    from .follow import follow

    return follow(os.path.abspath(args.run_dir), args.offsets, once=args.once)


def cmd_outputs(args: argparse.Namespace) -> int:
    from .outputs import main as outputs

    return outputs(os.path.abspath(args.run_dir), args.read, args.offset, args.sha256, _print, _refuse)


def cmd_rdzv_listen(args: argparse.Namespace) -> int:
    from .rendezvous import listen

    return listen(_print, args.port, args.expect, args.timeout)


def cmd_rdzv_check(args: argparse.Namespace) -> int:
    from .rendezvous import check

    result = check(args.address, args.port, args.token, args.timeout)
    _print(result)
    return 0 if result["ok"] else 2


def cmd_slurm_job(args: argparse.Namespace) -> int:
    from .slurm import job

    return job(args.base, args.nnodes, args.profile)


def cmd_slurm_node(args: argparse.Namespace) -> int:
    from .slurm import node

    return node(args.base, args.nnodes, args.profile)


def cmd_monitor(args: argparse.Namespace) -> int:
    from .gpumonitor import run_monitor

    if not args.interval >= 0.1:
        return _refuse("--interval %s is too short" % args.interval, "sample every 0.1 s or more (2 s is usual)")
    return run_monitor(args.interval, args.source)


def cmd_supervise(args: argparse.Namespace) -> int:
    from .supervisor import supervise

    return supervise(os.path.abspath(args.run_dir))


def cmd_train(args: argparse.Namespace) -> int:
    from .train import main_and_exit

    return main_and_exit(os.path.abspath(args.run_dir))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="remote_runner", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("probe", help="print what this host has, as JSON, with problems and hints")
    p.add_argument("--run-root", default=None, help="where runs will live (for the free-disk check)")
    p.add_argument("--fresh", action="store_true",
                   help="import torch again instead of reading what an earlier probe learned of it")
    p.set_defaults(func=cmd_probe)
    for name, func, text in (("launch", cmd_launch, "start the run described by RUN_DIR/config.json, detached"),
                             ("status", cmd_status, "print the run's status.json"),
                             ("stop", cmd_stop, "end every process of the run (SIGTERM, then SIGKILL)")):
        commands = sub.add_parser(name, help=text)
        commands.add_argument("run_dir")
        commands.set_defaults(func=func)
    launch = sub.choices["launch"]
    launch.add_argument("--new", action="store_true",
                        help="create RUN_DIR (refused when it exists) with the config.json read from stdin")
    launch.add_argument("--retry", action="store_true",
                        help="with --new: the client asks again after its link dropped; an existing RUN_DIR with "
                             "this very config.json is this launch's own (started already: its pid, resumed)")
    launch.add_argument("--profile", default=None, help="the client's name for this host (kept in status.json)")
    launch.add_argument("--no-start", action="store_true",
                        help="only create RUN_DIR and its config (a Slurm job starts the run: slurm-job)")
    for name, func, text in (("slurm-job", cmd_slurm_job, "inside a Slurm batch script: rendezvous, then srun "
                                                         "slurm-node on every node"),
                             ("slurm-node", cmd_slurm_node, "a task of the job's srun: this node's supervisor")):
        p = sub.add_parser(name, help=text)
        p.add_argument("base", help="the run directory (one node) or its prefix (BASE.node<k>)")
        p.add_argument("nnodes", type=int)
        p.add_argument("--profile", default=None)
        p.set_defaults(func=func)
    p = sub.add_parser("runs", help="list the run directories under RUN_ROOT/runs with config and status")
    p.add_argument("run_root")
    p.set_defaults(func=cmd_runs)
    p = sub.add_parser("follow", help="stream new spool records from byte offsets until the run ends")
    p.add_argument("run_dir")
    p.add_argument("--from", dest="offsets", default=None, help='JSON offsets, e.g. {"metrics.jsonl": 812}')
    p.add_argument("--once", action="store_true", help="send what is there now and stop")
    p.set_defaults(func=cmd_follow)
    p = sub.add_parser("outputs", help="list the files the run wrote (its folder and its outputs_dir), with sizes; "
                                       "or stream one (--read) or hash one (--sha256): remote_runner.outputs")
    p.add_argument("run_dir")
    p.add_argument("--read", default=None, metavar="FILE", help='JSON ["run"|"outputs", PATH]: stream that file')
    p.add_argument("--offset", type=int, default=0, help="with --read: from this byte (a resumed download)")
    p.add_argument("--sha256", default=None, metavar="FILE", help="print the sha256 of that file")
    p.set_defaults(func=cmd_outputs)
    p = sub.add_parser("rdzv-listen", help="multi-node preflight on node 0: hold a rendezvous port, answer checks")
    p.add_argument("--port", type=int, default=0, help="the port to hold (default: a free one)")
    p.add_argument("--expect", type=int, default=1, help="end after this many checks")
    p.add_argument("--timeout", type=float, default=60.0, help="end after this many seconds")
    p.set_defaults(func=cmd_rdzv_listen)
    p = sub.add_parser("rdzv-check", help="multi-node preflight on another node: reach node 0's rdzv-listen")
    p.add_argument("address")
    p.add_argument("port", type=int)
    p.add_argument("token")
    p.add_argument("--timeout", type=float, default=5.0)
    p.set_defaults(func=cmd_rdzv_check)
    p = sub.add_parser("monitor", help="a JSON line per snapshot of this host's GPUs, their processes and its load, "
                                       "every INTERVAL s until stdin reaches EOF or stdout is closed")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between snapshots (default 2)")
    p.add_argument("--source", choices=("auto", "nvml", "nvidia-smi", "none"), default="auto")
    p.set_defaults(func=cmd_monitor)
    from .queue import register as register_queue

    register_queue(sub, _print, _refuse)  # queue-add, queue-status, queue-stop: the host-side queue
    from .release import register as register_release

    register_release(sub, _print, _refuse)  # release-set, release-status, release-cancel, collected: release when idle
    for name, func in (("_supervise", cmd_supervise), ("_train", cmd_train)):
        p = sub.add_parser(name)
        p.add_argument("run_dir")
        p.set_defaults(func=func)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [SCRIPT_COMMAND] and len(argv) > 1:
        # Each rank of a script-mode run: ``_script ENTRY ARGS...``. Not argparse: the script's
        # arguments are its own, whatever they look like (--help included).
        from .scriptmode import run_script_and_exit

        run_script_and_exit(argv[1], argv[2:])
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        if code == 0 and args.command in ("launch", "queue-add"):
            _watch_release(args)
        return code
    except OSError as exc:
        # The host refused a file operation (a full disk, a directory removed under us): our own message as JSON
        # instead of a traceback the client would have to guess from.
        from .failures import os_error_text
        from .fsutil import NO_SPACE

        error, hint = os_error_text(exc)
        return _refuse(error, hint, failure="disk_full" if exc.errno in NO_SPACE else "os_error")


if __name__ == "__main__":
    sys.exit(main())
