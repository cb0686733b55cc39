"""Taking runs back from their hosts into the store (``ddpgui adopt HOST``): after the run store was lost or
moved aside, or from another computer.

The runner's ``runs`` lists the run directories under a host's run root with their
config.json and status.json; each run not in the store gets its record from them and
is followed from byte 0 by the ordinary follow machinery, so every point is stored
exactly once and a run still going on is followed live.  The nodes of a multi-node run
(one directory per node, ``<run id>.node<k>``) become one run; name all its hosts.
"""
from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from remote_runner.config import ConfigError, config_from_dict
from remote_runner.status import FINAL_STATES

from ..store import RunNotFound, RunRecord

if TYPE_CHECKING:
    from .manager import RunManager


@dataclass
class _NodeDir:
    host: str  # the profile that lists it
    machine: str  # that host's hostname, as the runner reports it
    run_dir: str
    config: dict
    status: dict | None


@dataclass
class AdoptResult:
    """What :func:`adopt_runs` did: runs taken into the store, run ids it had already, directories left alone."""

    adopted: list[RunRecord] = field(default_factory=list)
    known: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (host:run dir, why)
    ended: list[str] = field(default_factory=list)  # adopted runs that had ended on the host already


def adopt_runs(manager: RunManager, hosts: list[str], follow: bool = True) -> AdoptResult:
    """Create a record for every run on ``hosts`` that the store lacks and follow it (``follow``) from offset 0.

    Adopting again adds nothing: runs already in the store are only counted in ``known``.
    """
    result = AdoptResult()
    hosts = list(dict.fromkeys(hosts))
    found: dict[str, dict[int, list[_NodeDir]]] = {}
    for host in hosts:
        listing = manager.targets.target(host).list_runs()
        for entry in listing.get("runs", []):
            config = entry.get("config")
            where = f"{host}:{entry.get('run_dir')}"
            if not isinstance(config, dict):
                result.skipped.append((where, entry.get("error") or "no config.json"))
                continue
            try:
                cfg = config_from_dict(config)
            except ConfigError as exc:
                result.skipped.append((where, f"its config.json is not one this version reads: {exc}"))
                continue
            run_id = cfg.run_id or posixpath.basename(entry["run_dir"])
            node = cfg.node_rank if cfg.nnodes > 1 else 0
            found.setdefault(run_id, {}).setdefault(node, []).append(
                _NodeDir(host, listing.get("host", ""), entry["run_dir"], config, entry.get("status")))
    for run_id, nodes in sorted(found.items()):
        try:
            manager.store.get_run(run_id)
            result.known.append(run_id)
            continue
        except RunNotFound:
            pass
        nnodes = max(int(d.config.get("nnodes") or 1) for dirs in nodes.values() for d in dirs)
        missing = [k for k in range(nnodes) if k not in nodes]
        if missing:
            where = ", ".join(f"{d.host}:{d.run_dir}" for dirs in nodes.values() for d in dirs)
            result.skipped.append((where, f"run {run_id} has {nnodes} nodes and node(s) "
                                          f"{', '.join(map(str, missing))} are not on the hosts named: adopt it "
                                          "naming every host of the run, node 0 first"))
            continue
        chosen = {k: _pick(nodes[k], k, hosts) for k in range(nnodes)}
        record = _create(manager, run_id, chosen)
        result.adopted.append(record)
        if record.state == "failed" and record.failure == "launch_interrupted":
            continue
        if all((d.status or {}).get("state") in FINAL_STATES for d in chosen.values()):
            result.ended.append(run_id)
        if follow:
            manager.follow(run_id)
    return result


def _pick(dirs: list[_NodeDir], node: int, hosts: list[str]) -> _NodeDir:
    """The host to follow (and stop) node ``node`` through when several see its directory (a shared run root):
    the machine its status names, among those the profile that launched it, else the host named at position
    ``node`` (hosts are named in node order)."""
    ran_there = [d for d in dirs if (d.status or {}).get("host") in (None, d.machine)] or dirs
    launcher = [d for d in ran_there if (d.status or {}).get("profile") == d.host]
    by_position = [d for d in ran_there if node < len(hosts) and d.host == hosts[node]]
    return (launcher or by_position or ran_there)[0]


def _create(manager: RunManager, run_id: str, nodes: dict[int, _NodeDir]) -> RunRecord:
    """The run's record from its node directories' config.json and status.json."""
    first = nodes[0]
    config = dict(first.config)
    hosts = [nodes[k].host for k in sorted(nodes)]
    if len(nodes) > 1:  # the run's settings, as launch_nodes stored them: without node 0's profile environment
        profile_env = manager.hosts.get(first.host).nccl_env
        config["env"] = {k: v for k, v in (config.get("env") or {}).items() if profile_env.get(k) != v}
    status = first.status or {}
    fingerprints = [manager.targets.environment(h) for h in hosts]
    environment = fingerprints[0] if len(hosts) == 1 else dict(fingerprints[0], nodes=fingerprints, warnings=[])
    run_dirs = {k: d.run_dir for k, d in nodes.items()}
    record = manager.store.create_run(
        run_id, name=config.get("name", ""), tags=config.get("tags") or [], hosts=hosts, config=config,
        environment=environment, run_dirs=run_dirs, total_steps=config.get("steps"),
        created_at=status.get("started_at"), state="starting")
    if not first.status:
        return manager.store.update_run(
            run_id, state="failed", failure="launch_interrupted", ended_at=time.time(),
            message=f"its launch on {first.host} never completed (no status.json in {first.run_dir})",
            hint="rerun it, or delete it to remove its directory")
    started = {"started_at": status.get("started_at")}
    if status.get("state") not in FINAL_STATES:
        started["state"] = status.get("state") or "starting"
    return manager.store.update_run(run_id, **started) if any(started.values()) else record
