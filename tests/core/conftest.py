"""Fixtures of the core tests."""
import pytest

from ddpgui.core.hosts import HostStore
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import RunStore
from ddpgui.core.targets.factory import open_target


@pytest.fixture
def manager():
    """A manager on the app's own store (the session's private data dir), so ``ddpgui show`` reads the same runs.
    (Modules that want a store of their own in tmp_path define their own ``manager``.)"""
    hosts = HostStore()
    store = RunStore()
    m = RunManager(store, hosts, lambda name: open_target(name, hosts))
    yield m
    m.close()
    store.close()
