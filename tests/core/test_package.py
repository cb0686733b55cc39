"""The runner zipapp: reproducible bytes, named by content hash, runnable."""
import hashlib
import json
import subprocess
import sys
import zipfile

from ddpgui.core.targets.zipapp import build_bytes, build_runner


def test_same_sources_give_same_bytes(tmp_path):
    a = build_runner(tmp_path / "a")
    b = build_runner(tmp_path / "b")
    assert a.path.read_bytes() == b.path.read_bytes()
    assert a.sha256 == hashlib.sha256(a.path.read_bytes()).hexdigest()
    assert a.name == f"runner-{a.sha256[:16]}.pyz" and a.size == a.path.stat().st_size


def test_zip_holds_every_runner_module_and_no_ddpgui():
    import io

    names = zipfile.ZipFile(io.BytesIO(build_bytes()[len(b"#!/usr/bin/env python3\n"):])).namelist()
    assert "__main__.py" in names
    assert {"remote_runner/__main__.py", "remote_runner/supervisor.py", "remote_runner/config.py"} <= set(names)
    assert not any(n.startswith("ddpgui") or "__pycache__" in n for n in names)


def test_zipapp_runs_its_commands(tmp_path):
    pkg = build_runner(tmp_path)
    out = subprocess.run([sys.executable, str(pkg.path), "status", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=60)
    reply = json.loads(out.stdout)
    assert out.returncode == 2 and reply["ok"] is False and "no run" in reply["error"]
