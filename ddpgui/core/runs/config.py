"""Run configs: fresh run ids, default names, validated configs from settings, a run's settings in one line."""
from __future__ import annotations

import secrets
import shlex
import time

from remote_runner.config import ConfigError, RunConfig, config_from_dict

from ..scripts import MappingError, ScriptSettingError, with_script_settings


def new_run_id() -> str:
    """A sortable, unique id that is safe as a directory name (the run's name is only data)."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def default_name(cfg: RunConfig) -> str:
    if cfg.mode == "script":  # precision and compile are the script's own business unless it was given them
        given = "".join(f" {_given_text(s, getattr(cfg, s))}" for s in (cfg.script.applied if cfg.script else []))
        return f"{cfg.script.entry if cfg.script else 'script'} {cfg.world_size}x{given}"
    return f"{cfg.workload} {cfg.world_size}x {cfg.precision} compile={cfg.compile}"


def _given_text(setting: str, value: object) -> str:
    return {"precision": str(value), "compile": f"compile={value}", "batch_size": f"batch={value}"}[setting]


def settings_text(config: dict) -> str:
    """What a run ran, in one line: ``mlp ×2 fp32 compile=off batch=32``, ``script train.py ×2 (args …)`` or
    ``imported from TensorBoard: lr=0.1 bs=32``."""
    nproc = config.get("nproc_per_node", 1)
    if config.get("mode") == "imported":  # ddpgui import-tensorboard: the settings its folder name or hparams gave
        given = " ".join(f"{k}={v}" for k, v in config.items() if k not in ("name", "mode"))
        return "imported from TensorBoard" + (f": {given}" if given else "")
    if config.get("mode") == "script":
        script = config.get("script") or {}
        args = (script.get("args") or []) + [f"{k}={v}" for k, v in (script.get("options") or {}).items()]
        given = "".join(f" {_given_text(s, config.get(s))}" for s in script.get("applied") or [])
        return f"script {script.get('entry', '?')} ×{nproc}{given}" + (f" (args {shlex.join(args)})" if args else "")
    return (f"{config.get('workload')} ×{nproc} {config.get('precision')} compile={config.get('compile')} "
            f"batch={config.get('batch_size')}")


def relaunch_settings(config: dict) -> dict:
    """A stored run's config as the settings of a new launch (a rerun, a duplicate): no run id, and a script
    taken again from the folder on this computer it came from (the stored ``dir`` of a run on another host is
    its upload there)."""
    settings = dict(config, run_id="")
    script = settings.get("script")
    if isinstance(script, dict) and script.get("source"):
        settings["script"] = dict(script, dir=script["source"])
    return settings


def make_config(settings: dict) -> RunConfig:
    """A validated config with a fresh run id and a default name (raises ConfigError naming the field).  A script
    run's compile, precision and batch size, where given, are put in the script's own words
    (:func:`~ddpgui.core.scripts.with_script_settings`)."""
    if settings.get("mode") == "script" and isinstance(settings.get("script"), dict):
        try:
            settings = with_script_settings(settings)
        except ScriptSettingError as exc:
            raise ConfigError(exc.setting, str(exc)) from None
        except MappingError as exc:
            raise ConfigError("script.mapping", str(exc)) from None
    cfg = config_from_dict({k: v for k, v in settings.items() if v is not None})
    if not cfg.run_id:
        cfg.run_id = new_run_id()
    if not cfg.name:
        cfg.name = default_name(cfg)
    return cfg

