"""The runner's detached helpers on the tests' hosts (this machine), found from here."""
from pathlib import Path


def helper_processes(root: Path, command: bytes) -> list[int]:
    """The live processes of the runner command ``command`` (``_queue``, ``_release``) of the run root ``root``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if command in argv and str(root).encode() in argv:
            found.append(int(entry.name))
    return found


def queue_processes(root: Path) -> list[int]:
    """The live ``_queue`` processes (remote_runner/queue.py) of the run root ``root``."""
    return helper_processes(root, b"_queue")


def release_watchers(root: Path) -> list[int]:
    """The live ``_release`` watchers (remote_runner/release.py) of the run root ``root``."""
    return helper_processes(root, b"_release")
