"""The host-side queue's processes, found from here (the tests' hosts are this machine)."""
from pathlib import Path


def queue_processes(root: Path) -> list[int]:
    """The live ``_queue`` processes (remote_runner/queue.py) of the run root ``root``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"_queue" in argv and str(root).encode() in argv:
            found.append(int(entry.name))
    return found
