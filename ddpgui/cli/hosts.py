"""``ddpgui hosts list|show|add|edit|remove|import-ssh-config|test`` and ``ddpgui probe HOST``.

A Slurm cluster is a profile of ``--kind slurm``: ``--host`` is its login node, and the Slurm options
(``--partition`` and the rest, :data:`SLURM_OPTIONS`) say how its jobs are submitted.

Secrets are never command-line arguments (other users can read those in ps):
they are asked for on the terminal (.prompts), or read from stdin with ``--secret-stdin``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from ..core.hosts import AUTH_METHODS, GPU_FLAGS, KINDS, LOCAL, HostProfile, HostStore, SlurmOptions, secrets
from ..core.ssh.files import NO_SFTP_NOTE
from ..core.ssh.shell import login_note
from ..core.targets.factory import check_python
from ..core.targets.ssh import SSHTarget
from ..core.targets.zipapp import build_runner
from .common import CLIError, open_cli_target, terminal_text
from .options import env_pair
from .prompts import read_secret
from .release import announce, release_changes, release_options
from .release import register as register_release


def register(subparsers: argparse._SubParsersAction) -> None:
    """Register ``hosts ...`` and ``probe`` on the CLI's subparsers; each sets ``func(args) -> int``."""
    hosts = subparsers.add_parser("hosts", help="host profiles: list, add, edit, remove, import, test")
    sub = hosts.add_subparsers(dest="hosts_command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list the host profiles")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="one host profile, every field (never a secret)")
    p.add_argument("name")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("add", help="add a host profile")
    p.add_argument("name")
    p.add_argument("--host", dest="hostname", required=True, help="host name or address (a cluster's login node)")
    _profile_options(p, editing=False)
    _slurm_options(p, editing=False)
    p.set_defaults(func=cmd_add)

    p = sub.add_parser("edit", help="change a host profile (only the options given)")
    p.add_argument("name")
    p.add_argument("--host", dest="hostname", default=None, help="host name or address (a cluster's login node)")
    _profile_options(p, editing=True)
    _slurm_options(p, editing=True)
    release_options(p)
    _connect_options(p)  # a release action is sent to the host at once
    p.add_argument("--rename", metavar="NEW_NAME", help="rename the profile (its keyring secrets move along)")
    p.add_argument("--set-secret", action="store_true", help="ask for the password/passphrase and store it")
    p.set_defaults(func=cmd_edit)

    p = sub.add_parser("remove", help="remove a host profile and its keyring secrets")
    p.add_argument("name")
    p.set_defaults(func=cmd_remove)

    p = sub.add_parser("import-ssh-config", help="add a profile for every Host alias of an OpenSSH config")
    p.add_argument("path", nargs="?", default=None, help="default: ~/.ssh/config")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("test", help="connect, check the host key and login, and check the remote Python")
    p.add_argument("name")
    _connect_options(p)
    p.set_defaults(func=cmd_test)
    register_release(sub, _connect_options)  # release-status, release-cancel, release

    p = subparsers.add_parser("probe", help="what a host has: GPUs, driver, CUDA, torch, NCCL, compile, problems")
    p.add_argument("name", metavar="HOST")
    p.add_argument("--json", action="store_true", help="print the probe's JSON")
    _connect_options(p)
    p.set_defaults(func=cmd_probe)


