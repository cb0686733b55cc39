"""One Target interface for "This computer" and SSH hosts.

Subclasses implement a handful of transport primitives (run a command, stream
a command's output, read and write files); everything the app asks of a host —
probe, deploy, launch, status, stop, follow — is written once here on top of
them, so callers cannot tell a local target from a remote one.
"""
from __future__ import annotations

import json
import posixpath
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from remote_runner import MIN_PYTHON, PYTHON_TOO_OLD, PYTHON_TOO_OLD_HINT
from remote_runner.config import RunConfig
from remote_runner.failures import DISK_FULL_HINT, NO_SPACE_PATH, NO_SPACE_TEXT

from ..runs.protocol import End, FollowDecoder, Message
from .zipapp import RunnerPackage

#: Seconds without any byte from ``follow`` (it sends a heartbeat every second) before the link counts as dead.
FOLLOW_SILENCE_S = 5.0

#: Progress callback: (bytes done, bytes total, files done, files total).
Progress = Callable[[int, int, int, int], None]

#: The first lines of every ``python -c`` snippet (:meth:`Target.python_snippet`), in words any Python parses
#: (2.7 included): a Python too old for the runner says so instead of failing on what follows.
PYTHON_GUARD = ("import sys\n"
                f"if sys.version_info < {MIN_PYTHON!r}:\n"
                f" sys.stderr.write({PYTHON_TOO_OLD + chr(10)!r} % (tuple(sys.version_info[:2]) + {MIN_PYTHON!r}))\n"
                " sys.exit(2)\n")
_TOO_OLD = re.compile(re.escape(PYTHON_TOO_OLD).replace("%d", r"\d+"))

_HASH_SNIPPET = ("import hashlib,sys\n"
                 "try:\n h=hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest()\n"
                 "except OSError:\n h=''\nprint(h)")


@dataclass(frozen=True)
class CommandResult:
    rc: int
    stdout: bytes
    stderr: bytes

    def json(self) -> dict:
        return json.loads(self.stdout.decode("utf-8", "replace").strip().splitlines()[-1])


class TargetError(RuntimeError):
    """Something a host could not do; ``hint`` says what the user can do about it.

    ``failure`` is the runner's own word for it when it gave one (``disk_full``, ``run_dir_missing``, ...).
    """

    failure: str | None = None

    def __init__(self, message: str, hint: str = "", field: str | None = None):
        super().__init__(message)
        self.hint = hint
        self.field = field

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text} — {self.hint}" if self.hint else text


class ConnectionLost(TargetError):
    """The link to the host dropped (or went silent) while a command was running."""


class Stream(ABC):
    """The stdout of a long-running command on the target."""

    @abstractmethod
    def read(self, timeout: float) -> bytes:
        """Bytes available within ``timeout`` seconds; b"" at end of stream; TimeoutError if silent."""

    @abstractmethod
    def close(self) -> None:
        """End the command (the run it follows goes on)."""

    @abstractmethod
    def fileno(self) -> int:
        """A descriptor that select() reports readable when :meth:`read` has something (or EOF)."""


@dataclass(frozen=True)
class LaunchResult:
    run_dir: str
    pid: int
    uploaded_bytes: int
    resumed: bool = False  # a retried launch found its run started by the call whose answer was lost


