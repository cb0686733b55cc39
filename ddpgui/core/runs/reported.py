"""What a script run was asked and what the script says it ran with: the run's settings warnings.

The host reads the script's start-up lines for its precision, compile, batch size, world size and backend
(``script_reports`` events, remote_runner/scriptread/reports.py); a setting the run gave the script that the
script reports otherwise is a warning on the run: "asked bf16, the script reports fp32", and so is a world size
other than the processes the run started ("asked 4 processes, the script reports 2").
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from remote_runner.scriptread.reports import reported_matches
from remote_runner.spools import EVENTS

from ..analysis.run_stats import world_size
from ..scripts import FRAMEWORK_NAMES
from ..store import RunStore


@dataclass(frozen=True)
class Reported:
    setting: str
    value: object
    line: str


def script_reports(store: RunStore, run_id: str) -> dict[str, Reported]:
    """setting → the last value the script reported for it."""
    out: dict[str, Reported] = {}
    for rec in store.records(run_id, EVENTS):
        if rec.get("event") == "script_reports" and isinstance(rec.get("setting"), str):
            out[rec["setting"]] = Reported(rec["setting"], rec.get("value"), str(rec.get("line") or ""))
    return out


def settings_warnings(config: dict, reports: dict[str, Reported]) -> list[str]:
    """One sentence per setting the script was given and reports otherwise."""
    script = config.get("script") or {}
    out = []
    for setting in script.get("applied") or []:
        report = reports.get(setting)
        if report is None or reported_matches(config.get(setting), report.value, setting) is not False:
            continue
        out.append(f"asked {setting} {config.get(setting)}, the script reports {report.value} "
                   f"(\u201c{report.line}\u201d)")
    world = reports.get("world_size")
    asked = world_size(config)
    if world is not None and reported_matches(asked, world.value, "world_size") is False:
        out.append(f"asked {asked} processes, the script reports {world.value} (\u201c{world.line}\u201d)")
    return out


def passed_text(config: dict) -> str:
    """What the script was given for its settings: ``--bf16 True ACCELERATE_MIXED_PRECISION=bf16``, or ""."""
    script = config.get("script") or {}
    words = [shlex.join(script.get("passed_args") or [])] if script.get("passed_args") else []
    words += [f"{k}={v}" for k, v in (script.get("passed_env") or {}).items()]
    return " ".join(words)


def _said(report: Reported) -> str:
    """``precision bf16``, ``batch size 8``, ``2 processes``: one report as a line shows it."""
    if report.setting == "world_size":
        return f"{report.value} processes"
    return f"{report.setting.replace('_', ' ')} {report.value}"


def script_settings_lines(config: dict, reports: dict[str, Reported]) -> list[tuple[str, str]]:
    """(label, text) lines for ``ddpgui show`` and the run header's tooltip: what the settings became for the
    script, what it reported, and each mismatch."""
    script = config.get("script") or {}
    lines = []
    if script.get("applied"):
        given = ", ".join(f"{s} {config.get(s)}" for s in script["applied"])
        framework = FRAMEWORK_NAMES.get(script.get("framework") or "", "your mapping")
        lines.append(("passed", f"{given} → {passed_text(config)} ({framework})"))
    if reports:
        lines.append(("reported", "; ".join(_said(r) for r in reports.values())))
    lines += [("warning", text) for text in settings_warnings(config, reports)]
    return lines
