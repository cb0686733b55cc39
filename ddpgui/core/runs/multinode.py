"""One run across several hosts: the preflight, the launch and the stop of its nodes, on a TargetPool.

Node 0 hosts torchrun's rendezvous (its static TCPStore, see
``remote_runner.supervisor``); every node gets the same runner (by hash), the
same config with its ``node_rank``, the rendezvous endpoint ``ADDRESS:PORT``
and its profile's ``nccl_env``.  ADDRESS is node 0 as the other nodes reach it
(the profile's ``rdzv_address``, else its hostname, 127.0.0.1 for this
computer); PORT is picked free on node 0 by the preflight, which also proves
that each other node can connect to it (docs/PROTOCOL.md, "Multi-node").
The state of each node, once launched, is ddpgui.core.runs.nodes.
"""
from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from remote_runner.config import RunConfig

from ..errors import describe
from ..hosts import HostProfile, HostStore, parse_hop
from ..store import RunRecord, RunStore
from ..targets.base import Progress, Stream, Target, TargetError
from ..targets.pool import TargetPool
from . import launches
from .config import make_config

#: How long node 0's listener waits for the other nodes' checks.
LISTEN_TIMEOUT_S = 60.0
#: How long one node tries to connect to node 0's listener.
CHECK_TIMEOUT_S = 5.0


@dataclass
class Preflight:
    """What the preflight found: the rendezvous endpoint, each node's probe, warnings to show."""

    hosts: list[str]
    endpoint: str
    probes: list[dict]
    warnings: list[str] = field(default_factory=list)


def max_processes(probe: dict | None) -> tuple[int, str]:
    """How many processes a run may start on the host, and what they are (GPUs or CPU processes)."""
    if probe and probe.get("gpus") and probe.get("best_device") in (None, "cuda"):
        return len(probe["gpus"]), "GPUs"
    cores = (probe or {}).get("cpu_count") or 2
    return max(1, min(64, int(cores))), "processes (CPU, gloo)"


def rendezvous_address(profile: HostProfile) -> tuple[str, int]:
    """(address, port) at which the other nodes reach ``profile`` as node 0; port 0: pick a free one."""
    text = profile.rdzv_address or ("127.0.0.1" if profile.is_local else profile.hostname)
    _, address, port = parse_hop(text)
    return address, port if re.search(r":\d+$", text) else 0


def endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _node_error(node: int, host: str, what: str, exc: BaseException) -> TargetError:
    message, hint = describe(exc)
    return TargetError(f"node {node} ({host}) {what}: {message}", hint or "fix that host, then launch again")


def preflight(pool: TargetPool, profiles: HostStore, hosts: list[str], cfg: RunConfig,
              say: Callable[[str], None] | None = None) -> Preflight:
    """Check every node (``hosts``, profiles in ``profiles``) before anything starts; raises TargetError naming
    the node and what to do.  ``say`` hears what is being checked ("checking node 1 (B) can reach node 0 (A) at ADDRESS:PORT")."""
    say = say or (lambda text: None)
    if len(hosts) < 2:
        raise TargetError("a multi-node run needs at least two hosts", "name two or more host profiles, node 0 first")
    twice = sorted({h for h in hosts if hosts.count(h) > 1})
    if twice:
        raise TargetError(f"host {twice[0]!r} is named twice", "each node must be a different host profile (make a "
                          "second profile with another run root to run two nodes on one machine)")
    node_profiles = [profiles.get(h) for h in hosts]  # an unknown profile fails here
    targets: list[Target] = []
    probes: list[dict] = []
    for i, host in enumerate(hosts):
        say(f"connecting to node {i} ({host})…")
        try:
            targets.append(pool.target(host))
            probes.append(pool.probe(host))
        except Exception as exc:
            raise _node_error(i, host, "is not reachable", exc) from exc
    warnings = []
    kinds = set()
    for i, (host, probe) in enumerate(zip(hosts, probes)):
        limit, what = max_processes(probe)
        kinds.add(what)
        if cfg.nproc_per_node > limit:
            raise TargetError(f"node {i} ({host}) has {limit} {what}, the run asks for {cfg.nproc_per_node} per node",
                              f"lower the processes per node to {min(max_processes(p)[0] for p in probes)}, or "
                              "choose hosts with more")
        torch0, torch_i = (probes[0].get("torch") or {}).get("version"), (probe.get("torch") or {}).get("version")
        if i and torch_i != torch0:
            warnings.append(f"node {i} ({host}) has torch {torch_i} and node 0 ({hosts[0]}) has {torch0}: "
                            "collectives between different versions may fail or hang; install the same version")
    if len(kinds) > 1 and cfg.device == "auto":
        raise TargetError("some nodes have GPUs and some do not: " + ", ".join(
            f"node {i} ({h}): {max_processes(p)[1]}" for i, (h, p) in enumerate(zip(hosts, probes))),
            "all nodes must use the same device and backend: choose hosts alike, or set device cpu")
    address, port = rendezvous_address(node_profiles[0])
    say(f"opening the rendezvous port on node 0 ({hosts[0]})…")
    port, token, listener = _listen(targets[0], hosts[0], port, len(hosts) - 1)
    try:
        for i in range(1, len(hosts)):
            say(f"checking node {i} ({hosts[i]}) can reach node 0 ({hosts[0]}) at {endpoint(address, port)}…")
            try:
                targets[i].rdzv_check(address, port, token, CHECK_TIMEOUT_S)
            except Exception as exc:
                raise _node_error(i, hosts[i], f"cannot reach node 0 ({hosts[0]}) at {endpoint(address, port)}",
                                  exc) from exc
        _read_lines(listener, 10.0, until_end=True)  # the listener ends after the checks: the port is free again
    finally:
        listener.close()
    return Preflight(list(hosts), endpoint(address, port), probes, warnings)


