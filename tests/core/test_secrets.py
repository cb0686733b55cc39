"""Secrets in the OS keyring: a real Secret Service (gnome-keyring on a private D-Bus) and the failure modes."""
import keyring
import keyring.backends.fail
import keyring.backends.null
import pytest
import secretstorage
from helpers.secret_service import secret_service, secret_service_daemon  # noqa: F401
from helpers.secrets_planted import KEYRING_PASSPHRASE, KEYRING_PASSWORD
from keyring.backend import KeyringBackend
from keyring.errors import KeyringLocked

from ddpgui.core.hosts import HostProfile, HostStore, secrets


def _in_secret_service(username: str) -> list[str]:
    """What the Secret Service itself holds for ddpgui/username (read with secretstorage, not keyring)."""
    with secretstorage.dbus_init() as bus:
        return [item.get_secret().decode() for item in
                secretstorage.search_items(bus, {"service": "ddpgui", "username": username})]


def test_get_set_delete_in_the_real_secret_service(secret_service):  # noqa: F811
    assert secrets.backend_name() == "keyring.backends.SecretService"
    assert secrets.get_secret("ss-a", secrets.PASSWORD) is None
    secrets.set_secret("ss-a", secrets.PASSWORD, KEYRING_PASSWORD)
    assert _in_secret_service("ss-a:password") == [KEYRING_PASSWORD]
    assert secrets.get_secret("ss-a", secrets.PASSWORD) == KEYRING_PASSWORD
    assert secrets.delete_secret("ss-a", secrets.PASSWORD) is True
    assert secrets.delete_secret("ss-a", secrets.PASSWORD) is False
    assert _in_secret_service("ss-a:password") == []


def test_rename_and_remove_move_and_delete_in_the_real_secret_service(secret_service, tmp_path):  # noqa: F811
    store = HostStore(tmp_path / "hosts.json")
    store.add(HostProfile(name="ss-gpu", hostname="gpu.lab", auth="key_passphrase", key_file="~/.ssh/id"))
    secrets.set_secret("ss-gpu", secrets.PASSPHRASE, KEYRING_PASSPHRASE)
    secrets.set_secret("ss-gpu", secrets.PASSWORD, KEYRING_PASSWORD)
    store.rename("ss-gpu", "ss-gpu-2")
    assert _in_secret_service("ss-gpu:passphrase") == [] and _in_secret_service("ss-gpu:password") == []
    assert _in_secret_service("ss-gpu-2:passphrase") == [KEYRING_PASSPHRASE]
    assert _in_secret_service("ss-gpu-2:password") == [KEYRING_PASSWORD]
    store.remove("ss-gpu-2")
    assert _in_secret_service("ss-gpu-2:passphrase") == [] and _in_secret_service("ss-gpu-2:password") == []
    for secret in (KEYRING_PASSWORD, KEYRING_PASSPHRASE):
        assert secret.encode() not in store.path.read_bytes()


def test_move_is_per_profile(memory_keyring):
    secrets.set_secret("a", secrets.PASSWORD, KEYRING_PASSWORD)
    secrets.set_secret("ab", secrets.PASSWORD, "other")
    assert secrets.move_secrets("a", "c") == ["password"]
    assert memory_keyring.entries == {("ddpgui", "ab:password"): "other", ("ddpgui", "c:password"): KEYRING_PASSWORD}
    assert secrets.delete_all("c") == ["password"] and secrets.delete_all("c") == []


def test_bad_requests_are_refused():
    with pytest.raises(ValueError, match="unknown secret kind"):
        secrets.set_secret("a", "token", "x")
    with pytest.raises(ValueError, match="empty secret"):
        secrets.set_secret("a", secrets.PASSWORD, "")


@pytest.mark.parametrize("backend", [keyring.backends.fail.Keyring, keyring.backends.null.Keyring])
def test_no_keyring_backend_says_what_to_install(backend):
    keyring.set_keyring(backend())
    assert secrets.storage_problem() is not None
    with pytest.raises(secrets.SecretsUnavailable) as info:
        secrets.set_secret("a", secrets.PASSWORD, KEYRING_PASSWORD)
    assert "no keyring is available" in str(info.value) and info.value.no_backend
    assert "gnome-keyring" in info.value.hint and "secretstorage" in info.value.hint
    if backend is keyring.backends.null.Keyring:
        return  # the null keyring reads nothing back either, without an error
    with pytest.raises(secrets.SecretsUnavailable):
        secrets.get_secret("a", secrets.PASSWORD)


class _LockedKeyring(KeyringBackend):
    priority = 1

    def get_password(self, service, username):
        raise KeyringLocked("Failed to unlock the collection!")

    set_password = delete_password = get_password


def test_locked_keyring_says_unlock_it():
    keyring.set_keyring(_LockedKeyring())
    with pytest.raises(secrets.SecretsUnavailable, match="locked") as info:
        secrets.get_secret("a", secrets.PASSWORD)
    assert info.value.hint == "unlock your keyring and try again"
