"""The packaged runner: probe a host, launch and supervise a DDP run, stream its spools.

Standard library and torch only (nvidia-ml-py when present); Python 3.9 syntax.
It never imports ddpgui: the two meet only through the file protocol in
docs/PROTOCOL.md.

This file is the first the runner runs, from the zipapp or ``python -m remote_runner``: it parses on any
Python (2.7 included) and refuses, in the runner's JSON, a Python too old for the rest of it.
"""
import sys

__version__ = "0.1.0"

#: The oldest Python the runner runs on.
MIN_PYTHON = (3, 9)
#: What a Python older than MIN_PYTHON is told: ``PYTHON_TOO_OLD % (major, minor, *MIN_PYTHON)``.
PYTHON_TOO_OLD = "Python %d.%d is too old (the runner needs %d.%d or newer)"
#: What to do about it: ``PYTHON_TOO_OLD_HINT % MIN_PYTHON``.
PYTHON_TOO_OLD_HINT = ("set the host profile's Python to a Python %d.%d or newer on the host, e.g. the python of a "
                       "venv or conda env")

if sys.version_info < MIN_PYTHON:
    import json

    sys.stdout.write(json.dumps({
        "ok": False, "field": "python", "failure": "python_too_old",
        "error": PYTHON_TOO_OLD % (tuple(sys.version_info[:2]) + MIN_PYTHON),
        "hint": PYTHON_TOO_OLD_HINT % MIN_PYTHON + " (now: %s)" % sys.executable}, sort_keys=True) + "\n")
    sys.stdout.flush()
    sys.exit(2)
