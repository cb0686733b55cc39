"""Builds the runner into one reproducible zipapp named by its content hash.

Same sources give the same bytes (sorted entries, fixed timestamps and
permissions), so a host that has ``runner-<hash>.pyz`` never receives it again.
"""
import hashlib
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import remote_runner
from remote_runner.fsutil import atomic_write

from ..paths import cache_dir

#: The zip's entry point: run the runner's command line.
MAIN = b"import sys\nfrom remote_runner.__main__ import main\nsys.exit(main())\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class RunnerPackage:
    path: Path
    sha256: str
    size: int

    @property
    def name(self) -> str:
        return self.path.name


def _sources() -> list[tuple[str, bytes]]:
    root = Path(remote_runner.__file__).parent
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    return [("remote_runner/" + p.relative_to(root).as_posix(), p.read_bytes()) for p in files]


def build_bytes() -> bytes:
    """The zipapp's bytes: a shebang line, then a zip of the runner's sources."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in [("__main__.py", MAIN)] + _sources():
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data, compresslevel=9)
    return b"#!/usr/bin/env python3\n" + buf.getvalue()


def build_runner(out_dir: Path | None = None) -> RunnerPackage:
    """Build (or find in the cache) ``runner-<hash>.pyz``."""
    data = build_bytes()
    digest = hashlib.sha256(data).hexdigest()
    out_dir = Path(out_dir) if out_dir else cache_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"runner-{digest[:16]}.pyz"
    if not path.exists() or path.stat().st_size != len(data):
        atomic_write(str(path), data, 0o755)
    return RunnerPackage(path=path, sha256=digest, size=len(data))
