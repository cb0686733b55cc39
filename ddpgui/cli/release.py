"""A host's release action on the command line: ``hosts edit NAME --release-*``, ``hosts release-status NAME``,
``hosts release-cancel NAME`` and ``hosts release NAME`` (now).

The profile keeps the action (core/hosts/release.py); the host's watcher decides when (remote_runner/release.py),
so the release happens with the laptop closed.  ``hosts edit`` sends the action to the host at once when it can
(and says so when it cannot: every later connection sends it again).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from ..core.hosts import HostProfile, HostStore
from ..core.hosts.release import PRESETS, ReleasePolicy, preset_policy, status_text
from ..core.targets.base import Target, TargetError
from .common import CLIError, open_manager, terminal_text


def release_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("release when idle (SSH hosts; the host decides, the laptop may be closed)")
    g.add_argument("--release-preset", choices=sorted(PRESETS), default=None,
                   help="a release action in the provider's words: " + "; ".join(
                       f"{name}: {preset.command}" for name, preset in PRESETS.items()))
    g.add_argument("--release-command", default=None, metavar="LINE",
                   help="the command that releases the instance, e.g. 'sudo shutdown -h now'")
    g.add_argument("--release-on", choices=("host", "local"), default=None,
                   help="where the command runs: on the host (default) or on this computer (sky down CLUSTER)")
    g.add_argument("--release-kind", choices=("stop", "terminate"), default=None,
                   help="stop: the disk is kept (default); terminate: the disk is destroyed, so the release waits "
                        "until every record and kept output is collected")
    g.add_argument("--release-after", type=float, default=None, metavar="MINUTES",
                   help="idle minutes before the release (default 30)")
    g.add_argument("--release-destroy-after", type=float, default=None, metavar="HOURS",
                   help="terminate only: destroy even what no client collected, HOURS after the host became idle")
    g.add_argument("--no-release", action="store_true", help="never release this host (removes the action)")


def release_changes(args: argparse.Namespace, old: HostProfile | None) -> dict:
    """``{"release": ...}`` when a release option was given, else {}."""
    given = [o for o in ("release_preset", "release_command", "release_on", "release_kind", "release_after",
                         "release_destroy_after") if getattr(args, o, None) is not None]
    if getattr(args, "no_release", False):
        if given:
            raise CLIError("--no-release removes the release action: give it alone")
        return {"release": None}
    if not given:
        return {}
    current = old.release if old is not None else None
    if args.release_preset:
        cluster = old.cluster if old is not None else ""
        base = preset_policy(args.release_preset, cluster)
    elif args.release_command:
        base = ReleasePolicy(command=args.release_command)
    elif current is not None:
        base = current
    else:
        raise CLIError("a release action needs its command", "give --release-command LINE or --release-preset NAME")
    fields = {"command": args.release_command, "on": args.release_on, "kind": args.release_kind,
              "after_min": args.release_after, "destroy_uncollected_after_h": args.release_destroy_after}
    fields = {k: v for k, v in fields.items() if v is not None}
    if current is not None and not args.release_preset and args.release_after is None:
        fields.setdefault("after_min", current.after_min)
    return {"release": dataclasses.replace(base, **fields)}


def announce(profile: HostProfile, old: HostProfile | None, args: argparse.Namespace, store: HostStore) -> None:
    """Say what the new action does (a terminate loudly), and send it to the host now when it can be reached."""
    if (old.release if old is not None else None) == profile.release:
        return
    if profile.release is not None:
        print(terminal_text(f"release: {profile.release.describe()}"))
        if not profile.release.keeps_disk:
            print("warning: this action destroys the instance's disk; what no client collected is lost "
                  + ("after the hours you gave" if profile.release.destroy_uncollected_after_h is not None else
                     "never: the release waits for it"), file=sys.stderr)
    try:
        with _target(profile.name, args) as target:
            state = target.release_set(profile.release.for_host(profile.name) if profile.release else None)
        if profile.release is None:
            store.release_cleared(profile.name)
    except (TargetError, OSError) as exc:
        print(terminal_text(f"note: {profile.name} was not reached ({exc}); it gets the change at its next "
                            "connection (a launch, a sweep, the app)"
                            + ("" if profile.release else ": until then its old release action stays set there")),
              file=sys.stderr)
        return
    for line in status_text(state, profile.price_per_hour):
        print(terminal_text(line))


@contextmanager
def _target(name: str, args: argparse.Namespace) -> Iterator[Target]:
    """The host through the run manager's pool, as every command reaches one: connected, the runner deployed, the
    profile's action sent at the connection, and what the host waits for collected before the command ends."""
    with open_manager(args) as manager:
        yield manager.targets.target(name)


