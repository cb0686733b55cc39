"""After the whole suite: no planted password or passphrase reached the profiles file, logs or run store.

Marked ``last``: tests/conftest.py runs it after every other test (``make test`` in a session of its own, after
the workers' session, with the same app dirs and that session's tmp dirs named in ``DDPGUI_TEST_TMP``).  It
scans every file under the session's config and data dirs (hosts.json, known_hosts, the app's logs in
data_dir()/logs, the run store) and everything the tests wrote under pytest's tmp dirs (their own profiles
files and stores).
"""
import os
import tempfile
from pathlib import Path

import pytest
from helpers.secrets_planted import PLANTED

from ddpgui.core.paths import config_dir, data_dir

pytestmark = pytest.mark.last


def _files(*roots: Path) -> list[Path]:
    return [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


def test_no_planted_secret_in_any_file_the_app_wrote(tmp_path_factory):
    if not (config_dir() / "hosts.json").exists():
        pytest.skip("SKIPPED LOUDLY: no test wrote the profiles file in this session: run the whole suite")
    # the tests' own tmp dirs: this session's, and those of the session before it (make test: DDPGUI_TEST_TMP)
    earlier = [Path(p) for p in os.environ.get("DDPGUI_TEST_TMP", "").split(os.pathsep) if p]
    files = _files(config_dir(), data_dir(), tmp_path_factory.getbasetemp(), *earlier)
    needles = [s.encode() for s in PLANTED]
    hits = [f"{path}: {secret.decode()[:8]}…" for path in files for secret in needles
            if secret in path.read_bytes()]
    assert hits == []


def test_the_scan_can_find_a_secret():
    with tempfile.TemporaryDirectory() as directory:  # outside the dirs scanned above
        planted = Path(directory) / "logs" / "app.log"
        planted.parent.mkdir()
        planted.write_bytes(b"connecting with " + PLANTED[0].encode())
        assert any(PLANTED[0].encode() in p.read_bytes() for p in _files(Path(directory)))


def test_the_leak_scan_is_collected_after_every_other_test(request):
    """The ``last`` marker moves the scan to the end of the run, whatever order the files are collected in."""
    items = request.session.items
    scans = [i for i, item in enumerate(items) if item.get_closest_marker("last")]
    assert scans and scans == list(range(len(items) - len(scans), len(items)))
