"""The run's own lines in its log: started, compiled, warm-up done, and how it ended with its summary.

A run's stdout and stderr hold only what torchrun and the ranks print (torchrun's banner, warnings, a
traceback).  These lines say what the run did, from its event records (docs/PROTOCOL.md, ``events.jsonl``),
client-side, so the protocol stays as it is: :func:`event_lines` for one event as it arrives,
:func:`end_lines` for the end (``summary_lines`` of the run's :class:`~ddpgui.core.runs.live.RunSummary`), and
:func:`stored_lines` for a run read back from the store.  Each line starts with :data:`MARK` and the host's
time of the event in local time, so it stands out among torchrun's own lines and a search finds them all.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from remote_runner.scriptread.frames import without_ansi
from remote_runner.spools import FINAL_EVENTS

from ..hosts.profiles import host_display_name
from ..store import RunRecord, RunStore
from .config import settings_text
from .live import RunSummary, format_duration, run_summary, summary_lines

#: What every line of the run's own starts with.
MARK = "──"
#: The message the supervisor, ``runner stop`` and the Slurm stop record for a stop somebody asked for.
STOP_REQUESTED = "stopped on request"


def _clock(t: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "--:--:--"


def _line(t: float | None, text: str) -> str:
    return f"{MARK} {_clock(t)}  {text}"


def host_text(run: RunRecord) -> str:
    """Where the run runs, as the app names hosts: ``This computer``, ``gpu-box``, ``node-a + node-b``."""
    hosts = run.hosts or ([run.host] if run.host else [])
    names = list(dict.fromkeys(host_display_name(h) for h in hosts))
    return " + ".join(names) or "?"


def event_lines(event: dict, run: RunRecord | None = None) -> list[str]:
    """The lines one event adds to the log (none for the records the end's summary shows, nor the end itself)."""
    name, t = event.get("event"), event.get("t")
    if name == "started" and run is not None:
        config = run.config or {}
        processes = event.get("world_size") or config.get("nproc_per_node", 1) * config.get("nnodes", 1)
        nodes = event.get("nnodes") or config.get("nnodes", 1)
        where = f"{processes} processes on {nodes} nodes" if nodes > 1 else \
            f"{processes} process{'es' if processes != 1 else ''}"
        if config.get("gpus"):  # the host's GPUs it was given (CUDA_VISIBLE_DEVICES, nvidia-smi's indices)
            where += f" · GPUs {','.join(map(str, config['gpus']))}"
        return [_line(t, f"run started on {host_text(run)} · {where} · {settings_text(config)}")]
    if name == "started":
        return [_line(t, f"run started · {event.get('world_size', '?')} processes")]
    if name == "train_start":
        parts = [f"{event.get('backend', '?')} on {event.get('gpu_name') or event.get('device', '?')}"]
        if event.get("params") is not None:
            size = f" ({event['model_size']} {event.get('workload') or 'model'})" if event.get("model_size") else ""
            parts.append(f"{event['params']:,} parameters{size}")
        if event.get("global_batch") is not None:
            parts.append(f"global batch {event['global_batch']}")
        return [_line(t, "training · " + " · ".join(parts))]
    if name == "compile_start":
        return [_line(t, "torch.compile: compiling the model (the first steps wait for it)")]
    if name == "compile_end":
        seconds = event.get("duration_s")
        return [_line(t, f"compiled in {seconds:.1f} s" if seconds is not None else "compiled")]
    if name == "warmup_done":
        return [_line(t, f"warm-up done at step {event.get('step', '?')}: throughput counts from here")]
    if name == "inference_start":
        return [_line(t, "inference benchmark started")]
    if name == "retry":
        return [_line(t, f"{event.get('reason', 'the attempt failed')}: trying again (attempt {event.get('attempt')})")]
    if name == "placed":
        return [_line(t, f"placed on {event.get('node', '?')} (Slurm job {event.get('job', '?')})")]
    if name == "warning":
        return [_line(t, f"warning: {event.get('message', '')}")]
    return []


def end_words(summary: RunSummary) -> str:
    """``run finished``, ``run failed``, ``run stopped by you (SIGTERM)``, ``run stopped (requeued by Slurm)``."""
    if summary.state == "stopped":
        if not summary.message or summary.message == STOP_REQUESTED:
            return "run stopped by you (SIGTERM)"
        return f"run stopped ({summary.message})"
    return f"run {summary.state}"


def end_lines(summary: RunSummary, ended_t: float | None) -> list[str]:
    """The end and its summary, as ``ddpgui follow`` prints it (its first line in the log's words)."""
    first = f"{end_words(summary)} after {format_duration(summary.elapsed_s)}: {summary.steps} steps"
    indent = " " * (len(_clock(ended_t)) + 2)
    return [_line(ended_t, first)] + [f"{MARK} {indent}{line.strip()}" for line in summary_lines(summary)[1:]]


def run_end_lines(store: RunStore, run_id: str) -> list[str]:
    """An ended run's end lines, read from the store (a worker thread calls it)."""
    run = store.get_run(run_id)
    return end_lines(run_summary(store, run_id), run.ended_at)


@dataclass
class StoredLines:
    """A stored run, for its own lines: its record, node 0's events of its life (shown before its log tail, through
    :func:`event_lines`; a live view skips those it has shown already, by ``seq``), and its end (after the tail)."""

    run: RunRecord
    events: list[dict] = field(default_factory=list)
    after: list[str] = field(default_factory=list)

    def before(self, shown: set[int] = frozenset()) -> list[str]:
        """The lines of the run's life, but for those of the events (by ``seq``) in ``shown``."""
        return [line for event in self.events if event.get("seq", -1) not in shown or event.get("seq", -1) < 0
                for line in event_lines(event, self.run)]


def stored_lines(store: RunStore, run_id: str, node: int = 0) -> StoredLines:
    """A run read back from the store (a worker calls it): node 0's events (rank 0 writes the run's phases
    there) but the end, and once the run has ended its end lines.  The log tail has no times, so its lines go
    between the two."""
    run = store.get_run(run_id)
    events = [e for e in store.events(run_id, node) if e.get("event") not in FINAL_EVENTS]
    return StoredLines(run, events, run_end_lines(store, run_id) if not run.active else [])


def log_text(data: bytes) -> str:
    """A log's bytes as the app shows them: decoded, without the ANSI sequences a script's progress bars and
    colours write (a terminal acts on them; a text view would show them as boxes)."""
    return without_ansi(data.decode("utf-8", "replace"))
