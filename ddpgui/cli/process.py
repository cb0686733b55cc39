"""What the command line does to its own process: Ctrl-C, closed pipes, library logging.

Every command goes through :func:`run_command`, so each of these holds for all of them:

- Ctrl-C (SIGINT) interrupts wherever it comes, even when the CLI was started with SIGINT ignored (a
  non-interactive shell's ``cmd &``, some CI runners): Python installs its KeyboardInterrupt handler only
  when SIGINT is at its default, so without :func:`honour_ctrl_c` such a process never sees it.
- A reader that goes away (``ddpgui runs | head -1``) ends the command quietly, the way ``cat`` does.
- Libraries (paramiko) log to our logger tree only; their messages and tracebacks reach stderr only with
  ``DDPGUI_DEBUG=1``; the CLI prints its own messages.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable

from ..core.logs import quiet_library_logs
from .common import EXIT_INTERRUPTED


def honour_ctrl_c() -> None:
    """Make SIGINT raise KeyboardInterrupt in this process, whatever disposition it inherited."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at each record."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure_logging() -> None:
    """Library log records (paramiko's "Error reading SSH protocol banner" and its tracebacks) go nowhere
    unless ``DDPGUI_DEBUG`` is set; then everything at DEBUG goes to stderr."""
    if quiet_library_logs():
        return
    logging.getLogger().addHandler(logging.NullHandler())  # also stops logging's last-resort handler
    # Our own notices stay visible: the files a script upload skipped, and why (a link out of the folder...).
    uploads = logging.getLogger("ddpgui.core.targets.uploads")
    if not any(getattr(h, "ddpgui_notice", False) for h in uploads.handlers):
        notice = _StderrHandler()
        notice.setLevel(logging.WARNING)
        notice.setFormatter(logging.Formatter("%(message)s"))
        notice.ddpgui_notice = True
        uploads.addHandler(notice)


def _quiet_stdout() -> None:
    """After the reader of stdout went away: point stdout at /dev/null so the interpreter's final flush
    does not raise BrokenPipeError again (the convention in Python's signal documentation)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def run_command(func: Callable[[], int]) -> int:
    """Run one CLI command: Ctrl-C anywhere → exit 130 with one line, a closed stdout → exit quietly."""
    honour_ctrl_c()
    configure_logging()
    try:
        try:
            code = func()
        except SystemExit as exc:  # argparse after --help or a usage error: its output is flushed here too
            code = exc.code
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        try:
            print("\nddpgui: interrupted", file=sys.stderr)
        except (KeyboardInterrupt, BrokenPipeError):
            pass
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _quiet_stdout()
        return 0
