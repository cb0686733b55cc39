"""``launch RUN_DIR --new [--retry]``: a run's directory made once, its run started once, nothing left behind when it
cannot start.

``mkdir`` is atomic, on NFS too: of two clients that chose the same directory in a run root they share, one
creates it and the other is refused; no config is overwritten.  The config read from stdin is checked before
anything is made (a link that drops while it is sent leaves it cut short: refused, nothing made).  From just after
``mkdir`` until it has answered, the launch holds an exclusive ``flock`` on the directory, so a retry waits for it.

``--retry`` is the client asking again after its link dropped before the answer came (docs/PROTOCOL.md): an
existing directory whose config.json is, byte for byte, the one on stdin is that launch's own.  Started already
(status.json exists): the answer is its supervisor's pid with ``"resumed": true``; not started: it is started now.

A launch that is refused or fails after the directory is made (a full disk, torch missing, the script missing)
removes it: nothing runs in it, and an empty run directory would only be listed as a broken run.
"""
import fcntl
import json
import os
import shutil
from typing import Callable

from .config import ConfigError, config_from_dict
from .failures import DISK_FULL_HINT, disk_full_text
from .fsutil import NO_SPACE, atomic_write
from .status import CONFIG, read_status
from .supervisor import supervisor_pid

_CHECK_ROOT = "check the run root on this host (free space, permissions)"


class Refused(Exception):
    """The launch is refused: ``error`` and ``hint`` (and ``fields``) are the runner's JSON answer."""

    def __init__(self, error: str, hint: str = "", **fields: object):
        super().__init__(error)
        self.error, self.hint, self.fields = error, hint, fields


def _no_space(run_dir: str) -> Refused:
    """A full disk, said with the free space of the runs folder (the run's own directory is gone by then)."""
    return Refused(disk_full_text(os.path.dirname(run_dir), "the launch"), DISK_FULL_HINT, failure="disk_full")


def _check_config(data: bytes) -> None:
    try:
        config_from_dict(json.loads(data.decode("utf-8")))
    except ConfigError as exc:
        raise Refused(str(exc), "fix the field and launch again", field=exc.field) from None
    except ValueError as exc:
        raise Refused("the config sent on stdin is not whole JSON (%s)" % exc,
                      "launch again: the link may have dropped while it was sent") from None


def _make(run_dir: str, retry: bool) -> None:
    """mkdir RUN_DIR (0700); an existing one is refused unless ``retry``."""
    parent = os.path.dirname(run_dir)
    try:
        os.makedirs(parent, mode=0o700, exist_ok=True)
        os.mkdir(run_dir, 0o700)
    except FileExistsError:
        if not os.path.isdir(parent):
            raise Refused("cannot create the run directory %s: %s is not a directory" % (run_dir, parent),
                          "move that file aside on the host") from None
        if not retry or not os.path.isdir(run_dir):
            raise Refused("run directory %s already exists: another launch chose the same run id" % run_dir,
                          "launch again (a new run id is chosen); to start an ended run again, use rerun") from None
    except OSError as exc:
        if exc.errno in NO_SPACE:
            raise _no_space(run_dir) from None
        raise Refused("cannot create the run directory %s: %s" % (run_dir, exc.strerror or exc), _CHECK_ROOT) from None


def _read(path: str):
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def _remove(run_dir: str) -> None:
    shutil.rmtree(run_dir, ignore_errors=True)


def launch_new(run_dir: str, data: bytes, retry: bool, start: Callable[[], int], answer: Callable[[dict], None]) -> int:
    """Make ``run_dir`` with ``data`` as its config.json and ``start()`` the run there (its exit status is
    returned); ``answer`` prints a retry's ``resumed`` reply.  Raises :class:`Refused`."""
    _check_config(data)
    _make(run_dir, retry)
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a launch of this directory still running (its link dropped) ends first
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(run_dir))
        except FileNotFoundError:
            same = False
        if not same:
            raise Refused("the run directory %s was removed while this launch waited for another one" % run_dir,
                          "launch again")
        config_path = os.path.join(run_dir, CONFIG)
        existing = _read(config_path)
        if existing is not None and existing != data:
            raise Refused("run directory %s already exists: another launch chose the same run id" % run_dir,
                          "launch again (a new run id is chosen); to start an ended run again, use rerun")
        status = read_status(run_dir)
        if status is not None:  # only a retry gets here: this launch started the run before its link dropped
            answer({"ok": True, "pid": supervisor_pid(run_dir, status) or 0, "run_dir": run_dir, "resumed": True})
            return 0
        try:
            if existing is None:
                atomic_write(config_path, data, 0o600)
            rc = start()
        except OSError as exc:
            _remove(run_dir)
            if exc.errno in NO_SPACE:
                raise _no_space(run_dir) from None
            raise
        except BaseException:
            _remove(run_dir)
            raise
        if rc != 0:  # refused (torch missing, the script not there): nothing runs in it
            _remove(run_dir)
        return rc
    finally:
        os.close(fd)
