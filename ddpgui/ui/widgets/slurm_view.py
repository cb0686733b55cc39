"""How the app shows a Slurm cluster: its partition's limits, a request's world, a queued run's reason.

The texts are pure (tested without a display); :class:`ElidedLabel` is a one-line label that never widens
its window: it elides what does not fit and shows the whole text as its tooltip.
"""
from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel

from ddpgui.core.hosts.slurm_options import SlurmOptions, format_time_limit, time_limit_seconds
from ddpgui.core.runs.nodes import NodeState, node_line
from ddpgui.core.slurm.partitions import Partition, find_partition
from ddpgui.core.store import RunRecord

#: Nodes a cluster launch may ask for while the partition's size is not known (no probe yet).
MAX_NODES_UNKNOWN = 512
#: Processes per node while the partition's CPUs are not known and the profile asks for no GPUs.
MAX_PROCESSES_UNKNOWN = 64


class ElidedLabel(QLabel):
    """One line of text elided at its end when it does not fit; the full text is its tooltip then."""

    def __init__(self, text: str = "", parent=None, **kwargs):
        super().__init__(text, parent, **kwargs)
        self.setMinimumWidth(1)  # a long text never widens the window

    def minimumSizeHint(self) -> QSize:
        return QSize(1, super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        return QSize(min(hint.width(), 240), hint.height())

    def is_elided(self) -> bool:
        return self.fontMetrics().horizontalAdvance(self.text()) > self.contentsRect().width()

    def setText(self, text: str) -> None:
        super().setText(text)
        self._update_tip()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._update_tip()

    def _update_tip(self) -> None:
        self.setToolTip(self.text() if self.is_elided() else "")

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        rect = self.contentsRect()
        text = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, rect.width())
        self.style().drawItemText(painter, rect, int(self.alignment() | Qt.AlignmentFlag.AlignVCenter),
                                  self.palette(), self.isEnabled(), text, self.foregroundRole())


def partitions_of(probe: dict | None) -> list[Partition]:
    """The cluster's partitions from a probe report (``report["slurm"]["partitions"]``); [] before a probe."""
    return [Partition.from_json(p) for p in ((probe or {}).get("slurm") or {}).get("partitions") or []]


def uses_gpus(options: SlurmOptions) -> bool:
    return options.gpus_per_node > 0


def processes_per_node(part: Partition | None, options: SlurmOptions) -> tuple[int, str]:
    """How many processes a node of the partition may run and what they are: one per GPU when the profile asks
    for GPUs (its GPUs per node, else the partition's), else one per CPU; guessed when the partition is unknown."""
    if uses_gpus(options):
        return max(1, options.gpus_per_node or (part.gpus_per_node if part else 0)), "GPUs"
    if part is not None and part.cpus_per_node:
        return part.cpus_per_node, "CPUs"
    return MAX_PROCESSES_UNKNOWN, "CPUs"


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def limits_text(part: Partition | None, options: SlurmOptions, partitions: list[Partition]) -> str:
    """``partition debug: 2 nodes (2 free), 2 CPUs/node, no GPUs, time limit unlimited; this profile asks for
    1:00:00`` (what the launch form is bounded by)."""
    if part is None:
        if not partitions:
            return f"partition {options.partition}: limits not known yet (test the host: sinfo tells them)"
        names = ", ".join(p.name for p in partitions)
        return f"partition {options.partition}: not on this cluster (it has {names})"
    free = f"{part.free_nodes} free" + (f", {part.down_nodes} down" if part.down_nodes else "")
    gpus = f"{part.gpus_per_node} GPUs/node" if part.gpus_per_node else "no GPUs"
    text = (f"partition {part.name}: {_count(part.nodes, 'node')} ({free}), {part.cpus_per_node} CPUs/node, {gpus}, "
            f"time limit {part.limit_text}")
    if not part.available:
        text += " (down)"
    try:
        asked = time_limit_seconds(options.time_limit)
    except ValueError:
        asked = None
    if options.time_limit.strip():
        text += f"; this profile asks for {format_time_limit(asked)}"
    else:
        text += "; this profile asks for the partition's default time"
    if options.gpus_per_node:
        text += f" and {_count(options.gpus_per_node, 'GPU')} per node"
    return text


def world_text(nnodes: int, nproc: int) -> str:
    """``2 nodes × 1 process per node = world 2``."""
    return f"{_count(nnodes, 'node')} × {_count(nproc, 'process', 'processes')} per node = world {nnodes * nproc}"


def cluster_partition(probe: dict | None, options: SlurmOptions) -> tuple[Partition | None, list[Partition]]:
    partitions = partitions_of(probe)
    return (find_partition(partitions, options.partition) if partitions else None), partitions


# ---- runs ----------------------------------------------------------------------------------------
def slurm_of(run: RunRecord) -> dict:
    return dict((run.environment or {}).get("slurm") or {})


def is_slurm_run(run: RunRecord) -> bool:
    return bool(slurm_of(run)) or (run.config or {}).get("scheduler") == "slurm"


def queued_text(message: str) -> str:
    """A queued run's message as a header: ``queued in Slurm (job 12) · Priority, other jobs are ahead of it``."""
    head, sep, reason = message.partition("): ")
    return f"{head}) · {reason}" if sep else (message or "queued in Slurm")


def state_cell(run: RunRecord) -> str:
    """The runs table's State cell: a queued job's raw reason beside its state (``queued: Priority``)."""
    reason = slurm_of(run).get("reason") if run.state == "queued" else ""
    return f"{run.state}: {reason}" if reason else run.state


def host_cell(run: RunRecord) -> str:
    """A Slurm run is one job on its cluster (``cluster (2 nodes)``); an SSH run lists its nodes, node 0 first."""
    if is_slurm_run(run) and run.hosts:
        return run.host + (f" ({len(run.hosts)} nodes)" if len(run.hosts) > 1 else "")
    return " + ".join(run.hosts)


def slurm_node_line(run_state: str, states: list[NodeState], slurm: dict) -> str:
    """The header's node line of a Slurm run: each node's state (``queued`` while its job waits) with its Slurm
    node name once the job has placed it (``node 1 (n2 of cluster): running``)."""
    if run_state == "queued":
        states = [NodeState(s.node, s.host, s.run_dir, state="queued", where=s.where) for s in states]
    job = ""
    if slurm.get("job_id"):
        job = f"Slurm job {slurm['job_id']}" + (f" on {slurm['nodes']}" if slurm.get("nodes") else "")
    return ":   ".join(part for part in (job, node_line(states)) if part)
