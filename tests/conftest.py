"""Suite-wide setup: private app dirs, an in-memory keyring, offscreen Qt.

One session-wide tmp directory holds the app's config, data and cache dirs
(``DDPGUI_CONFIG_DIR`` / ``DDPGUI_DATA_DIR`` / ``DDPGUI_CACHE_DIR``), so the
tests never touch the user's real files and the tests marked ``last`` (run after all others, see
:func:`pytest_collection_modifyitems`) can inspect everything the suite wrote.  ``make test`` runs the
suite on two workers (pytest-xdist), then the ``last`` tests in a second session: it names the directory in
``DDPGUI_TEST_ROOT`` for both (and removes it), so every worker writes there and the scan reads it all.
"""
import gc
import json
import os
import shutil
import tempfile
from pathlib import Path

import keyring
import pytest
from hypothesis import settings
from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError

# Property tests draw the same examples on every run (a fixed seed per test, no example database): a run of the
# suite is reproducible, and CI cannot turn red on an example no earlier run drew.
settings.register_profile("suite", derandomize=True, database=None)
settings.load_profile("suite")

_GIVEN_ROOT = os.environ.get("DDPGUI_TEST_ROOT")
_APP_ROOT = Path(_GIVEN_ROOT) if _GIVEN_ROOT else Path(tempfile.mkdtemp(prefix="ddpgui-tests-"))
for _env, _sub in (("DDPGUI_CONFIG_DIR", "config"), ("DDPGUI_DATA_DIR", "data"), ("DDPGUI_CACHE_DIR", "cache")):
    os.environ[_env] = str(_APP_ROOT / _sub)
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


class MemoryKeyring(KeyringBackend):
    """A keyring that lives in a dict; tests that must prove the real Secret Service use their own fixture."""

    priority = 1

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        try:
            del self.entries[(service, username)]
        except KeyError:
            raise PasswordDeleteError(username) from None


@pytest.fixture(scope="session")
def app_dirs() -> dict[str, Path]:
    """The session's config, data and cache dirs."""
    return {name: _APP_ROOT / name for name in ("config", "data", "cache")}


@pytest.fixture(autouse=True)
def gui_thread_garbage(request: pytest.FixtureRequest):
    """A test with Qt collects cycles only on the GUI thread, as the app does (ddpgui.ui.app.
    collect_garbage_on_the_gui_thread): collection off during the test, and at its end a collection of what the
    test made (all of it still in generation 0, as no collection ran).  A full collection there cost ~0.1-0.5 s
    per test (torch, numpy and Qt's objects scanned each time): about a fifth of a GUI test file's CPU."""
    if not {"qapp", "qtbot"} & set(request.fixturenames):
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.collect(0)
        gc.enable()


@pytest.fixture(autouse=True)
def memory_keyring() -> MemoryKeyring:
    """Every test gets a fresh in-memory keyring, so none can reach the user's real one."""
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    return backend


#: Seconds each test file took in a measured run (tests/helpers/file_costs.py writes it from a JUnit XML report).
FILE_COSTS = Path(__file__).with_name("file_costs.json")
#: A file not measured yet is placed as one of the slower ones: new files are mostly real runs.
UNMEASURED_FILE_S = 60.0


def _file_costs() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(FILE_COSTS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


@pytest.hookimpl(trylast=True)  # after any plugin that reorders (e.g. pytest-randomly)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``last`` run after every other test (the leak scan reads what the whole suite wrote); before
    them, whole files from the longest to the shortest, as measured (``FILE_COSTS``).

    ``make test`` hands whole files to its workers in collection order (``--dist loadfile
    --no-loadscope-reorder``): longest first keeps both busy to the end instead of leaving one worker alone with
    a long file in the last minutes. Tests keep their order within a file."""
    costs = _file_costs()

    def cost(item: pytest.Item) -> float:
        return costs.get(item.nodeid.split("::", 1)[0], UNMEASURED_FILE_S)

    items.sort(key=lambda item: (item.get_closest_marker("last") is not None, -cost(item),
                                 item.nodeid.split("::", 1)[0]))  # stable: a file's tests keep their order


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _GIVEN_ROOT:  # a root given by the caller (make test) outlives this session: the caller removes it
        shutil.rmtree(_APP_ROOT, ignore_errors=True)