def _profile_options(p: argparse.ArgumentParser, editing: bool) -> None:
    default = None if editing else argparse.SUPPRESS
    p.add_argument("--port", type=int, default=default)
    p.add_argument("--user", default=default, help="login name (default: yours)")
    p.add_argument("--auth", choices=AUTH_METHODS, default=default,
                   help="agent (default), key, key_passphrase or password")
    p.add_argument("--key-file", default=default, help="private key file for key/key_passphrase")
    p.add_argument("--jump", action="append", default=default, metavar="HOP",
                   help="jump host: a profile name or user@host:port (repeat for a chain)")
    p.add_argument("--python", default=default, help="remote interpreter, e.g. ~/venv/bin/python (default python3)")
    p.add_argument("--run-root", default=default, help="where runs live on the host (default ~/.ddpgui)")
    p.add_argument("--price", type=float, default=default, metavar="PER_HOUR", help="price per hour, for costs")
    p.add_argument("--notes", default=default)
    p.add_argument("--rdzv-address", default=default, metavar="HOST[:PORT]",
                   help="multi-node: this host as the other nodes reach it when it is node 0 (default: --host); "
                        "with a port, the rendezvous uses that port")
    p.add_argument("--node-env", action="append", type=env_pair, default=default, metavar="KEY=VALUE",
                   help="environment for runs on this host, e.g. NCCL_SOCKET_IFNAME=eth0 (repeat; replaces the "
                        "profile's)")
    p.add_argument("--secret-stdin", action="store_true",
                   help="read the password/passphrase from the first line of stdin instead of asking")
    if editing:
        p.add_argument("--no-jump", action="store_true", help="remove all jump hosts")
        p.add_argument("--no-price", action="store_true", help="forget the price")


#: The Slurm options of ``hosts add/edit`` (argparse dest → SlurmOptions field).
SLURM_OPTIONS = {"partition": "partition", "account": "account", "qos": "qos", "time_limit": "time_limit",
                 "gpus_per_node": "gpus_per_node", "gpu_flag": "gpu_flag", "cpus_per_task": "cpus_per_task",
                 "mem": "mem", "sbatch_line": "sbatch_lines", "setup_line": "setup_lines",
                 "max_queued_jobs": "max_queued_jobs"}


def _slurm_options(p: argparse.ArgumentParser, editing: bool) -> None:
    p.add_argument("--kind", choices=KINDS, default=None,
                   help="ssh: one machine (the default); slurm: a Slurm cluster, --host is its login node and "
                        "runs are jobs submitted there")
    g = p.add_argument_group("Slurm cluster (with --kind slurm)")
    g.add_argument("--partition", help="partition the jobs go to (needed), e.g. gpu, or gpu,gpu-long")
    g.add_argument("--account", help="account to charge (default: yours)")
    g.add_argument("--qos", help="quality of service (default: the account's)")
    g.add_argument("--time-limit", metavar="HH:MM:SS",
                   help="each job's time limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS "
                        "(default: the partition's)")
    g.add_argument("--gpus-per-node", type=int, metavar="N", help="GPUs each node of a job gets (0: CPU jobs)")
    g.add_argument("--gpu-flag", choices=GPU_FLAGS,
                   help="how the GPUs are asked for: --gres=gpu:N (gres, the default) or --gpus-per-node=N")
    g.add_argument("--cpus-per-task", type=int, metavar="N",
                   help="CPUs of each node's task (the run's supervisor and its processes); 0: Slurm's default")
    g.add_argument("--mem", metavar="SIZE", help="memory per node, e.g. 32G (0: all of it)")
    g.add_argument("--sbatch-line", action="append", metavar="LINE",
                   help="an extra #SBATCH option, e.g. --sbatch-line=--constraint=a100 (repeat; "
                        "replaces the profile's)")
    g.add_argument("--setup-line", action="append", metavar="LINE",
                   help="a shell line each node runs before the run, e.g. 'module load cuda' (repeat; replaces "
                        "the profile's)")
    g.add_argument("--max-queued-jobs", type=int, metavar="N",
                   help="a sweep keeps at most N of its jobs in the queue at once (default 8)")
    if editing:
        g.add_argument("--no-sbatch-lines", action="store_true", help="remove all extra #SBATCH lines")
        g.add_argument("--no-setup-lines", action="store_true", help="remove all setup lines")