class Target(ABC):
    """A host that can run the runner; ``name`` is its profile name."""

    name: str
    python: str
    #: Whether the host's files are this computer's (This computer): a script run then works in its own folder,
    #: nothing uploaded.
    sees_local_files: bool = False

    # ---- transport primitives ------------------------------------------------------------
    @abstractmethod
    def exec(self, argv: list[str], stdin: bytes | None = None, timeout: float | None = 60.0) -> CommandResult:
        """Run ``argv`` (never through a shell on our side; quoted for the remote shell by SSH targets)."""

    @abstractmethod
    def stream(self, argv: list[str]) -> Stream:
        """Start ``argv`` and return its stdout as a :class:`Stream`."""

    @abstractmethod
    def write_file(self, path: str, data: bytes, mode: int = 0o600) -> None:
        """Write ``data`` to ``path`` atomically."""

    @abstractmethod
    def read_file(self, path: str) -> bytes: ...

    @abstractmethod
    def makedirs(self, path: str, mode: int = 0o700) -> None: ...

    @abstractmethod
    def run_root(self) -> str:
        """The absolute directory on the host under which runners and runs live."""

    def close(self) -> None:  # noqa: B027 (a no-op default, not an abstract method)
        """Release connections (nothing for a local target)."""

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- files ---------------------------------------------------------------------------
    def put(self, local_path: str, remote_path: str, mode: int = 0o600) -> None:
        with open(local_path, "rb") as fh:
            self.write_file(remote_path, fh.read(), mode)

    def write_files(self, files: list[tuple[str, bytes, int]], written: Callable[[int], None] | None = None) -> None:
        """Write each ``(path, data, mode)`` atomically, making missing parent directories (0700);
        ``written(i)`` after file ``i`` is in place.  SSH hosts without SFTP send them in one exec channel."""
        made: set[str] = set()
        for i, (path, data, mode) in enumerate(files):
            parent = posixpath.dirname(path)
            if parent not in made:
                self.makedirs(parent, 0o700)
                made.add(parent)
            self.write_file(path, data, mode)
            if written:
                written(i)

    def get(self, remote_path: str, local_path: str) -> None:
        with open(local_path, "wb") as fh:
            fh.write(self.read_file(remote_path))

    def sha256(self, path: str) -> str | None:
        """The sha256 of a file on the host, or None when it is missing."""
        result = self.exec(self.python_snippet(_HASH_SNIPPET, path), timeout=120)
        if result.rc != 0:
            raise self.python_error(result)
        return result.stdout.decode().strip() or None

    # ---- the runner ----------------------------------------------------------------------
    _runner_path: str | None = None  # set by deploy()

    def runner_path(self, package: RunnerPackage) -> str:
        return posixpath.join(self.run_root(), package.name)

    def deploy(self, package: RunnerPackage, progress: Progress | None = None) -> int:
        """Put the runner on the host unless it is there already; returns the bytes uploaded."""
        path = self.runner_path(package)
        self._runner_path = path
        if self.sha256(path) == package.sha256:
            return 0
        self.makedirs(self.run_root())
        if progress:
            progress(0, package.size, 0, 1)
        self.put(str(package.path), path, mode=0o644)
        if self.sha256(path) != package.sha256:
            raise TargetError(f"the runner uploaded to {self.name}:{path} does not match its hash",
                              "check free disk space on the host and try again")
        if progress:
            progress(package.size, package.size, 1, 1)
        return package.size

    def runner(self, *args: str) -> list[str]:
        if self._runner_path is None:
            raise TargetError(f"the runner is not deployed to {self.name}", "call deploy() first")
        return [self.python, self._runner_path, *args]

    def python_snippet(self, snippet: str, *args: str) -> list[str]:
        """``python -c snippet args...`` with the profile's Python, :data:`PYTHON_GUARD` first."""
        return [self.python, "-c", PYTHON_GUARD + snippet, *args]

    def python_error(self, result: CommandResult) -> TargetError:
        """What went wrong when the profile's Python did not give the expected output."""
        err = result.stderr.decode("utf-8", "replace").strip()
        too_old = _TOO_OLD.search(err)
        if too_old:
            found = TargetError(too_old.group(0), PYTHON_TOO_OLD_HINT % MIN_PYTHON + f" (now: {self.python})",
                                field="python")
            found.failure = "python_too_old"
            return found
        if "Traceback (most recent call last)" in err:  # the interpreter ran: the runner itself failed
            return self._runner_crash(err)
        if result.rc == 127 or "No such file" in err or "not found" in err:
            return TargetError(f"Python {self.python!r} was not found on {self.name}",
                               "set the host profile's python to an interpreter that exists there, e.g. "
                               "/home/you/venv/bin/python or the python of a conda env", field="python")
        return TargetError(f"{self.python} failed on {self.name} (exit {result.rc}): {err[-500:]}",
                           "is it a Python 3 interpreter?", field="python")

    def _runner_crash(self, err: str) -> TargetError:
        """The runner's own error, from the last line of its traceback (a full disk said as such)."""
        last = next((line.strip() for line in reversed(err.splitlines()) if line.strip()), "")
        if NO_SPACE_TEXT.search(last):
            path = NO_SPACE_PATH.search(last)
            found = TargetError(f"the host's disk is full ({path.group(1) if path else 'the run root'}): the runner "
                                f"on {self.name} could not write ({last})", DISK_FULL_HINT)
            found.failure = "disk_full"
            return found
        return TargetError(f"the runner failed on {self.name}: {last[-500:]}",
                           "check the host's run root (free space, permissions); if both are fine, this is a bug "
                           "of the runner: report this message")

    def _runner_json(self, *args: str, timeout: float | None = 60.0, stdin: bytes | None = None) -> dict:
        result = self.exec(self.runner(*args), stdin=stdin, timeout=timeout)
        try:
            reply = result.json()
        except (ValueError, IndexError):
            raise self.python_error(result) from None
        if not reply.get("ok", True):
            refused = TargetError(reply.get("error", "the runner refused"), reply.get("hint", ""), reply.get("field"))
            refused.failure = reply.get("failure")
            raise refused
        return reply

    def probe(self) -> dict:
        """What the host has (GPUs, driver, torch, NCCL, compile support) and its problems, with hints."""
        return self._runner_json("probe", "--run-root", self.run_root(), timeout=120)

    def run_dir(self, run_id: str, node: int | None = None) -> str:
        """``<run root>/runs/<run id>`` for a one-node run; ``<run id>.node<k>`` for node k of a multi-node run,
        so that nodes whose hosts share one run root (an NFS home) each have their own directory."""
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise TargetError(f"invalid run id {run_id!r}")
        return posixpath.join(self.run_root(), "runs", run_id if node is None else f"{run_id}.node{node}")

    def launch(self, config: RunConfig, retry: bool = False) -> LaunchResult:
        """Create the run directory (0700) with its config.json and start the run detached.

        The runner creates the directory itself and refuses one that exists, so two clients
        (or two hosts sharing a run root) can never overwrite each other's run.  ``retry``: the
        link dropped before an earlier call's answer came; a directory that call made is this
        run's own (started already: ``resumed``), see ``launch --retry`` in docs/PROTOCOL.md.
        """
        run_dir = self.run_dir(config.run_id, config.node_rank if config.nnodes > 1 else None)
        reply = self._runner_json("launch", run_dir, "--new", *(["--retry"] if retry else []), "--profile", self.name,
                                  stdin=config.to_json().encode())
        return LaunchResult(run_dir=reply["run_dir"], pid=int(reply["pid"]), uploaded_bytes=0,
                            resumed=bool(reply.get("resumed")))

    def list_runs(self) -> dict:
        """The run directories under the run root, each with its config, status and spool sizes
        (the runner's ``runs``; docs/PROTOCOL.md)."""
        return self._runner_json("runs", self.run_root(), timeout=120)

    def status(self, run_dir: str) -> dict:
        return self._runner_json("status", run_dir)

    def queue_add(self, cells: list[dict], sweep: dict | None = None) -> dict:
        """Hand ``cells`` (``{"run_id", "index", "sweep_id", "config": config.json's text}``) to the host's queue,
        which launches them one at a time, detached (``queue-add``; docs/PROTOCOL.md, "The host-side queue")."""
        payload = json.dumps({"cells": cells, "sweep": sweep}).encode()
        return self._runner_json("queue-add", self.run_root(), "--profile", self.name, stdin=payload, timeout=120)

    def queue_status(self, sweeps: bool = False) -> dict:
        """The host queue's cells (waiting, launched, cancelled, failed) and whether its process runs."""
        return self._runner_json("queue-status", self.run_root(), *(["--sweeps"] if sweeps else []))

    def queue_stop(self, sweep_id: str | None = None) -> dict:
        """Cancel the host queue's waiting cells (of ``sweep_id``) and stop the run it is running."""
        return self._runner_json("queue-stop", self.run_root(), *(["--sweep", sweep_id] if sweep_id else []),
                                 timeout=180)

    def release_set(self, policy: dict | None) -> dict:
        """Keep the release policy on the host (None clears it) and start its watcher; the host's release-status
        (docs/PROTOCOL.md, "Release")."""
        return self._runner_json("release-set", self.run_root(), stdin=json.dumps({"policy": policy}).encode())

    def release_status(self) -> dict:
        """Where the host's release stands: phase, what keeps the host, when it releases, the last outcome."""
        return self._runner_json("release-status", self.run_root())

    def release_cancel(self) -> dict:
        """Hold the host's release until it is used again."""
        return self._runner_json("release-cancel", self.run_root())

    def collected(self, run_dir: str, offsets: dict[str, int], outputs: bool = False) -> dict:
        """Tell the host this client stored the run's records up to ``offsets`` (and downloaded the outputs it was
        asked to keep): a release that destroys the disk waits for it."""
        return self._runner_json("collected", run_dir,
                                 stdin=json.dumps({"offsets": offsets, "outputs": outputs}).encode())

    def outputs(self, run_dir: str, *args: str) -> dict:
        """The runner's ``outputs``: the files the run wrote, with sizes; ``--sha256 ENTRY``, one file's hash."""
        return self._runner_json("outputs", run_dir, *args, timeout=600)

    def stop(self, run_dir: str) -> dict:
        return self._runner_json("stop", run_dir, timeout=120)

    def rdzv_listen(self, port: int = 0, expect: int = 1, timeout: float = 60.0) -> Stream:
        """Multi-node preflight on node 0: hold a rendezvous port (0: a free one) and answer ``expect`` checks.

        The stream's first JSON line is ``{"ok": true, "port": P, "token": T}`` (or an error and a hint).
        """
        return self.stream(self.runner("rdzv-listen", "--port", str(port), "--expect", str(expect),
                                       "--timeout", str(timeout)))

    def rdzv_check(self, address: str, port: int, token: str, timeout: float = 5.0) -> dict:
        """Multi-node preflight on another node: connect to node 0's :meth:`rdzv_listen` from this host."""
        return self._runner_json("rdzv-check", address, str(port), token, "--timeout", str(timeout),
                                 timeout=timeout + 60)

    def follow_command(self, run_dir: str, offsets: dict[str, int] | None = None, once: bool = False) -> list[str]:
        """The runner's ``follow`` command for ``run_dir`` from byte ``offsets``."""
        return self.runner("follow", run_dir, "--from", json.dumps(offsets or {}), *(["--once"] if once else []))

    def follow(self, run_dir: str, offsets: dict[str, int] | None = None, once: bool = False,
               silence_s: float = FOLLOW_SILENCE_S) -> Iterator[Message]:
        """Messages of the run's spools from ``offsets`` until the run has ended.

        Raises :class:`ConnectionLost` when the stream breaks or stays silent for
        ``silence_s`` (the runner sends a heartbeat every second).
        """
        stream = self.stream(self.follow_command(run_dir, offsets, once))
        decoder = FollowDecoder()
        try:
            while True:
                try:
                    data = stream.read(silence_s)
                except TimeoutError:
                    raise ConnectionLost(f"no data from {self.name} for {silence_s:.0f} s",
                                         "the connection will be retried") from None
                if not data:
                    if not decoder.idle:
                        raise ConnectionLost(f"the follow stream from {self.name} broke mid-frame")
                    raise ConnectionLost(f"the follow stream from {self.name} ended before the run did")
                for message in decoder.feed(data):
                    yield message
                    if isinstance(message, End):
                        return
        finally:
            stream.close()

