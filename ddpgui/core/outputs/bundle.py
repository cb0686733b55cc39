"""JSON bundles of runs: every stored thing of them in one file, and its import into another ddpgui's store.

    bundle.write_bundle(store, run_ids, path)     # runs.json: records, points, telemetry, events, logs
    bundle.import_bundle(other_store, path)       # the same runs in another ddpgui's store
"""
from __future__ import annotations

import base64
import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path

from remote_runner.spools import EVENTS, METRICS, SPOOLS, TELEMETRY
from remote_runner.status import FINAL_STATES

from ..errors import HintedError
from ..runs.protocol import LOG_SPOOLS, Chunk
from ..store import RunRecord, RunStore, StoreError
from .files import output_file

BUNDLE_FORMAT = "ddpgui-runs"
BUNDLE_VERSION = 1


class BundleError(HintedError, StoreError):
    """A bundle that cannot be imported; ``hint`` says what to do."""


def bundle_of(store: RunStore, run_ids: Sequence[str]) -> dict:
    """Every stored thing of the runs: their records, every spool record per node, and the log tails."""
    runs = []
    for run_id in run_ids:
        run = store.get_run(run_id)
        nodes = {}
        for node in run.nodes:
            spools = {spool: store.records(run_id, spool, node, as_stored=True)  # its loss choice travels too
                      for spool in (METRICS, TELEMETRY, EVENTS)}
            spools.update({spool: base64.b64encode(store.log_tail(run_id, spool, node)).decode("ascii")
                           for spool in LOG_SPOOLS})
            nodes[str(node)] = spools
        record = dataclasses.asdict(run)
        record["run_dirs"] = {str(k): v for k, v in run.run_dirs.items()}
        runs.append({"record": record, "nodes": nodes})
    return {"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, "exported_at": time.time(), "runs": runs}


def write_bundle(store: RunStore, run_ids: Sequence[str], path: str | Path) -> Path:
    path = Path(path)
    with output_file(path, encoding="utf-8") as fh:
        fh.write(json.dumps(bundle_of(store, run_ids), separators=(",", ":")))
    return path


def _read_bundle(path: Path) -> dict:
    hint = "export one with: ddpgui compare RUN... --format json --out DIR"
    try:
        bundle = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror or exc}", "check the path") from exc
    except ValueError as exc:
        raise BundleError(f"{path} is not a ddpgui run bundle: not JSON ({exc})", hint) from exc
    if not isinstance(bundle, dict) or bundle.get("format") != BUNDLE_FORMAT or not isinstance(bundle.get("runs"),
                                                                                                 list):
        raise BundleError(f"{path} is not a ddpgui run bundle (no \"format\": \"{BUNDLE_FORMAT}\" with runs)", hint)
    if bundle.get("version") != BUNDLE_VERSION:
        raise BundleError(f"{path} is a run bundle of version {bundle.get('version')!r}; this ddpgui reads version "
                          f"{BUNDLE_VERSION}", "export it again with this ddpgui's version, or update ddpgui")
    for i, entry in enumerate(bundle["runs"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("record"), dict) or not isinstance(
                entry["record"].get("id"), str) or not isinstance(entry.get("nodes"), dict):
            raise BundleError(f"{path}: run {i} of the bundle has no record with an id, or no nodes", hint)
    return bundle


def _chunks(spools: dict) -> list[Chunk]:
    chunks = []
    for spool in SPOOLS:
        value = spools.get(spool)
        if not value:
            continue
        if spool in LOG_SPOOLS:
            data = base64.b64decode(value)
        else:
            data = b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in value)
        chunks.append(Chunk(spool, 0, len(data), data))
    return chunks


#: Run fields set after the records are in (a final state compacts the blocks once, at the end).
_LATER = ("state", "message", "hint", "failure", "failed_rank", "exit_code", "started_at", "ended_at", "summary",
          "last_step", "corrupt_lines", "loss_series")


def import_bundle(store: RunStore, path: str | Path) -> list[RunRecord]:
    """Add the bundle's runs to ``store``, each with its record, points, telemetry, events and log tails.

    Refused, with nothing added, when any of its runs is already in the store.  A run that
    was still active when exported is imported as ``stopped`` (its copy ends there; the
    client's own warning events are not carried, ``corrupt_lines`` is).
    """
    path = Path(path)
    bundle = _read_bundle(path)
    ids = [entry["record"]["id"] for entry in bundle["runs"]]
    present = []
    for run_id in ids:
        try:
            store.get_run(run_id)
            present.append(run_id)
        except KeyError:
            pass
    if present:
        raise BundleError(f"{len(present)} of the {len(ids)} runs in {path.name} are already in the run store: "
                          f"{', '.join(present[:5])}; nothing was imported",
                          "delete them first (ddpgui delete RUN --keep-remote) or import into another store")
    created: list[str] = []
    try:
        for entry in bundle["runs"]:
            rec = entry["record"]
            run_dirs = {int(k): v for k, v in (rec.get("run_dirs") or {}).items()}
            store.create_run(rec["id"], name=rec.get("name", ""), tags=rec.get("tags") or [],
                             hosts=rec.get("hosts") or [], config=rec.get("config") or {},
                             environment=rec.get("environment") or {}, run_dirs=run_dirs, state="importing",
                             total_steps=rec.get("total_steps"), sweep_id=rec.get("sweep_id"),
                             created_at=rec.get("created_at"))
            created.append(rec["id"])
            for node, spools in entry["nodes"].items():
                store.store_chunks(rec["id"], int(node), _chunks(spools))
            later = {k: rec[k] for k in _LATER if k in rec}
            if later.get("state") not in FINAL_STATES:
                later["message"] = f"imported from {path.name} while it was {later.get('state')}; the copy ends there"
                later["state"] = "stopped"
            store.update_run(rec["id"], **later)
    except Exception:
        for run_id in created:
            store.delete_run(run_id)
        raise
    return [store.get_run(run_id) for run_id in ids]
