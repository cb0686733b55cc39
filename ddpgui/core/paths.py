"""Where ddpgui keeps its files on this computer (platformdirs), overridable for tests."""
import os
from pathlib import Path

import platformdirs

APP = "ddpgui"


def _dir(env: str, default: str) -> Path:
    path = Path(os.environ.get(env) or default)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def config_dir() -> Path:
    """Host profiles, known hosts, settings (``DDPGUI_CONFIG_DIR`` overrides)."""
    return _dir("DDPGUI_CONFIG_DIR", platformdirs.user_config_dir(APP))


def data_dir() -> Path:
    """The run store and this computer's runs (``DDPGUI_DATA_DIR`` overrides)."""
    return _dir("DDPGUI_DATA_DIR", platformdirs.user_data_dir(APP))


def cache_dir() -> Path:
    """Built runner packages (``DDPGUI_CACHE_DIR`` overrides)."""
    return _dir("DDPGUI_CACHE_DIR", platformdirs.user_cache_dir(APP))
