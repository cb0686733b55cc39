"""A real Secret Service (gnome-keyring-daemon on a private D-Bus) for the tests that prove secrets go there.

Use the ``secret_service`` fixture by importing it into a test module::

    from helpers.secret_service import secret_service_daemon, secret_service  # noqa: F401

Needs the apt packages ``dbus`` and ``gnome-keyring`` and the pip package
``secretstorage``; without them the tests skip and say so.
"""
import importlib.util
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import keyring
import pytest

UNLOCK_PASSWORD = b"login-keyring-password-for-tests"
_BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={socket}</listen>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""
_MISSING = ("a real Secret Service is needed: apt-get install -y dbus gnome-keyring; "
            "pip install secretstorage")


def _default_unlocked(connection) -> bool:
    import secretstorage

    try:
        return not secretstorage.Collection(connection).is_locked()
    except secretstorage.exceptions.ItemNotFoundException:
        return False


@pytest.fixture(scope="session")
def secret_service_daemon():
    """A private session bus with gnome-keyring-daemon's secrets component, its login keyring unlocked."""
    if not (shutil.which("dbus-daemon") and shutil.which("gnome-keyring-daemon")):
        pytest.skip("SKIPPED LOUDLY: dbus-daemon or gnome-keyring-daemon is missing — " + _MISSING)
    if importlib.util.find_spec("secretstorage") is None:
        pytest.skip("SKIPPED LOUDLY: the secretstorage package is missing — " + _MISSING)
    root = Path(tempfile.mkdtemp(prefix="ddpgui-secret-service-"))
    (root / "home").mkdir()
    (root / "run").mkdir(mode=0o700)
    env = dict(os.environ, HOME=str(root / "home"), XDG_RUNTIME_DIR=str(root / "run"),
               XDG_DATA_HOME=str(root / "home/.local/share"), XDG_CONFIG_HOME=str(root / "home/.config"))
    # A bus without service directories: nothing can be D-Bus-activated, so no second keyring daemon
    # (auto-started by an early query) can take the Secret Service name from ours.
    (root / "bus.conf").write_text(_BUS_CONFIG.format(socket=root / "run/bus"))
    bus = subprocess.Popen(["dbus-daemon", "--config-file", str(root / "bus.conf"), "--nofork", "--print-address=1"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    address = bus.stdout.readline().decode().strip()
    env["DBUS_SESSION_BUS_ADDRESS"] = address
    daemon = subprocess.Popen(["gnome-keyring-daemon", "--foreground", "--unlock", "--components=secrets"],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    daemon.stdin.write(UNLOCK_PASSWORD)
    daemon.stdin.close()
    try:
        _wait_for_login_keyring(address)
        yield address
    finally:
        for proc in (daemon, bus):
            proc.terminate()
            proc.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)


def _wait_for_login_keyring(address: str) -> None:
    import secretstorage

    old = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
    os.environ["DBUS_SESSION_BUS_ADDRESS"] = address
    try:
        for _ in range(100):  # until the unlocked login keyring is the default collection
            with secretstorage.dbus_init() as connection:
                if secretstorage.check_service_availability(connection) and _default_unlocked(connection):
                    return
            time.sleep(0.1)
        pytest.fail("gnome-keyring-daemon did not offer an unlocked default collection within 10 s")
    finally:
        if old is None:
            del os.environ["DBUS_SESSION_BUS_ADDRESS"]
        else:
            os.environ["DBUS_SESSION_BUS_ADDRESS"] = old


@pytest.fixture
def secret_service(secret_service_daemon, monkeypatch):
    """keyring's SecretService backend talking to the private daemon (for this test only)."""
    from keyring.backends import SecretService

    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", secret_service_daemon)
    backend = SecretService.Keyring()
    keyring.set_keyring(backend)
    return backend
