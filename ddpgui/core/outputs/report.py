"""Data exports of a comparison: tidy CSV, a summary CSV, a booktabs LaTeX table, and a JSON bundle of runs.

Intended use (``ddpgui compare`` / ``ddpgui import`` and the app)::

    written = report.export(comparison, store, out_dir, formats=("csv", "tex", "json"))
    report.write_bundle(store, run_ids, path)     # runs.json: records, points, telemetry, events, logs
    report.import_bundle(other_store, path)       # the same runs in another ddpgui's store

The tidy point CSVs are those of :func:`ddpgui.core.outputs.points.export_csv`; the summary
rows and the table hold the numbers of :mod:`ddpgui.core.analysis` (docs/ANALYSIS.md).
"""
from __future__ import annotations

import base64
import csv
import dataclasses
import json
import math
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from remote_runner.spools import EVENTS, METRICS, SPOOLS, TELEMETRY
from remote_runner.status import FINAL_STATES

from ..analysis import HIGHER_IS_BETTER, RUN_METRICS, Comparison, Estimate, Ratio
from ..runs.protocol import LOG_SPOOLS, Chunk
from ..store import RunRecord, RunStore, StoreError
from .figures import Exported, caption_text
from .points import export_csv

FORMATS = ("csv", "tex", "json")
BUNDLE_FORMAT = "ddpgui-runs"
BUNDLE_VERSION = 1
#: Unit of each summarised metric ("{throughput}" is the runs' own throughput unit).
UNITS = {"throughput": "{throughput}", "mem_peak_gib": "GiB", "compile_s": "s", "time_to_n_s": "s",
         "final_loss": "", "best_loss": "", "gpu_util_pct": "%", "energy_j": "J", "energy_per_1000_steps_j": "J",
         "duration_s": "s", "cost": "price unit", "cost_per_1000_steps": "price unit",
         "speedup": "×", "memory_saving": "fraction", "scaling_efficiency": "fraction"}
SUMMARY_COLUMNS = ("level", "id", "label", "runs", "metric", "unit", "value", "std", "ci95", "low", "high", "n",
                   "over", "reason")


