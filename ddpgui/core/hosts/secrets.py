"""Passwords and key passphrases in the OS keyring; the only module that imports ``keyring``.

Every secret lives under the service name ``ddpgui`` with the user name
``<profile>:<kind>``, so renaming a host profile moves its secrets and removing
it deletes them.  Nothing here logs or returns a secret except :func:`get_secret`.
"""
from __future__ import annotations

import keyring
import keyring.backends.chainer
import keyring.backends.fail
import keyring.backends.null
import keyring.errors

SERVICE = "ddpgui"
PASSWORD = "password"
PASSPHRASE = "passphrase"
KINDS = (PASSWORD, PASSPHRASE)

_ASK_EACH_TIME = "or store nothing: ddpgui then asks for it each time it connects"
INSTALL_HINT = ("install and unlock a keyring: on Linux a Secret Service such as GNOME Keyring or KeePassXC "
                 "(apt install gnome-keyring; pip install secretstorage), the Keychain on macOS, "
                 "the Credential Manager on Windows")


class SecretsUnavailable(RuntimeError):
    """No usable keyring: ``hint`` says what to install or unlock."""

    def __init__(self, message: str, hint: str = INSTALL_HINT, no_backend: bool = False):
        super().__init__(message)
        self.hint = hint
        #: True when there is no keyring at all (so nothing can have been stored either)
        self.no_backend = no_backend

    def __str__(self) -> str:
        return f"{super().__str__()} — {self.hint}"


def _user(profile: str, kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown secret kind {kind!r} (one of {', '.join(KINDS)})")
    if not profile:
        raise ValueError("a secret needs a profile name")
    return f"{profile}:{kind}"


def _unavailable(exc: Exception) -> SecretsUnavailable:
    backend = backend_name()
    if isinstance(exc, keyring.errors.KeyringLocked):
        return SecretsUnavailable(f"the keyring is locked ({backend})", "unlock your keyring and try again")
    if isinstance(exc, keyring.errors.NoKeyringError):
        return SecretsUnavailable("no keyring is available to store passwords and passphrases",
                                  no_backend=True)
    return SecretsUnavailable(f"the keyring ({backend}) failed: {type(exc).__name__}: {exc}")


def backend_name() -> str:
    """The keyring backend in use, e.g. ``keyring.backends.SecretService``."""
    return type(keyring.get_keyring()).__module__


def get_secret(profile: str, kind: str) -> str | None:
    """The stored secret, or None when there is none."""
    user = _user(profile, kind)
    try:
        return keyring.get_password(SERVICE, user)
    except Exception as exc:  # every backend has its own errors (D-Bus, Keychain, ...)
        raise _unavailable(exc) from exc


def storage_problem() -> SecretsUnavailable | None:
    """Why no secret can be stored here (the null or fail backend, no backend at all), or None."""
    backend = keyring.get_keyring()
    none = (keyring.backends.null.Keyring, keyring.backends.fail.Keyring)
    if isinstance(backend, none) or (isinstance(backend, keyring.backends.chainer.ChainerBackend)
                                     and not [b for b in backend.backends if not isinstance(b, none)]):
        return SecretsUnavailable(f"no keyring is available to store passwords and passphrases "
                                  f"(the keyring backend is {backend_name()})",
                                  f"{INSTALL_HINT}; {_ASK_EACH_TIME}", no_backend=True)
    return None


def require_storage() -> None:
    """Raise :class:`SecretsUnavailable` when no secret can be stored (before asking the user for one)."""
    problem = storage_problem()
    if problem is not None:
        raise problem


def set_secret(profile: str, kind: str, value: str) -> None:
    """Store a secret; raises :class:`SecretsUnavailable` unless the keyring really holds it afterwards."""
    if not value:
        raise ValueError("refusing to store an empty secret")
    user = _user(profile, kind)
    require_storage()
    try:
        keyring.set_password(SERVICE, user, value)
        kept = keyring.get_password(SERVICE, user) == value
    except Exception as exc:
        raise _unavailable(exc) from exc
    if not kept:
        raise SecretsUnavailable(f"the keyring ({backend_name()}) did not keep the {kind} of {profile}",
                                 f"{INSTALL_HINT}; {_ASK_EACH_TIME}", no_backend=True)


def delete_secret(profile: str, kind: str) -> bool:
    """Delete one secret; False when there was none."""
    user = _user(profile, kind)
    try:
        if keyring.get_password(SERVICE, user) is None:
            return False
        keyring.delete_password(SERVICE, user)
    except Exception as exc:
        raise _unavailable(exc) from exc
    return True


def delete_all(profile: str) -> list[str]:
    """Delete every secret of a profile; returns the kinds that were there."""
    return [kind for kind in KINDS if delete_secret(profile, kind)]


def move_secrets(old: str, new: str) -> list[str]:
    """Move every secret of profile ``old`` to ``new``; returns the kinds moved."""
    moved = []
    for kind in KINDS:
        value = get_secret(old, kind)
        if value is None:
            continue
        set_secret(new, kind, value)
        delete_secret(old, kind)
        moved.append(kind)
    return moved
