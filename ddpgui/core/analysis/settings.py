"""A run's settings: what makes runs repeats of each other, and short labels naming what differs."""
from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from remote_runner.config import SCRIPT_SETTINGS

from ..hosts.profiles import host_display_name

#: Config keys that do not change what a run measures: runs that differ only in these are repeats
#: (identity, the seed, and the operational timeouts and sampling interval).
REPEAT_KEYS = frozenset({"schema", "run_id", "name", "tags", "seed", "node_rank", "rdzv_endpoint", "rdzv_timeout_s",
                         "rank_failure_timeout_s", "stop_grace_s", "telemetry_interval_s", "keep_outputs"})
#: Config keys added after runs were stored without them, at the value such a run had: left out of the settings
#: there, so a run stored before the key existed is a repeat of one at its default.
ADDED_KEYS = {"model_size": "auto"}
_ABSENT = object()
#: The key that names a run's hosts in a setting (hosts are a setting: another machine, another result).
HOSTS_KEY = "hosts"


#: What a built-in workload reads and a user's script does not: left out of a script run's settings.
_BUILT_IN_ONLY = frozenset({"workload", "model_size", "inference_precisions", "grad_accum", "dataset_size", "lr",
                            "optimizer", "warmup_steps", "grad_checkpointing", "num_workers", "log_every"})


def settings_of(config: dict, hosts: Sequence[str] = ()) -> dict:
    """The settings that make a run measure what it measures: the config minus repeat keys, plus hosts.

    Environment variables are settings of their own (``OMP_NUM_THREADS``).  A script run's settings are its
    entry file, its arguments (each named one a setting: ``--lr``) and those of compile, precision and batch
    size it was given; where it runs from (an upload) and what a built-in workload reads are no settings."""
    out = {k: v for k, v in config.items() if k not in REPEAT_KEYS and ADDED_KEYS.get(k, _ABSENT) != v}
    for name, value in (out.pop("env", None) or {}).items():
        out[name if name not in config else f"env {name}"] = value
    if out.get("mode") == "script":
        script = out.pop("script", None) or {}
        applied = script.get("applied") or []
        out = {k: v for k, v in out.items() if k not in _BUILT_IN_ONLY
               and (k not in SCRIPT_SETTINGS or k in applied)}
        out["entry"] = script.get("entry")
        if script.get("args"):
            out["args"] = shlex.join(script["args"])
        for name, value in (script.get("options") or {}).items():
            out[name] = value
    out[HOSTS_KEY] = list(hosts)
    return out


def setting_key(config: dict, hosts: Sequence[str] = ()) -> str:
    """A string equal for runs that differ only in seed, run id, name or tags (repeats)."""
    return json.dumps(settings_of(config, hosts), sort_keys=True, default=str)


def _label_part(key: str, value: object) -> str:
    if key == "world_size":
        return f"{value}×"
    if key == "precision":
        return str(value)
    if key == "entry":
        return str(value)
    if key == HOSTS_KEY:
        return "@" + ",".join(map(host_display_name, value if isinstance(value, list) else [value]))
    if isinstance(value, (dict, list)):
        value = json.dumps(value, sort_keys=True)
    return f"{key}={value}"


#: Label order: the settings people compare most come first.
_LABEL_ORDER = ("entry", "compile", "precision", "world_size", "workload", HOSTS_KEY)


def setting_labels(settings: Sequence[dict]) -> list[str]:
    """A short label per settings dict naming only what differs among them ("compile=default bf16 2×").

    ``nproc_per_node`` and ``nnodes`` show as one world size.  With nothing differing, each
    label names the workload, precision, compile mode and world size.
    """
    rows = []
    for s in settings:
        row = {k: v for k, v in s.items() if k not in ("nproc_per_node", "nnodes")}
        row["world_size"] = int(s.get("nproc_per_node") or 1) * int(s.get("nnodes") or 1)
        rows.append(row)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    varying = [k for k in keys if len({json.dumps(row.get(k), sort_keys=True, default=str) for row in rows}) > 1]
    if not varying:
        varying = ["workload", "compile", "precision", "world_size"] if "workload" in keys else \
            ["entry", *[k for k in SCRIPT_SETTINGS if k in keys], "world_size"]
    order = [k for k in _LABEL_ORDER if k in varying] + sorted(k for k in varying if k not in _LABEL_ORDER)
    return [" ".join(_label_part(k, row.get(k)) for k in order) for row in rows]