class BundleError(StoreError):
    """A bundle that cannot be imported; ``hint`` says what to do."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


def export(comparison: Comparison, store: RunStore, out_dir: str | Path, formats: Iterable[str] = FORMATS) -> Exported:
    """Write the data formats asked for: csv (points, telemetry, summary), tex (summary.tex), json (runs.json)."""
    formats = set(formats)
    unknown = formats - set(FORMATS)
    if unknown:
        raise ValueError(f"unknown format {', '.join(sorted(unknown))}: choose from {', '.join(FORMATS)}")
    result = Exported()
    if not formats:
        return result
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run_ids = [r.run_id for r in comparison.runs]
    if "csv" in formats:
        result.paths += export_csv(store, run_ids, out)
        result.paths.append(write_summary_csv(comparison, out / "summary.csv"))
    if "tex" in formats:
        result.paths.append(write_latex(comparison, out / "summary.tex"))
    if "json" in formats:
        result.paths.append(write_bundle(store, run_ids, out / "runs.json"))
    return result


# --------------------------------------------------------------------------------------------------
# Summary CSV


def metric_unit(metric: str, comparison: Comparison) -> str:
    """The unit of a summarised metric (throughput in the compared runs' own unit)."""
    unit = UNITS.get(metric, "")
    return comparison.runs[0].throughput_unit if unit == "{throughput}" else unit


def _number(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _estimate_row(est: Estimate) -> list:
    return [_number(est.mean), _number(est.std), _number(est.ci95), _number(est.low), _number(est.high), est.n,
            est.over, est.reason]


def _ratio_row(r: Ratio) -> list:
    n = f"{r.n[0]}/{r.n[1]}"
    return [_number(r.value), "", "", _number(r.low), _number(r.high), n, r.over, r.reason]


def write_summary_csv(comparison: Comparison, path: Path) -> Path:
    """One row per (run or group, metric): value, spread, 95% interval, n and what n counts, or why none.

    Run rows hold a run's own values (throughput over its steady intervals); group rows the
    estimates over repeats plus speedup, memory saving and scaling efficiency against the baseline.
    """
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(SUMMARY_COLUMNS)
        for i, g in enumerate(comparison.groups):
            runs = " ".join(g.run_ids)
            for metric in RUN_METRICS:
                w.writerow(["group", i, g.label, runs, metric, metric_unit(metric, comparison),
                            *_estimate_row(g.metrics[metric])])
            for metric, ratios in (("speedup", comparison.speedup), ("memory_saving", comparison.memory_saving),
                                   ("scaling_efficiency", comparison.scaling)):
                w.writerow(["group", i, g.label, runs, metric, UNITS[metric], *_ratio_row(ratios[g.key])])
            for run in g.runs:
                for metric in RUN_METRICS:
                    if metric == "throughput":
                        row = _estimate_row(run.throughput)
                    else:
                        value = run.value(metric)
                        row = [_number(value), "", "", "", "", 1 if value is not None else 0, "run",
                               run.reasons.get(metric, "") if value is None else ""]
                    w.writerow(["run", run.run_id, g.label, run.run_id, metric, metric_unit(metric, comparison), *row])
    return path


# --------------------------------------------------------------------------------------------------
# LaTeX


_TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "×": r"$\times$",
                "±": r"$\pm$"}


def tex_escape(text: str) -> str:
    """Text safe in a LaTeX table cell (pdflatex, no extra packages)."""
    return "".join(_TEX_ESCAPES.get(c, c) for c in text)


def format_pm(mean: float, ci: float | None) -> str:
    """``mean \\pm ci`` with the interval to 2 significant digits and the mean to the same decimals."""
    if ci is None or not math.isfinite(ci) or ci <= 0:
        return f"{mean:.4g}"
    decimals = max(0, 1 - math.floor(math.log10(ci)))
    return f"{mean:.{decimals}f} \\pm {ci:.{decimals}f}"


#: (column title, metric) of the LaTeX table.
_TEX_COLUMNS = (
    ("throughput ({unit})", "throughput"),
    ("speedup", "speedup"),
    ("peak memory (GiB)", "mem_peak_gib"),
    ("compile (s)", "compile_s"),
    ("final loss", "final_loss"),
    ("energy (kJ)", "energy_j"),
    ("cost", "cost"),
)


def _cell(comparison: Comparison, group, metric: str) -> tuple[float | None, float | None]:
    """(mean, ci95 half-width) of one table cell; the speedup's interval made symmetric by its wider side."""
    if metric == "speedup":
        r = comparison.speedup[group.key]
        if r.value is None:
            return None, None
        ci = None if r.low is None or r.high is None or r.reason == "the baseline" else max(r.value - r.low,
                                                                                              r.high - r.value)
        return r.value, ci
    est = group.metrics[metric]
    scale = 1e-3 if metric == "energy_j" else 1.0
    return (None if est.mean is None else est.mean * scale), (None if est.ci95 is None else est.ci95 * scale)


def write_latex(comparison: Comparison, path: Path) -> Path:
    """A booktabs tabular: one row per setting, mean ± 95% CI per column, the best value of each column bold.

    Columns without any value are left out.  "Best" is the highest throughput and speedup, the
    lowest of the others; a tie goes to the first row.
    """
    unit = comparison.runs[0].throughput_unit
    groups = comparison.groups
    columns = []
    for title, metric in _TEX_COLUMNS:
        cells = [_cell(comparison, g, metric) for g in groups]
        if any(mean is not None for mean, _ in cells):
            columns.append((title.format(unit=unit), metric, cells))
    lines = [f"% ddpgui {time.strftime('%Y-%m-%d')}: mean ± 95% CI half-width; n = runs per setting "
             "(for n = 1, the CI is over the run's steady logged intervals)."]
    caption = caption_text(comparison)
    if caption:
        lines.append(f"% environment: {caption}")
    lines.append(f"% speedup vs {comparison.baseline_group.label}; bold: the best value of each column.")
    lines.append(r"\begin{tabular}{lr" + "r" * len(columns) + "}")
    lines.append(r"\toprule")
    lines.append(" & ".join(["setting", "$n$"] + [tex_escape(title) for title, _, _ in columns]) + r" \\")
    lines.append(r"\midrule")
    best = []
    for _, metric, cells in columns:
        sign = -1.0 if HIGHER_IS_BETTER[metric] else 1.0  # the smallest of sign × mean is the best; ties: first row
        best.append(min((sign * m, i) for i, (m, _) in enumerate(cells) if m is not None)[1])
    for i, g in enumerate(groups):
        row = [tex_escape(g.label), str(g.n)]
        for (_, _, cells), b in zip(columns, best):
            mean, ci = cells[i]
            if mean is None:
                row.append("--")
                continue
            text = format_pm(mean, ci)
            row.append(f"$\\mathbf{{{text}}}$" if i == b else f"${text}$")
        lines.append(" & ".join(row) + r" \\")
    lines.append(r"\bottomrule")
    lines.append(r"\end{tabular}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------------
# JSON bundle


def bundle_of(store: RunStore, run_ids: Sequence[str]) -> dict:
    """Every stored thing of the runs: their records, every spool record per node, and the log tails."""
    runs = []
    for run_id in run_ids:
        run = store.get_run(run_id)
        nodes = {}
        for node in run.nodes:
            spools = {spool: store.records(run_id, spool, node) for spool in (METRICS, TELEMETRY, EVENTS)}
            spools.update({spool: base64.b64encode(store.log_tail(run_id, spool, node)).decode("ascii")
                           for spool in LOG_SPOOLS})
            nodes[str(node)] = spools
        record = dataclasses.asdict(run)
        record["run_dirs"] = {str(k): v for k, v in run.run_dirs.items()}
        runs.append({"record": record, "nodes": nodes})
    return {"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, "exported_at": time.time(), "runs": runs}


def write_bundle(store: RunStore, run_ids: Sequence[str], path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(bundle_of(store, run_ids), separators=(",", ":")), encoding="utf-8")
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
          "last_step", "corrupt_lines")


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