def _option(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _slurm_fields(args: argparse.Namespace, old: HostProfile | None) -> dict:
    """``kind`` and ``slurm`` of the profile the options describe (``old``: the profile edited)."""
    changes = {field: getattr(args, dest) for dest, field in SLURM_OPTIONS.items() if getattr(args, dest) is not None}
    for flag, field in (("no_sbatch_lines", "sbatch_lines"), ("no_setup_lines", "setup_lines")):
        if getattr(args, flag, False):
            changes.setdefault(field, [])
    if changes.get("cpus_per_task") == 0:
        changes["cpus_per_task"] = None
    kind = args.kind or (old.kind if old else "ssh")
    if kind != "slurm":
        given = [_option(d) for d in SLURM_OPTIONS if getattr(args, d) is not None]
        given += [_option(f) for f in ("no_sbatch_lines", "no_setup_lines") if getattr(args, f, False)]
        if given:
            what = f"{', '.join(given)} {'is an option' if len(given) == 1 else 'are options'} of Slurm clusters"
            if args.kind:
                raise CLIError(f"{what}, not of --kind {args.kind}", "leave out --kind ssh, or the Slurm options")
            if old is not None:
                raise CLIError(f"{what}, and {old.name} is an SSH host",
                               f"add --kind slurm (with --partition) to make {old.name} a Slurm cluster, reached "
                               "through its login node (--host)")
            raise CLIError(what, "add --kind slurm to add a Slurm cluster (--host is then its login node)")
        return {"kind": kind, "slurm": None}
    if old is not None and old.slurm is not None:
        return {"kind": kind, "slurm": dataclasses.replace(old.slurm, **changes)}
    if "partition" not in changes:
        raise CLIError("a Slurm cluster needs a partition to submit its jobs to",
                       "add --partition NAME (`sinfo -s` on the login node lists them)")
    return {"kind": kind, "slurm": SlurmOptions(**changes)}


def _connect_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--accept-new-host-key", action="store_true",
                   help="accept and save an unknown host key without asking (a changed key is still refused)")


_FIELDS = {"hostname": "hostname", "port": "port", "user": "user", "auth": "auth", "key_file": "key_file",
           "jump": "proxy_jump", "python": "python", "run_root": "run_root", "price": "price_per_hour",
           "notes": "notes", "rdzv_address": "rdzv_address"}


def _changes(args: argparse.Namespace) -> dict:
    changes = {field: getattr(args, option) for option, field in _FIELDS.items()
               if getattr(args, option, None) is not None}
    if getattr(args, "no_jump", False):
        changes["proxy_jump"] = []
    if getattr(args, "no_price", False):
        changes["price_per_hour"] = None
    if getattr(args, "node_env", None) is not None:
        changes["nccl_env"] = dict(args.node_env)
    return changes


def _check_keyring(profile: HostProfile, from_stdin: bool) -> bool:
    """Whether a secret can be stored for ``profile``; with ``--secret-stdin`` and no keyring, refuse
    (there is no one to ask later); on a terminal, say the secret will be asked for each time."""
    problem = secrets.storage_problem() if profile.secret_kind else None
    if problem is None:
        return True
    if from_stdin:
        raise secrets.SecretsUnavailable(
            f"the {profile.secret_kind} of {profile.name} cannot be stored: {problem.args[0]}",
            f"{secrets.INSTALL_HINT}; or leave out --secret-stdin: ddpgui then asks for the {profile.secret_kind} "
            "each time it connects", no_backend=True)
    print(f"{problem.args[0]}: the {profile.secret_kind} of {profile.name} will be asked for each time ddpgui "
          f"connects (hint: {secrets.INSTALL_HINT})")
    return False


def _store_secret(profile: HostProfile, from_stdin: bool) -> None:
    if profile.secret_kind is None or not _check_keyring(profile, from_stdin):
        return
    value = read_secret(profile, from_stdin)
    if value is None:
        print(f"no {profile.secret_kind} stored for {profile.name}: it will be asked for when connecting "
              "(or use: ddpgui hosts edit NAME --set-secret)")
        return
    try:
        secrets.set_secret(profile.name, profile.secret_kind, value)
    except secrets.SecretsUnavailable as exc:  # the profile itself is saved: say how to store the secret later
        raise secrets.SecretsUnavailable(
            f"{profile.name} is saved, but its {profile.secret_kind} was not stored: {exc.args[0]}",
            f"{exc.hint}; then: ddpgui hosts edit {profile.name} --set-secret", exc.no_backend) from exc
    print(f"{profile.secret_kind} for {profile.name} stored in the keyring ({secrets.backend_name()})")


