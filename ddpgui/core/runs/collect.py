"""After a run's end is stored: tell its host what this client collected, and download the outputs to keep.

A host whose release action destroys its disk (core/hosts/release.py) waits until a client has every record
of every run, and the outputs the launch asked to keep (``keep_outputs``).  Once the follower has stored a
run's end, :class:`Collector` sends the host the offsets the store holds (``collected RUN_DIR``); for a run that
keeps its outputs it first downloads them (core/runs/pull.py: resumable, sha256-checked) into
``<data dir>/outputs/<run id>/`` and then says so too.  It works on a thread of its own: the host's follower goes
on meanwhile; a failure is logged and said again at the next end or adopt (nothing is lost: the host waits).
This computer's runs need none of it.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from remote_runner import outputs as runner_outputs

from ..paths import data_dir
from ..store import RunRecord, RunStore
from ..targets.base import TargetError
from ..targets.pool import TargetPool

log = logging.getLogger(__name__)


def kept_outputs_dir(run_id: str) -> Path:
    """Where the outputs a run keeps are downloaded on this computer."""
    return data_dir() / "outputs" / run_id


def _kept_mark(run_id: str, node: int) -> Path:
    """Written once a run's (node's) kept outputs are here and its host has heard so."""
    return data_dir() / "outputs" / ".kept" / f"{run_id}.node{node}"


class Collector:
    def __init__(self, store: RunStore, targets: TargetPool, is_local: Callable[[str], bool]):
        self.store, self.targets, self.is_local = store, targets, is_local
        self._busy: set[tuple[str, int]] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def run_ended(self, record: RunRecord, node: int) -> None:
        """Start collecting (run, node) unless it is This computer's or under way already."""
        host = record.hosts[node] if node < len(record.hosts) else record.host
        run_dir = record.run_dirs.get(node)
        if not run_dir or self.is_local(host) or record.config.get("scheduler") == "slurm":
            return
        with self._lock:
            if (record.id, node) in self._busy:
                return
            self._busy.add((record.id, node))
            thread = threading.Thread(target=self._collect, args=(record, node, host, run_dir), daemon=True,
                                      name=f"collect-{record.id}")
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def host_connected(self, host: str, release: dict | None) -> None:
        """A new connection to ``host``: collect what it still waits for -- the runs its release names as not
        collected, and this store's ended runs there whose kept outputs are not here yet (a client killed while
        it collected them: the next one, whichever it is, does it)."""
        wanted: set[tuple[str, int]] = set()
        for name in (release or {}).get("uncollected", []) + (release or {}).get("outputs_wanted", []):
            run_id, _, node = name.rpartition(".node")
            wanted.add((run_id, int(node)) if run_id and node.isdigit() else (name, 0))
        for record in self.store.list_runs(host=host):
            if record.config.get("keep_outputs") and not record.active:
                wanted.update((record.id, int(n)) for n in record.run_dirs if not _kept_mark(record.id, int(n)).exists())
        for run_id, node in sorted(wanted):
            try:
                record = self.store.get_run(run_id)
            except KeyError:
                continue  # a run of another client's store: its own client collects it
            if not record.active:
                self.run_ended(record, node)

    def wait(self, timeout: float) -> None:
        """Let the collections under way finish (at most ``timeout`` seconds in all): the CLI's last act."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _collect(self, record: RunRecord, node: int, host: str, run_dir: str) -> None:
        try:
            target = self.targets.target(host)
            outputs = False
            if record.config.get("keep_outputs"):
                outputs = self._keep_outputs(target, record, run_dir)
            target.collected(run_dir, self.store.offsets(record.id, node), outputs=outputs)
            if outputs:
                _kept_mark(record.id, node).parent.mkdir(parents=True, exist_ok=True)
                _kept_mark(record.id, node).touch()
        except (TargetError, OSError, KeyError) as exc:
            log.warning("run %s: could not tell %s what was collected: %s", record.id, host, exc)
        finally:
            with self._lock:
                self._busy.discard((record.id, node))

    def _keep_outputs(self, target, record: RunRecord, run_dir: str) -> bool:
        from .pull import list_outputs, pull, size_text

        listing = list_outputs(target, run_dir)
        if record.config.get("outputs_dir"):  # the folder the launch named holds what the run writes
            files = [f for f in listing.files if f.root == runner_outputs.OUTPUTS_ROOT]
        else:
            files = [f for f in listing.files if not runner_outputs.runners_own(f.path)]
        out = kept_outputs_dir(record.id)
        try:
            result = pull(target, run_dir, files, out, listing=listing)
        except (TargetError, OSError) as exc:
            log.warning("run %s: the outputs to keep were not downloaded: %s; the host keeps them until a client "
                        "downloads them (ddpgui pull %s --out DIR)", record.id, exc, record.id)
            return False
        log.info("run %s: outputs kept: %d file(s), %s, in %s (%s)", record.id, len(files),
                 size_text(sum(f.size for f in files)), out, result)
        return True
