"""Private key files: load one the way OpenSSH would, or say why it cannot be used."""
from __future__ import annotations

import os
from pathlib import Path

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa


class KeyFileError(ValueError):
    """A private key file that cannot be used: unreadable, encrypted without a passphrase, wrong passphrase."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"key file {path}: {reason}")
        self.path = path
        self.reason = reason


class KeyNeedsPassphrase(KeyFileError):
    pass


class WrongPassphrase(KeyFileError):
    pass


_PKEY_CLASSES = ((rsa.RSAPrivateKey, paramiko.RSAKey), (ed25519.Ed25519PrivateKey, paramiko.Ed25519Key),
                 (ec.EllipticCurvePrivateKey, paramiko.ECDSAKey))


def load_private_key(path: str, passphrase: str | None = None) -> paramiko.PKey:
    """A private key from an OpenSSH or PEM file; raises :class:`KeyFileError` subclasses saying why not."""
    full = os.path.expanduser(path)
    try:
        data = Path(full).read_bytes()
    except OSError as exc:
        raise KeyFileError(path, exc.strerror or str(exc)) from None
    password = passphrase.encode() if passphrase else None
    loader = (serialization.load_ssh_private_key if data.lstrip().startswith(b"-----BEGIN OPENSSH PRIVATE KEY")
              else serialization.load_pem_private_key)
    try:
        loaded = loader(data, password)
    except TypeError:
        if password is None:
            raise KeyNeedsPassphrase(path, "the key is protected by a passphrase") from None
        password = None  # a passphrase was given for a key that has none: use the key as it is
        loaded = loader(data, None)
    except ValueError as exc:
        if password is not None:
            raise WrongPassphrase(path, "the passphrase does not open this key") from None
        raise KeyFileError(path, f"not a private key OpenSSH or paramiko can read ({exc})") from None
    except Exception as exc:  # unsupported key types (DSA is gone from paramiko) and other backend refusals
        raise KeyFileError(path, f"cannot load this key ({type(exc).__name__}: {exc})") from None
    for crypto_class, key_class in _PKEY_CLASSES:
        if isinstance(loaded, crypto_class):
            return key_class.from_private_key_file(full, password=password.decode() if password else None)
    raise KeyFileError(path, f"unsupported key type {type(loaded).__name__}")


def key_is_encrypted(key_file: str) -> bool:
    """Whether a private key file needs a passphrase (False when it cannot be read at all)."""
    try:
        load_private_key(key_file)
    except KeyNeedsPassphrase:
        return True
    except KeyFileError:
        return False
    return False
