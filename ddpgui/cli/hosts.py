"""``ddpgui hosts list|add|edit|remove|import-ssh-config|test`` and ``ddpgui probe HOST``.

Secrets are never command-line arguments (other users can read those in ps):
they are asked for on the terminal (.prompts), or read from stdin with ``--secret-stdin``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from ..core.hosts import AUTH_METHODS, LOCAL, HostProfile, HostStore, secrets
from ..core.ssh.files import NO_SFTP_NOTE
from ..core.targets.factory import check_python
from ..core.targets.ssh import SSHTarget
from ..core.targets.zipapp import build_runner
from .common import open_cli_target, terminal_text
from .options import env_pair
from .prompts import read_secret


def register(subparsers: argparse._SubParsersAction) -> None:
    """Register ``hosts ...`` and ``probe`` on the CLI's subparsers; each sets ``func(args) -> int``."""
    hosts = subparsers.add_parser("hosts", help="host profiles: list, add, edit, remove, import, test")
    sub = hosts.add_subparsers(dest="hosts_command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list the host profiles")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("add", help="add a host profile")
    p.add_argument("name")
    p.add_argument("--host", dest="hostname", required=True, help="host name or address")
    _profile_options(p, editing=False)
    p.set_defaults(func=cmd_add)

    p = sub.add_parser("edit", help="change a host profile (only the options given)")
    p.add_argument("name")
    p.add_argument("--host", dest="hostname", default=None, help="host name or address")
    _profile_options(p, editing=True)
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
            where = f"{p.user + '@' if p.user else ''}{p.hostname}:{p.port}"
            where += "".join(f" via {hop}" for hop in p.proxy_jump)
            auth = p.auth + (f" ({p.key_file})" if p.key_file else "")
        python = p.python or sys.executable
        price = f"  {p.price_per_hour:g}/h" if p.price_per_hour is not None else ""
        print(f"{p.name:<16} {terminal_text(where):<40} {terminal_text(auth):<28} {terminal_text(python)}{price}")
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    """Add a profile; ask for its password/passphrase when its authentication needs one."""
    store = HostStore()
    profile = HostProfile(name=args.name, **_changes(args))
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
    profile = dataclasses.replace(old, **_changes(args))
    if args.secret_stdin and (args.set_secret or (profile.secret_kind and profile.secret_kind != old.secret_kind)):
        _check_keyring(profile, from_stdin=True)  # refuse before changing: nothing half done
    store.update(profile)
    if args.rename:
        store.rename(profile.name, args.rename)
        profile = store.get(args.rename)
    print(f"updated {profile.name}")
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
    """Import ~/.ssh/config aliases, saying what was skipped and why."""
    report = HostStore().import_ssh_config(args.path)
    for name in report.added:
        print(f"added {name}")
    for name, why in report.skipped:
        print(f"skipped {name}: {why}")
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
    problems = report.get("problems") or []
    lines.append(f"Problems: {len(problems) or 'none'}")
    for problem in problems:
        lines.append(f"  [{problem.get('severity', '?')}] {problem.get('message')}")
        if problem.get("hint"):
            lines.append(f"      hint: {problem['hint']}")
    return "\n".join(lines)