def _profile(name: str) -> HostProfile:
    profile = HostStore().get(name)
    if profile.is_local or profile.is_slurm:
        raise CLIError(f"{profile.display_name} has no release: "
                       + ("it is this computer" if profile.is_local else "Slurm frees a cluster's nodes itself"))
    return profile


def cmd_release_status(args: argparse.Namespace) -> int:
    profile = _profile(args.name)
    with _target(args.name, args) as target:
        state = target.release_status()
    if args.json:
        print(json.dumps(state, indent=2, sort_keys=True))
        return 0
    if profile.release is None and state.get("policy"):
        print(f"note: {profile.name}'s profile has no release action, but the host still has one: "
              f"ddpgui hosts edit {profile.name} --no-release removes it")
    for line in status_text(state, profile.price_per_hour):
        print(terminal_text(line))
    return 1 if (state.get("last") or {}).get("ok") is False else 0


def cmd_release_cancel(args: argparse.Namespace) -> int:
    profile = _profile(args.name)
    with _target(args.name, args) as target:
        state = target.release_cancel()
    for line in status_text(state, profile.price_per_hour):
        print(terminal_text(line))
    return 0


def cmd_release_now(args: argparse.Namespace) -> int:
    """Run the release action now (after a confirmation): on the host, or here for an action on this computer."""
    profile = _profile(args.name)
    policy = profile.release
    if policy is None:
        raise CLIError(f"{profile.name} has no release action",
                       f"set one: ddpgui hosts edit {profile.name} --release-preset shutdown (or --release-command)")
    what = "keeps its disk" if policy.keeps_disk else "DESTROYS its disk and everything on it"
    if not args.yes:
        if not sys.stdin.isatty():
            raise CLIError(f"releasing {profile.name} needs confirmation", "pass --yes to release without asking")
        if input(f"Release {profile.name} now with {policy.command!r} ({what})? [y/N] ").strip().lower() not in (
                "y", "yes"):
            print("not released")
            return 1
    if policy.on == "local":
        proc = subprocess.run(policy.command, shell=True, capture_output=True, text=True, timeout=600)
        output = (proc.stdout + proc.stderr).strip()
        if output:
            print(terminal_text(output, True))
        if proc.returncode:
            raise CLIError(f"{policy.command!r} exited with {proc.returncode}", "run it by hand to see why")
        print(f"released {profile.name}")
        return 0
    with _target(args.name, args) as target:
        result = target.exec(["/bin/sh", "-c", policy.command], timeout=600)
    output = (result.stdout + result.stderr).decode("utf-8", "replace").strip()
    if output:
        print(terminal_text(output, True))
    if result.rc:
        raise CLIError(f"{policy.command!r} exited with {result.rc} on {profile.name}",
                       "e.g. sudo needs a rule that asks no password for this command")
    print(f"released {profile.name}")
    return 0


def register(sub: argparse._SubParsersAction, connect_options) -> None:
    p = sub.add_parser("release-status", help="whether and when the host releases itself, and how the last "
                                              "release went")
    p.add_argument("name")
    p.add_argument("--json", action="store_true", help="print the host's JSON")
    connect_options(p)
    p.set_defaults(func=cmd_release_status)
    p = sub.add_parser("release-cancel", help="hold the host's release until it is used again")
    p.add_argument("name")
    connect_options(p)
    p.set_defaults(func=cmd_release_cancel)
    p = sub.add_parser("release", help="release the host now with its release action (asks first)")
    p.add_argument("name")
    p.add_argument("--yes", action="store_true", help="do not ask")
    connect_options(p)
    p.set_defaults(func=cmd_release_now)