def _listen(target: Target, host: str, port: int, expect: int) -> tuple[int, str, Stream]:
    """Start node 0's listener; (port, token, its stream)."""
    try:
        listener = target.rdzv_listen(port, expect, LISTEN_TIMEOUT_S)
    except Exception as exc:
        raise _node_error(0, host, "cannot hold a rendezvous port", exc) from exc
    try:
        reply = _read_lines(listener, 30.0)[0]
        if not reply.get("ok"):
            raise TargetError(reply.get("error", "the runner refused"), reply.get("hint", ""))
        return int(reply["port"]), reply["token"], listener
    except Exception as exc:
        listener.close()
        raise _node_error(0, host, "cannot hold a rendezvous port", exc) from exc


def _read_lines(stream: Stream, timeout: float, until_end: bool = False) -> list[dict]:
    """The JSON lines of ``stream`` (blank keep-alive lines skipped): the first one, or all until it ends."""
    deadline = time.monotonic() + timeout
    buffer, lines = b"", []
    while True:
        try:
            data = stream.read(max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise TargetError(f"no answer within {timeout:.0f} s", "check the host's load and try again") from None
        if not data:
            if until_end:
                return lines
            raise TargetError("the runner ended without an answer", "look at the runner's output on that host")
        buffer += data
        *complete, buffer = buffer.split(b"\n")
        lines += [json.loads(line) for line in complete if line.strip()]
        if lines and not until_end:
            return lines


def node_configs(cfg: RunConfig, profiles: list[HostProfile], rdzv_endpoint: str) -> list[RunConfig]:
    """Each node's config: the same run, its node rank, the endpoint, and its profile's NCCL/Gloo environment."""
    return [dataclasses.replace(cfg, nnodes=len(profiles), node_rank=i, rdzv_endpoint=rdzv_endpoint,
                                env={**cfg.env, **profile.nccl_env})
            for i, profile in enumerate(profiles)]


def launch_nodes(pool: TargetPool, store: RunStore, profiles: HostStore, hosts: list[str], settings: dict | RunConfig,
                 progress: Progress | None = None, checked: Preflight | None = None, sweep_id: str | None = None
                 ) -> RunRecord:
    """Preflight (unless ``checked``), then start the run on every node, node 0 first (RunManager.launch_nodes).

    A node that cannot be launched stops those already started; the run is then
    failed with that node named.  Nothing is created when the preflight fails.
    """
    cfg = settings if isinstance(settings, RunConfig) else make_config(settings)
    cfg = dataclasses.replace(cfg, nnodes=1, node_rank=0, rdzv_endpoint=None)  # the per-node fields come below
    if checked is None or checked.hosts != list(hosts):
        checked = preflight(pool, profiles, hosts, cfg)
    folder = None
    if cfg.mode == "script":  # read once for all nodes; the run's settings keep the folder here and the fingerprint
        folder = launches.read_script_folder(cfg)
        cfg.script = dataclasses.replace(cfg.script, dir=str(folder.path), fingerprint=folder.fingerprint)
    configs = node_configs(cfg, [profiles.get(h) for h in hosts], checked.endpoint)
    fingerprints = [pool.environment(h) for h in hosts]
    # launcher: who launches it, so a launch whose app was closed mid-way is known abandoned (core/launches.py)
    environment = dict(fingerprints[0], nodes=fingerprints, warnings=checked.warnings,
                       **launches.launcher(launches.STAGE_NODES))
    # The run's settings: node 0's config without any profile's environment (a rerun adds each node's again).
    settings_of_run = dataclasses.replace(configs[0], env=dict(cfg.env))
    store.create_run(cfg.run_id, name=cfg.name, tags=cfg.tags, hosts=hosts, config=settings_of_run.to_dict(),
                     state="launching", total_steps=cfg.steps, environment=environment, sweep_id=sweep_id)
    run_dirs: dict[int, str] = {}
    for i, (host, node_cfg) in enumerate(zip(hosts, configs)):
        try:
            target = pool.target(host, progress)
            if folder is not None:  # This computer's node works in the folder itself, the others get it uploaded
                launches.place_script(target, node_cfg, folder, progress)
            run_dirs[i] = target.launch(node_cfg).run_dir
        except Exception as exc:
            error = _node_error(i, host, "could not be launched", exc)
            try:
                stop_nodes(pool, RunRecord(cfg.run_id, hosts=hosts, run_dirs=run_dirs), list(run_dirs))
            except TargetError as stop_error:
                error.hint += f"; also, {stop_error}"
            launches.launch_failed(store, cfg.run_id, error, run_dirs=run_dirs)
            raise error from exc
        # Recorded node by node: after a crash here, reattach follows what did start (it ends by itself
        # when the other nodes never join, after rdzv_timeout_s).
        store.update_run(cfg.run_id, run_dirs=run_dirs)
    return store.update_run(cfg.run_id, state="starting", started_at=time.time())


def stop_nodes(pool: TargetPool, record: RunRecord, nodes: list[int]) -> None:
    """Stop these nodes of the run, all at once; a node that cannot be reached is logged, not raised."""
    errors: list[str] = []

    def stop(node: int) -> None:
        try:
            pool.target(record.hosts[node]).stop(record.run_dirs[node])
        except Exception as exc:
            errors.append(f"node {node} ({record.hosts[node]}): {exc}")

    threads = [threading.Thread(target=stop, args=(n,), daemon=True) for n in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise TargetError("could not stop " + "; ".join(errors), "stop the run again once the host is reachable")

