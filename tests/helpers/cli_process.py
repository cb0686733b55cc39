"""Running the real ``python -m ddpgui`` CLI in a subprocess, on private data and config folders."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli_env(tmp_path, **extra: str) -> dict:
    """The environment of a CLI with its own store, hosts file and settings under ``tmp_path``."""
    env = dict(os.environ, DDPGUI_DATA_DIR=str(tmp_path / "data"), DDPGUI_CONFIG_DIR=str(tmp_path / "config"))
    env.update(extra)
    return env


def start_cli(args, env, **kwargs) -> subprocess.Popen:
    """``ddpgui ARGS`` started with piped stdout/stderr (text unless ``text=False``)."""
    kwargs.setdefault("text", True)
    return subprocess.Popen([sys.executable, "-m", "ddpgui", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kwargs)


def run_cli(args, env, timeout: float = 300):
    """``ddpgui ARGS`` to its end: (exit code, stdout, stderr)."""
    proc = start_cli(args, env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"ddpgui {' '.join(args)} did not end within {timeout} s:\n{out}\n{err}") from None
    return proc.returncode, out, err
