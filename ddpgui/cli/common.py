"""What every CLI command shares: CLIError, the exit codes, user text safe to print, opening the manager, finding runs
and sweeps, and reporting what went wrong.

Exit codes: 0 the run finished (or the command succeeded), 1 the run failed,
2 the request was refused (bad settings, unknown host), 3 the run was stopped,
130 interrupted (the run goes on on its host).
"""
from __future__ import annotations

import argparse
import sys

from remote_runner.config import ConfigError

from ..core.errors import describe
from ..core.hosts import HostError, HostNotFound, HostStore
from ..core.hosts.secrets import SecretsUnavailable
from ..core.runs.manager import RunManager
from ..core.store import RunRecord, RunStore, StoreError, SweepRecord
from ..core.sweeps import SweepError
from ..core.targets.base import Target, TargetError
from ..core.targets.factory import open_target
from .prompts import ask_secret, confirm_host_key

EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_STOPPED = 0, 1, 2, 3
#: Exit code of a command interrupted by Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130
#: The exit code of a run's final state.
STATE_EXIT = {"finished": EXIT_OK, "failed": EXIT_FAILED, "stopped": EXIT_STOPPED}
#: Characters shown escaped besides the C0/C1 controls: the BIDI embeddings, overrides, isolates and marks,
#: which reorder what follows them on the line (a "Trojan Source" name), and the zero-width ones.
_INVISIBLE = frozenset("\u061c\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                       "\u2028\u2029\u2060\u2066\u2067\u2068\u2069\ufeff")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


class CLIError(Exception):
    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


def terminal_text(text: object, multiline: bool = False) -> str:
    """``text`` safe to print: control characters (ESC, CR, LF, tab, DEL, C1) and BIDI/zero-width characters
    written as Python escapes (``\\x1b``, ``\\r``, ``\\u202e``), so a name cannot move the cursor, colour the
    terminal or reorder a table line; ``multiline`` keeps line breaks (a message of several lines).  A text
    with nothing to escape is returned as it is; in one with escapes, a backslash is doubled too.  Every CLI
    output of text that came from a user or a host (names, tags, hosts, messages, log lines) goes through here."""
    text = str(text)
    if not any(_unsafe(ch) for ch in text if not (multiline and ch == "\n")):
        return text
    out = []
    for ch in text:
        if multiline and ch == "\n":
            out.append(ch)
        elif ch in _NAMED:
            out.append(_NAMED[ch])
        elif _unsafe(ch):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


def _unsafe(ch: str) -> bool:
    code = ord(ch)
    return code < 0x20 or 0x7f <= code < 0xa0 or ch in _INVISIBLE


def open_cli_target(name: str, args: argparse.Namespace, store: HostStore | None = None) -> Target:
    """The target of a profile, asking on the terminal about unknown host keys and missing secrets."""
    return open_target(name, store or HostStore(), confirm_host_key=confirm_host_key(args), ask_secret=ask_secret)


def open_manager(args: argparse.Namespace) -> RunManager:
    """The run manager over the app's store and host profiles, asking on the terminal when it must."""
    hosts = HostStore()
    return RunManager(RunStore(), hosts, lambda name: open_cli_target(name, args, hosts))


def find_run(store: RunStore, text: str) -> RunRecord:
    """A run by id, unique id prefix or unique name."""
    try:
        return store.get_run(text)
    except KeyError:
        pass
    return find_one(store.list_runs(), text, "run", "ddpgui runs")


def find_sweep(store: RunStore, text: str) -> SweepRecord:
    try:
        return store.get_sweep(text)
    except KeyError:
        return find_one(store.list_sweeps(), text, "sweep", "ddpgui sweeps")


def find_one(records: list, text: str, what: str, listing: str):
    """The record (run or sweep) whose id starts with ``text``, or else whose name is ``text``; one or CLIError."""
    matches = [r for r in records if r.id.startswith(text)] or [r for r in records if r.name == text]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CLIError(f"no {what} {text!r}", f"list {what}s with: {listing}")
    raise CLIError(f"{text!r} matches {len(matches)} {what}s: " + ", ".join(r.id for r in matches[:5]),
                   f"give more of the {what} id")


def execute(args: argparse.Namespace) -> int:
    """Run the parsed command; a refused or failed request ends with its message and hint and its exit code."""
    try:
        return args.func(args)
    except (ConfigError, CLIError, HostError, HostNotFound, SweepError) as exc:
        return report(exc, EXIT_REFUSED)
    except (TargetError, StoreError, SecretsUnavailable) as exc:
        return report(exc, EXIT_FAILED)
    except BrokenPipeError:
        raise  # a closed stdout: run_command leaves quietly
    except OSError as exc:  # a data or config folder that cannot be made, a file that cannot be read or written
        return report(exc, EXIT_FAILED)


def report(exc: Exception, code: int) -> int:
    """Print what went wrong and what to do (the hint on a line of its own); returns ``code``."""
    message, hint = describe(exc)
    print(f"ddpgui: {terminal_text(message, multiline=True)}", file=sys.stderr)
    if hint:
        print(f"hint: {terminal_text(hint, multiline=True)}", file=sys.stderr)
    return code
