"""The host monitor's samplers (``<runner> monitor``) still running on this machine, found in /proc as ps would."""
from pathlib import Path


def samplers(runner_marker: str) -> list[int]:
    """Live (not zombie) processes with ``monitor`` in their argv and an argument starting with ``runner_marker``
    (the runner's path, or the run root it lies under)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and b"monitor" in argv and any(arg.startswith(runner_marker.encode()) for arg in argv):
            found.append(int(entry.name))
    return found
