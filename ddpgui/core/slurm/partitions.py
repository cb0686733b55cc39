"""A cluster's partitions from ``sinfo``, and a run's request checked against them before it is submitted.

Pure; the command runs on the login node (:class:`ddpgui.core.targets.slurm.SlurmTarget`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..hosts.slurm_options import SlurmOptions, format_time_limit, time_limit_seconds

#: ``sinfo -h -o``: partition (``*`` marks the default), availability, time limit, node count, node state,
#: generic resources, CPUs and memory (MB) per node; one line per (partition, state, node shape).
SINFO_FORMAT = "%P|%a|%l|%D|%t|%G|%c|%m"
#: Node states (``%t``, short) in which a node can take a job now.
_FREE = {"idle", "mix"}
_DOWN = re.compile(r"^(down|drain|drng|fail|failg|maint|boot|powered_down|pow_dn|unk|futr|npc|resv)", re.IGNORECASE)


@dataclass
class Partition:
    name: str
    default: bool = False
    available: bool = True
    time_limit_s: int | None = None  # None: unlimited
    nodes: int = 0
    free_nodes: int = 0
    down_nodes: int = 0
    gpus_per_node: int = 0
    cpus_per_node: int = 0
    mem_per_node_mb: int = 0
    states: dict[str, int] = field(default_factory=dict)

    @property
    def limit_text(self) -> str:
        return format_time_limit(self.time_limit_s)

    def to_json(self) -> dict:
        return {"name": self.name, "default": self.default, "available": self.available,
                "time_limit_s": self.time_limit_s, "time_limit": self.limit_text, "nodes": self.nodes,
                "free_nodes": self.free_nodes, "down_nodes": self.down_nodes, "gpus_per_node": self.gpus_per_node,
                "cpus_per_node": self.cpus_per_node, "mem_per_node_mb": self.mem_per_node_mb, "states": self.states}

    @classmethod
    def from_json(cls, data: dict) -> Partition:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def gres_gpus(text: str) -> int:
    """GPUs per node in a ``%G`` field: ``gpu:4``, ``gpu:a100:8(S:0-1)``, ``gpu:2,shard:8``; 0 for ``(null)``."""
    total = 0
    for item in text.split(","):
        m = re.match(r"^gpu(?::[^:(]+)?:(\d+)", item.strip())
        if m:
            total += int(m.group(1))
    return total


def _limit(text: str) -> int | None:
    try:
        return time_limit_seconds(text)
    except ValueError:
        return None


def parse_sinfo(text: str) -> list[Partition]:
    """Partitions in the order sinfo lists them, with their nodes counted by state."""
    parts: dict[str, Partition] = {}
    for line in text.splitlines():
        cols = line.strip().split("|")
        if len(cols) != 8 or not cols[0]:
            continue
        name, avail, limit, count, state, gres, cpus, mem = cols
        default = name.endswith("*")
        name = name.rstrip("*")
        part = parts.setdefault(name, Partition(name, default=default, available=avail.lower() == "up",
                                                time_limit_s=_limit(limit)))
        n = int(count) if count.isdigit() else 0
        state = state.rstrip("*~#!%$@^-").lower()  # flags: not responding, powered down, ...
        part.nodes += n
        part.states[state] = part.states.get(state, 0) + n
        if state in _FREE:
            part.free_nodes += n
        elif _DOWN.match(state):
            part.down_nodes += n
        part.gpus_per_node = max(part.gpus_per_node, gres_gpus(gres))
        part.cpus_per_node = max(part.cpus_per_node, int(re.sub(r"\D.*", "", cpus) or 0))
        part.mem_per_node_mb = max(part.mem_per_node_mb, int(re.sub(r"\D.*", "", mem) or 0))
    return list(parts.values())


def find_partition(partitions: list[Partition], name: str) -> Partition | None:
    """The partition a profile names (the first of a comma list that exists)."""
    for wanted in name.split(","):
        for part in partitions:
            if part.name == wanted:
                return part
    return None


def request_problems(partitions: list[Partition], options: SlurmOptions, nnodes: int, nproc_per_node: int,
                     uses_gpus: bool) -> list[tuple[str, str, str]]:
    """What makes the request impossible on these partitions: ``(field, message, hint)`` triples.

    A request that only has to wait (nodes busy now) is no problem: Slurm queues it.
    """
    part = find_partition(partitions, options.partition)
    names = ", ".join(p.name for p in partitions) or "none"
    if part is None:
        return [("partition", f"the cluster has no partition {options.partition!r} (it has {names})",
                 "set the host profile's partition to one of them")]
    problems = []
    usable = part.nodes - part.down_nodes
    if nnodes > part.nodes:
        problems.append(("nnodes", f"partition {part.name} has {part.nodes} nodes, the run asks for {nnodes}",
                         f"ask for at most {part.nodes} nodes"))
    elif nnodes > usable:
        problems.append(("nnodes", f"partition {part.name} has {usable} usable node{'s' if usable != 1 else ''} "
                                   f"now ({part.down_nodes} down or drained), the run asks for {nnodes}",
                         "ask for fewer nodes, or wait until the administrators bring them back"))
    limit = _limit(options.time_limit) if options.time_limit else None
    if limit and part.time_limit_s and limit > part.time_limit_s:
        problems.append(("time_limit", f"the time limit {options.time_limit} is above partition {part.name}'s "
                                       f"{part.limit_text}: the job would never start",
                         f"lower the host profile's time limit to {part.limit_text} or less"))
    if uses_gpus:
        if options.gpus_per_node > part.gpus_per_node:
            problems.append(("gpus_per_node", f"partition {part.name} has {part.gpus_per_node} GPUs per node, "
                                              f"the profile asks for {options.gpus_per_node}",
                             f"set GPUs per node to {part.gpus_per_node} or less"))
        have = options.gpus_per_node or part.gpus_per_node
        if have and nproc_per_node > have:
            problems.append(("nproc_per_node", f"{nproc_per_node} processes per node but {have} GPUs per node",
                             f"use at most {have} processes per node (one per GPU)"))
    elif part.cpus_per_node and nproc_per_node > part.cpus_per_node:
        problems.append(("nproc_per_node", f"{nproc_per_node} processes per node but partition {part.name} has "
                                           f"{part.cpus_per_node} CPUs per node",
                         f"use at most {part.cpus_per_node} processes per node"))
    if not part.available:
        problems.append(("partition", f"partition {part.name} is {('down' if not part.available else '')}",
                         "choose another partition, or wait until the administrators bring it up"))
    return problems
