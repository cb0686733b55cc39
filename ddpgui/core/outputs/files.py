"""How an export writes its files: each under a temp name beside it, renamed over it once whole, so a full disk or
any other failure leaves no part of a file; the error names the file (and, for a full disk, the free space)::

    out = output_folder(out_dir)
    with output_file(out / "summary.csv", newline="") as fh:
        fh.write(...)
"""
from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from remote_runner.fsutil import NO_SPACE, free_bytes

from ..errors import HintedError
from ..runs.pull import size_text


class OutputError(HintedError, OSError):
    """A file or folder of an export that could not be written; the message names it, ``hint`` says what to do.
    An OSError, so that whatever reports a file that cannot be written reports it."""


def output_folder(path: str | Path) -> Path:
    """The export's folder ``path``, made (with its parents) when it does not exist yet."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise output_error(folder, exc, folder=True) from exc
    return folder


@contextmanager
def output_file(path: Path, mode: str = "w", **open_args) -> Iterator[IO]:
    """``path`` opened for writing (``mode`` "w" or "wb", ``open_args`` as :func:`open`'s): the file is written
    under a temp name beside it and renamed to ``path`` when the block ends without an error; on an error it is
    removed (``path`` keeps what it held), and an OSError becomes an :class:`OutputError` that names ``path``."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
    try:
        # O_EXCL: a new file of this process, with the mode (0666 less the umask) any file it writes gets
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), mode, **open_args) as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise output_error(path, exc) from exc
        raise


def output_error(path: Path, exc: OSError, folder: bool = False) -> OutputError:
    """The error of ``path`` (a file of the export, or its ``folder``) that could not be written because of ``exc``:
    for a full disk, the space left beside it."""
    reason = exc.strerror or str(exc)
    reason = reason[:1].lower() + reason[1:]
    if folder:
        return OutputError(f"cannot make the output folder {path}: {reason}",
                           "choose a folder you may write to (a name that is not a file's)")
    if exc.errno in NO_SPACE:
        free = free_bytes(str(path.parent))
        left = f", which leaves {size_text(free)} free in {path.parent}" if free is not None else ""
        return OutputError(f"{path} was not written: no space left on the disk; the partial file was removed{left}",
                           "free some space on that disk, or write the export to another folder")
    return OutputError(f"cannot write {path}: {reason}", "choose an output folder you may write to")
