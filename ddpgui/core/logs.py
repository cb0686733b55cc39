"""Where log records go: libraries' (paramiko's) nowhere unless asked, so the CLI and the app print only ours."""
from __future__ import annotations

import logging
import os

#: Set to 1 to get every log record, the libraries' too, on stderr.
DEBUG_ENV = "DDPGUI_DEBUG"
#: Loggers of libraries that log their own errors with tracebacks (paramiko's transport thread logs
#: "Exception (client): Error reading SSH protocol banner" and two tracebacks for a port that sends nothing,
#: before we get its exception and say it in our words).
QUIET_LIBRARIES = ("paramiko",)


def debug_logging() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")


def quiet_library_logs() -> bool:
    """Send the libraries' log records nowhere, or, with ``DDPGUI_DEBUG=1``, everything at DEBUG to stderr.
    Returns whether debug logging is on."""
    if debug_logging():
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
        return True
    for name in QUIET_LIBRARIES:
        logger = logging.getLogger(name)
        logger.propagate = False
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
    return False
