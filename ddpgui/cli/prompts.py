"""The questions the CLI asks on the terminal: an unknown SSH host key, a login secret, a secret to store.

Secrets are never command-line arguments (other users can read those in ps): they are asked for here, and
off a terminal nothing is asked (an unknown host key is then refused unless ``--accept-new-host-key``).
"""
from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable

from ..core.hosts import HostProfile, secrets
from ..core.ssh.auth import SecretRequest
from ..core.ssh.known_hosts import HostKeyInfo
from ..core.targets.base import TargetError


def confirm_host_key(args: argparse.Namespace) -> Callable[[HostKeyInfo], bool]:
    def confirm(info: HostKeyInfo) -> bool:
        print(f"The authenticity of host {info.name} can't be established.\n"
              f"{info.key_type} key fingerprint is {info.sha256_fingerprint}.", file=sys.stderr)
        if info.other_known_types:
            print(f"Keys of other types are already known for this host: {', '.join(info.other_known_types)}.",
                  file=sys.stderr)
        if args.accept_new_host_key:
            print("Accepted (--accept-new-host-key) and saved.", file=sys.stderr)
            return True
        if not sys.stdin.isatty():
            raise TargetError(f"the host key of {info.name} is unknown and there is no terminal to confirm it",
                              "run the command in a terminal, or pass --accept-new-host-key after checking the "
                              "fingerprint with the host's owner")
        answer = input("Accept this key? [y/N] ").strip().lower()
        return answer in ("y", "yes")

    return confirm


def ask_secret(request: SecretRequest) -> str | None:
    if not sys.stdin.isatty():
        return None
    return getpass.getpass(f"{request.prompt} ") or None


def read_secret(profile: HostProfile, from_stdin: bool) -> str | None:
    kind = profile.secret_kind
    if from_stdin:
        return sys.stdin.readline().rstrip("\n") or None
    if not sys.stdin.isatty():
        return None
    what = "password" if kind == secrets.PASSWORD else f"passphrase of {profile.key_file}"
    return getpass.getpass(f"{what.capitalize()} for {profile.name} (stored in the keyring; empty: ask each time): ") or None
