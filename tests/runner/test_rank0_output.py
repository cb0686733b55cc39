"""Rank 0's own output, apart from the other ranks': the FIFOs its entry points fds 1 and 2 at, the log files
its audit hook notes (remote_runner/scriptread/rank0.py, files.py). Real processes, real FIFOs."""
import json
import os
import select
import subprocess
import sys
from pathlib import Path

from remote_runner.scriptread import rank0
from remote_runner.scriptread.files import WRITTEN_FILES

REPO = Path(__file__).resolve().parents[2]
CHILD = r'''
import os, sys
from remote_runner.scriptread.rank0 import attach_rank0
print("attached" if attach_rank0() else "not attached", flush=True)
os.write(1, b"from C: fd 1\n")
print("to stderr", file=sys.stderr, flush=True)
logs = sys.argv[1]
os.makedirs(os.path.join(logs, "sub"), exist_ok=True)
open(os.path.join(logs, "metrics.csv"), "w").close()
open(os.path.join(logs, "metrics.csv"), "a").close()  # noted once
open(os.path.join(logs, "sub", "events.out.tfevents.123.host"), "wb").close()
os.close(os.open(os.path.join(logs, "raw.csv"), os.O_WRONLY | os.O_CREAT))
open(os.path.join(logs, "notes.txt"), "w").close()  # not a log
open(os.path.join(logs, "metrics.csv")).close()  # read, not written
print(sorted(k for k in os.environ if k.startswith("DDPGUI_SCRIPT")), flush=True)
'''


def _read_all(fds, proc):
    got = {fd: b"" for fd in fds}
    while True:
        ready, _, _ = select.select(list(fds), [], [], 5)
        if not ready and proc.poll() is not None:
            return got
        for fd in ready:
            data = os.read(fd, 65536)
            if not data:
                fds = [f for f in fds if f != fd]
            got[fd] += data
        if not fds:
            return got


def _run(tmp_path, rank, folder):
    env = dict(os.environ, PYTHONPATH=str(REPO), RANK=rank, **{rank0.OUTPUT_ENV: folder,
                                                               rank0.FILES_ENV: str(tmp_path)})
    return subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "logs")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def test_rank_0_writes_to_the_fifos_and_notes_the_logs_it_writes(tmp_path):
    folder = rank0.make_fifos(str(tmp_path))
    assert folder != str(tmp_path) and os.stat(folder).st_mode & 0o777 == 0o700  # a private local folder
    out_fd, out_hold = rank0.open_reader(os.path.join(folder, rank0.STDOUT_FIFO))
    err_fd, err_hold = rank0.open_reader(os.path.join(folder, rank0.STDERR_FIFO))
    proc = _run(tmp_path, "0", folder)
    assert proc.wait(30) == 0
    os.close(out_hold)  # as the supervisor does once torchrun has ended: the reader then sees the end
    os.close(err_hold)
    got = _read_all([out_fd, err_fd], proc)
    assert got[out_fd].decode().splitlines() == ["attached", "from C: fd 1", "[]"]  # its env is gone for children
    assert got[err_fd] == b"to stderr\n"
    assert proc.stdout.read() == b"" and proc.stderr.read() == b""  # nothing went to torchrun's pipes
    noted = [json.loads(line) for line in (tmp_path / WRITTEN_FILES).read_text().splitlines()]
    logs = tmp_path / "logs"
    assert [(n["path"], n["kind"]) for n in noted] == [
        (str(logs / "metrics.csv"), "csv"), (str(logs / "sub" / "events.out.tfevents.123.host"), "tensorboard"),
        (str(logs / "raw.csv"), "csv")]
    rank0.remove_fifos(folder, str(tmp_path))
    assert not os.path.exists(folder)


def test_other_ranks_print_as_before(tmp_path):
    folder = rank0.make_fifos(str(tmp_path))
    proc = _run(tmp_path, "1", folder)
    out, err = proc.communicate(timeout=30)
    assert out.decode().splitlines()[:2] == ["not attached", "from C: fd 1"] and err == b"to stderr\n"
    assert not (tmp_path / WRITTEN_FILES).exists()
    rank0.remove_fifos(folder, str(tmp_path))


def test_without_a_usable_temp_folder_the_fifos_go_to_the_run_directory(tmp_path, monkeypatch):
    def no_temp_folder(prefix):
        raise PermissionError(13, "Permission denied", "/tmp")

    monkeypatch.setattr(rank0.tempfile, "mkdtemp", no_temp_folder)
    folder = rank0.make_fifos(str(tmp_path))
    assert folder == str(tmp_path) and os.path.exists(tmp_path / rank0.STDOUT_FIFO)
    rank0.remove_fifos(folder, str(tmp_path))
    assert not os.path.exists(tmp_path / rank0.STDOUT_FIFO) and tmp_path.is_dir()


def test_a_fifo_that_nobody_opened_does_not_block_the_rank(tmp_path):
    folder = rank0.make_fifos(str(tmp_path))  # no reader: the rank's open fails and it prints as before
    proc = _run(tmp_path, "0", folder)
    out, _ = proc.communicate(timeout=30)
    assert out.decode().splitlines()[0] == "not attached"
    rank0.remove_fifos(folder, str(tmp_path))