def cmd_list(args: argparse.Namespace) -> int:
    """Print every profile (never a secret)."""
    store = HostStore()
    if args.json:
        print(json.dumps([p.to_json() for p in store.profiles()], indent=2, ensure_ascii=False))
        return 0
    for p in store.profiles():
        if p.is_local:
            where, auth = "this computer (no SSH)", "-"
        else:
            where = f"slurm:{p.slurm.partition} " if p.is_slurm else ""
            where += f"{p.user + '@' if p.user else ''}{p.hostname}:{p.port}"
            where += "".join(f" via {hop}" for hop in p.proxy_jump)
            auth = p.auth + (f" ({p.key_file})" if p.key_file else "")
        python = p.python or sys.executable
        price = f"  {p.price_per_hour:g}/h" if p.price_per_hour is not None else ""
        print(f"{p.name:<16} {terminal_text(where):<40} {terminal_text(auth):<28} {terminal_text(python)}{price}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Print one profile, every field, a cluster's Slurm options too (never a secret)."""
    profile = HostStore().get(args.name)
    if args.json:
        print(json.dumps(profile.to_json(), indent=2, ensure_ascii=False))
        return 0
    for label, value in show_fields(profile):
        print(f"{label + ':':<18} {terminal_text(value)}")
    return 0


def show_fields(p: HostProfile) -> list[tuple[str, str]]:
    """(label, value) of each field ``hosts show`` prints."""
    rows = [("name", p.name), ("kind", "Slurm cluster" if p.is_slurm else "this computer" if p.is_local
                                 else "SSH host")]
    if not p.is_local:
        rows += [("login node" if p.is_slurm else "host", f"{p.user + '@' if p.user else ''}{p.hostname}:{p.port}"),
                 ("auth", p.auth + (f" ({p.key_file})" if p.key_file else ""))]
        rows += [("jump host", hop) for hop in p.proxy_jump]
    rows += [("python", p.python or sys.executable), ("run root", p.run_root or "(the data folder)")]
    if p.price_per_hour is not None:
        rows.append(("price", f"{p.price_per_hour:g}/h"))
    if p.rdzv_address:
        rows.append(("rdzv address", p.rdzv_address))
    rows += [("node env", f"{k}={v}") for k, v in p.nccl_env.items()]
    if p.provider == "skypilot":
        rows.append(("SkyPilot cluster", p.cluster))
    if p.release is not None:
        rows.append(("release", p.release.describe()))
    if p.notes:
        rows.append(("notes", p.notes))
    if p.slurm is not None:
        s = p.slurm
        gpus = (f"{s.gpus_per_node} per node (--gres=gpu:{s.gpus_per_node})" if s.gpu_flag == "gres" else
                f"{s.gpus_per_node} per node (--gpus-per-node={s.gpus_per_node})") if s.gpus_per_node else "none"
        rows += [("partition", s.partition), ("account", s.account or "(your default)"),
                 ("qos", s.qos or "(default)"), ("time limit", s.time_limit or "(the partition's)"),
                 ("gpus", gpus), ("cpus per task", str(s.cpus_per_task or "(one per process)")),
                 ("mem", s.mem or "(the partition's default)"), ("max queued jobs", str(s.max_queued_jobs))]
        rows += [("#SBATCH", line) for line in s.sbatch_lines]
        rows += [("setup", line) for line in s.setup_lines]
    return rows


def cmd_add(args: argparse.Namespace) -> int:
    """Add a profile; ask for its password/passphrase when its authentication needs one."""
    store = HostStore()
    profile = HostProfile(name=args.name, **_changes(args), **_slurm_fields(args, None))
    if args.secret_stdin:
        _check_keyring(profile, from_stdin=True)  # refuse before adding: nothing half done
    store.add(profile)
    print(f"added {profile.name}")
    _store_secret(profile, args.secret_stdin)
    return 0


def cmd_edit(args: argparse.Namespace) -> int:
    """Change the given fields, then rename; store a secret when asked to or newly needed."""
    store = HostStore()
    old = store.get(args.name)
    profile = dataclasses.replace(old, **_changes(args), **_slurm_fields(args, old), **release_changes(args, old))
    if args.secret_stdin and (args.set_secret or (profile.secret_kind and profile.secret_kind != old.secret_kind)):
        _check_keyring(profile, from_stdin=True)  # refuse before changing: nothing half done
    store.update(profile)
    if args.rename:
        store.rename(profile.name, args.rename)
        profile = store.get(args.rename)
    print(f"updated {profile.name}")
    announce(profile, old, args, store)
    newly_needed = profile.secret_kind and profile.secret_kind != old.secret_kind
    if args.set_secret or newly_needed:
        if profile.secret_kind is None:
            print(f"{profile.name} authenticates with {profile.auth}: there is no secret to store")
            return 0
        _store_secret(profile, args.secret_stdin)
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    HostStore().remove(args.name)
    print(f"removed {args.name} and its keyring secrets")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """Import ~/.ssh/config aliases (its Includes followed), saying which files were read, what was skipped and why."""
    store = HostStore()
    report = store.import_ssh_config(args.path)
    for path in report.files:
        print(terminal_text(f"read {path}"))
    for note in report.notes:
        print(terminal_text(f"note: {note}"))
    for name in report.added:
        cluster = store.get(name).cluster
        print(f"added {name}" + (f" (SkyPilot cluster {terminal_text(cluster)})" if cluster else ""))
    for name, why in report.skipped:
        print(terminal_text(f"skipped {name}: {why}"))
    if not report.added:
        print("no profile added")
    return 0


def cmd_test(args: argparse.Namespace) -> int:
    """Connect (host key, login, jump hosts) and check the remote Python and torch."""
    store = HostStore()
    profile = store.get(args.name)
    with open_cli_target(args.name, args, store) as target:
        if isinstance(target, SSHTarget):
            target.exec(["true"], timeout=30)
            route = " → ".join(hop.label for hop in store.route(profile.name))
            print(f"connected: {route} (login: {target.connection.auth_used})")
            print(f"file transfers: {'SFTP' if target.connection.check_sftp() else NO_SFTP_NOTE}")
            if target.connection.login_noise:
                print(f"note: {terminal_text(login_note(target.connection.login_noise))}")
        check = check_python(target)
    print(terminal_text(f"python: {check.executable} ({check.python})"))
    print(terminal_text(f"torch: {check.torch or 'not installed'}"))
    for message, hint in check.problems:
        print(f"problem: {terminal_text(message, True)}\n  hint: {terminal_text(hint, True)}")
    return 1 if check.problems else 0


def cmd_probe(args: argparse.Namespace) -> int:
    """Put the runner on the host (once) and print what it finds."""
    with open_cli_target(args.name, args) as target:
        package = build_runner()
        uploaded = target.deploy(package)
        if uploaded:
            print(f"uploaded the runner ({uploaded / 1024:.0f} KiB) to {target.name}", file=sys.stderr)
        report = target.probe()
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(terminal_text(format_probe(report, args.name), multiline=True))  # the host's words, escaped
    return 1 if any(p.get("severity") == "error" for p in report.get("problems", [])) else 0


def format_probe(report: dict, name: str) -> str:
    """The probe report in plain words: GPUs, driver, CUDA, torch, NCCL, compile, problems with hints."""
    torch = report.get("torch") or {}
    compile_ = report.get("compile") or {}
    python = report.get("python") or {}
    nccl = torch.get("nccl") or {}
    lines = [f"{name if name != LOCAL else 'This computer'}: {report.get('hostname', '?')} — {report.get('os', '?')}",
             f"CPU: {report.get('cpu_count', '?')} × {report.get('cpu_model') or '?'}, RAM {report.get('ram_gib', '?')} GiB,"
             f" free disk {report.get('disk_free_gib', '?')} GiB ({report.get('disk_path', '?')})"]
    gpus = report.get("gpus") or []
    lines.append(f"GPUs: {len(gpus) or 'none'}")
    for gpu in gpus:
        memory = f"{gpu['memory_total_gib']} GiB" if gpu.get("memory_total_gib") is not None else "? GiB"
        cc = f", compute {gpu['compute_capability']}" if gpu.get("compute_capability") else ""
        lines.append(f"  [{gpu.get('index')}] {gpu.get('name')} {memory}{cc}")
    lines.append(f"Driver: {report.get('driver_version') or 'none'}"
                 f" (supports CUDA {report.get('driver_cuda_version') or '-'})")
    lines.append(f"Python: {python.get('version', '?')} ({python.get('executable', '?')})")
    if torch.get("version"):
        lines.append(f"torch: {torch['version']}, CUDA build {torch.get('cuda_build') or 'none (CPU)'}, "
                     f"CUDA available: {'yes' if torch.get('cuda_available') else 'no'}")
        lines.append(f"NCCL: {(nccl.get('version') or 'yes') if nccl.get('available') else 'no'}; "
                     f"gloo: {'yes' if torch.get('gloo_available') else 'no'}")
    else:
        lines.append(f"torch: not usable ({report.get('torch_import_error') or 'not installed'})")
    lines.append(f"torch.compile: {'possible' if compile_.get('possible') else 'not possible'} on "
                 f"{compile_.get('device', '?')} (C compiler: {compile_.get('c_compiler') or 'none'})")
    lines.extend(f"Note: {note}" for note in report.get("notes") or [])
    if report.get("slurm"):
        lines[0] += " (the login node: the jobs run on the cluster's nodes)"
        lines.extend(slurm_lines(report["slurm"]))
    problems = report.get("problems") or []
    lines.append(f"Problems: {len(problems) or 'none'}")
    for problem in problems:
        lines.append(f"  [{problem.get('severity', '?')}] {problem.get('message')}")
        if problem.get("hint"):
            lines.append(f"      hint: {problem['hint']}")
    return "\n".join(lines)


def slurm_lines(slurm: dict) -> list[str]:
    """A cluster's probe: its Slurm version, partitions (nodes, free, limits) and the user's queue."""
    lines = [f"Slurm: {slurm.get('version') or '?'}; this profile submits to partition {slurm.get('partition')}",
             f"  {'partition':<14} {'state':<6} {'nodes':<18} {'CPUs':>5} {'GPUs':>5} {'memory':>9}  time limit"]
    for part in slurm.get("partitions") or []:
        nodes = f"{part['nodes']} ({part['free_nodes']} free" + (f", {part['down_nodes']} down)" if part["down_nodes"]
                                                                 else ")")
        memory = f"{part['mem_per_node_mb'] / 1024:.1f} GiB" if part.get("mem_per_node_mb") else "?"
        name = part["name"] + ("*" if part.get("default") else "")
        lines.append(f"  {name:<14} {'up' if part.get('available') else 'down':<6} {nodes:<18} "
                     f"{part.get('cpus_per_node', 0):>5} {part.get('gpus_per_node', 0):>5} {memory:>9}  "
                     f"{part.get('time_limit') or '?'}")
    queue = slurm.get("queue") or []
    lines.append(f"Your queue: {len(queue) or 'empty'}" + (" job(s)" if queue else ""))
    for job in queue[:20]:
        why = f" ({job['reason']})" if job.get("reason") else ""
        lines.append(f"  {job['id']:<10} {job['state']}{why} {job.get('nodes') or ''}".rstrip())
    if len(queue) > 20:
        lines.append(f"  … and {len(queue) - 20} more (squeue -u $USER)")
    return lines
