"""Logging in to one SSH hop: the methods of a profile, in order, the secrets they need, and what was tried."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import paramiko
from paramiko.auth_strategy import AuthSource, InMemoryPrivateKey, Password

from ..hosts import Hop, secrets
from ..targets.base import TargetError
from .keys import KeyFileError, KeyNeedsPassphrase, WrongPassphrase, load_private_key
from .known_hosts import fingerprint


@dataclass(frozen=True)
class SecretRequest:
    """A secret the connection needs and did not find in the keyring."""

    profile: str
    kind: str  # secrets.PASSWORD or secrets.PASSPHRASE
    prompt: str


AskSecret = Callable[[SecretRequest], str | None]


class AuthenticationFailed(TargetError):
    """The host refused every login method that was tried."""


class SecretCache:
    """The passwords and passphrases one connection's logins used: the keyring first, then ``ask_secret``."""

    def __init__(self, ask_secret: AskSecret | None = None):
        self.ask_secret = ask_secret
        self._secrets: dict[tuple[str, str], str] = {}

    def get(self, hop: Hop, kind: str, prompt: str) -> str:
        key = (hop.secrets_profile, kind)
        if key in self._secrets:
            return self._secrets[key]
        problem = ""
        try:
            value = secrets.get_secret(hop.secrets_profile, kind)
        except secrets.SecretsUnavailable as exc:
            value, problem = None, f" (the keyring is not usable: {exc})"
        if value is None and self.ask_secret is not None:
            value = self.ask_secret(SecretRequest(hop.secrets_profile, kind, prompt))
        if not value:
            field = "auth" if kind == secrets.PASSWORD else "key_file"
            raise TargetError(f"no {kind} for host profile {hop.secrets_profile!r}{problem}",
                              f"store it in the keyring: ddpgui hosts edit {hop.secrets_profile} --set-secret",
                              field=field)
        self._secrets[key] = value
        return value

    def forget(self, hop: Hop, kind: str) -> None:
        self._secrets.pop((hop.secrets_profile, kind), None)


def _describe(source: AuthSource) -> str:
    if isinstance(source, _KeyFile):
        return f"key file {source.path}"
    if isinstance(source, InMemoryPrivateKey):
        return f"ssh-agent key {source.pkey.get_name()} {fingerprint(source.pkey)}"
    if isinstance(source, _KeyboardInteractive):
        return "keyboard-interactive password"
    return "password"


class _KeyFile(InMemoryPrivateKey):
    def __init__(self, username: str, path: str, pkey: paramiko.PKey):
        super().__init__(username, pkey)
        self.path = path


class _KeyboardInteractive(AuthSource):
    """A password given to keyboard-interactive prompts (hosts that turned plain password auth off)."""

    def __init__(self, username: str, password_getter: Callable[[], str]):
        super().__init__(username)
        self.password_getter = password_getter

    def authenticate(self, transport: paramiko.Transport) -> list[str]:
        password = self.password_getter()
        return transport.auth_interactive(self.username, lambda title, instr, prompts: [password] * len(prompts))


class HopAuth(paramiko.AuthStrategy):
    """The login methods of one hop, in order; records what was tried for the error message."""

    def __init__(self, cache: SecretCache, hop: Hop, user: str):
        super().__init__(ssh_config=paramiko.SSHConfig())
        self.cache, self.hop, self.user = cache, hop, user
        self.tried: list[str] = []
        self.allowed: list[str] = []
        self.used = ""
        self._agent: paramiko.Agent | None = None

    def get_sources(self) -> Iterator[AuthSource]:
        hop = self.hop
        if hop.auth == "password":
            def getter() -> str:
                return self.cache.get(hop, secrets.PASSWORD, f"Password for {self.user}@{hop.hostname}:")

            # Hosts that turned plain password auth off often still take it through keyboard-interactive.
            yield Password(self.user, getter) if "password" in self.allowed else _KeyboardInteractive(self.user, getter)
            return
        if hop.auth == "agent":
            self._agent = paramiko.Agent()
            keys = self._agent.get_keys()
            for key in keys:
                yield InMemoryPrivateKey(self.user, key)
            if not keys:
                self.tried.append("ssh-agent (not running or holding no keys: SSH_AUTH_SOCK is "
                                  + ("set" if os.environ.get("SSH_AUTH_SOCK") else "not set") + ")")
        if hop.key_file:
            yield _KeyFile(self.user, hop.key_file, self._load_key(hop.key_file))

    def _load_key(self, path: str) -> paramiko.PKey:
        try:
            return load_private_key(path)
        except KeyNeedsPassphrase:
            pass
        except KeyFileError as exc:
            raise TargetError(str(exc), f"check the key file of host profile {self.hop.secrets_profile!r}",
                              field="key_file") from None
        passphrase = self.cache.get(self.hop, secrets.PASSPHRASE, f"Passphrase for key {path}:")
        try:
            return load_private_key(path, passphrase)
        except WrongPassphrase:
            self.cache.forget(self.hop, secrets.PASSPHRASE)
            raise TargetError(f"wrong passphrase for key file {path}",
                              f"store the right one: ddpgui hosts edit {self.hop.secrets_profile} --set-secret",
                              field="key_file") from None

    def authenticate(self, transport: paramiko.Transport) -> list:
        try:
            transport.auth_none(self.user)
            self.used = "none"
            return []
        except paramiko.BadAuthenticationType as exc:
            self.allowed = list(exc.allowed_types)
        try:
            for source in self.get_sources():
                method = ("password" if isinstance(source, Password) else
                          "keyboard-interactive" if isinstance(source, _KeyboardInteractive) else "publickey")
                if method not in self.allowed:
                    self.tried.append(f"{_describe(source)} (the server does not accept {method})")
                    continue
                try:
                    source.authenticate(transport)
                except paramiko.AuthenticationException:
                    self.tried.append(f"{_describe(source)} (rejected)")
                    if isinstance(source, (Password, _KeyboardInteractive)):
                        self.cache.forget(self.hop, secrets.PASSWORD)
                    continue
                except paramiko.SSHException as exc:
                    self.tried.append(f"{_describe(source)} ({exc})")
                    continue
                if transport.is_authenticated():
                    self.used = _describe(source)
                    return []
        finally:
            if self._agent is not None:
                self._agent.close()
        raise AuthenticationFailed(
            f"authentication as {self.user}@{self.hop.hostname} failed; tried: {', '.join(self.tried) or 'nothing'};"
            f" the server accepts: {', '.join(self.allowed)}", self._hint())

    def _hint(self) -> str:
        name = self.hop.secrets_profile
        if self.hop.auth == "password":
            return f"check the user name and the password stored for {name!r} (ddpgui hosts edit {name} --set-secret)"
        if self.hop.auth == "agent":
            return ("add your key to the agent (ssh-add) or choose a key file, and check that its public key is in "
                    "~/.ssh/authorized_keys on the host")
        return f"check the user name and that the public key of {self.hop.key_file} is in ~/.ssh/authorized_keys there"
