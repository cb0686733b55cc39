"""A finished run's folder as ``ddpgui pull`` finds it on a host, made by hand (no training run needed)."""
import hashlib
import json
import os
from pathlib import Path

#: Names a script may well write, and some it should not (all are data, never shell).
ODD_NAMES = ["spaces and ✓ unicode.txt", "new\nline.txt", "-starts-with-dash.txt", "quote'\"$(touch x)`id`.txt",
             "sub dir/deeper/ckpt-1.pt"]
NOT_UTF8 = b"caf\xe9.bin"


def sha256_file(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def make_run_folder(root: Path, run_id: str, big: Path | None = None) -> Path:
    """A finished run's folder as a script run leaves it, its outputs_dir beside it, and things never to follow."""
    run_dir = root / "runs" / run_id
    outputs = root / "outs ✓"
    (run_dir / "sub dir" / "deeper").mkdir(parents=True)
    outputs.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps({"run_id": run_id, "outputs_dir": str(outputs)}))
    (run_dir / "stdout.log").write_bytes(b"step 1 loss 0.5\n" * 100)
    for i, name in enumerate(ODD_NAMES):
        (run_dir / name).write_bytes(os.urandom(1000 + i))
    (run_dir / os.fsdecode(NOT_UTF8)).write_bytes(b"not utf-8 name")
    (outputs / "model.pt").write_bytes(os.urandom(300_000))
    if big is not None:
        os.link(big, outputs / "big.bin")
    (run_dir / "to passwd").symlink_to("/etc/passwd")
    (run_dir / "outside dir").symlink_to("/etc")
    (run_dir / "inside link").symlink_to(run_dir / "stdout.log")
    os.mkfifo(run_dir / "a fifo")
    return run_dir


def write_random(path: Path, size: int) -> Path:
    """A file of ``size`` random bytes (written a MiB at a time)."""
    with open(path, "wb") as fh:
        for start in range(0, size, 2**20):
            fh.write(os.urandom(min(2**20, size - start)))
    return path
