"""Starting runs on a target: run ids, configs, deploy + launch."""
from __future__ import annotations

import secrets
import time

from remote_runner.config import RunConfig, config_from_dict

from .package import build_runner
from .targets.base import LaunchResult, Progress, Target


def new_run_id() -> str:
    """A sortable, unique id that is safe as a directory name (the run's name is only data)."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def default_name(cfg: RunConfig) -> str:
    what = cfg.workload if cfg.mode != "script" else (cfg.script.entry if cfg.script else "script")
    return f"{what} {cfg.world_size}x {cfg.precision} compile={cfg.compile}"


def make_config(settings: dict) -> RunConfig:
    """A validated config with a fresh run id and a default name (raises ConfigError naming the field)."""
    cfg = config_from_dict({k: v for k, v in settings.items() if v is not None})
    if not cfg.run_id:
        cfg.run_id = new_run_id()
    if not cfg.name:
        cfg.name = default_name(cfg)
    return cfg


def start_run(target: Target, cfg: RunConfig, progress: Progress | None = None) -> LaunchResult:
    """Deploy the runner (skipped when the host has it) and launch ``cfg`` detached on ``target``."""
    uploaded = target.deploy(build_runner(), progress)
    result = target.launch(cfg)
    return LaunchResult(run_dir=result.run_dir, pid=result.pid, uploaded_bytes=uploaded)
