"""Rank 0's own output, apart from the other ranks': the FIFOs its entry points fds 1 and 2 at, the log files
its audit hook notes (remote_runner/scriptread/rank0.py, files.py). Real processes, real FIFOs."""
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

from remote_runner.scriptread import rank0
from remote_runner.scriptread.files import WRITTEN_FILES
from remote_runner.scriptread.pump import _Frames
from remote_runner.spools import EVENTS

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
sys.stderr.write("")  # nothing: no frame
sys.stderr.buffer.write(b"x" * 10000) if hasattr(sys.stderr, "buffer") else None  # several frames, one piece
sys.stderr.write("")
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
    env = dict(os.environ, PYTHONPATH=str(REPO), RANK=rank, WORLD_SIZE="2", **{rank0.OUTPUT_ENV: folder,
                                                               rank0.FILES_ENV: str(tmp_path)})
    return subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "logs")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def test_rank_0_writes_to_the_fifos_and_notes_the_logs_it_writes(tmp_path):
    folder = rank0.make_fifos(str(tmp_path))
    assert folder != str(tmp_path) and os.stat(folder).st_mode & 0o777 == 0o700  # a private local folder
    out_fd, out_hold = rank0.open_reader(os.path.join(folder, rank0.STDOUT_FIFO))
    err_fd, err_hold = rank0.open_reader(os.path.join(folder, rank0.STDERR_FIFO))
    framed_fd, framed_hold = rank0.open_reader(os.path.join(folder, rank0.FRAMED_FIFO))
    proc = _run(tmp_path, "0", folder)
    assert proc.wait(30) == 0
    for hold in (out_hold, err_hold, framed_hold):  # as the supervisor does once torchrun has ended: the reader
        os.close(hold)                              # then sees the end
    got = _read_all([out_fd, err_fd, framed_fd], proc)
    assert got[out_fd] == b"from C: fd 1\n" and got[err_fd] == b""  # file descriptors 1 and 2 as they are
    # Python's print, to either stream, in frames of one FIFO, in the order printed; its env is gone for children
    assert _Frames().split(got[framed_fd]) == [(1, b"attached\n"), (2, b"to stderr\n"), (1, b"[]\n"),
                                               (2, b"x" * 10000)]
    assert proc.stdout.read() == b"" and proc.stderr.read() == b""  # nothing went to torchrun's pipes
    noted = [json.loads(line) for line in (tmp_path / WRITTEN_FILES).read_text().splitlines()]
    logs = tmp_path / "logs"
    assert [(n["path"], n["kind"]) for n in noted] == [
        (str(logs / "metrics.csv"), "csv"), (str(logs / "sub" / "events.out.tfevents.123.host"), "tensorboard"),
        (str(logs / "raw.csv"), "csv")]
    # The world size torchrun started it with, in the run's events: what the run got, beside what it asked
    (report,) = [json.loads(line) for line in (tmp_path / EVENTS).read_text().splitlines()]
    assert (report["event"], report["setting"], report["value"]) == ("script_reports", "world_size", 2)
    rank0.remove_fifos(folder, str(tmp_path))
    assert not os.path.exists(folder)


def test_other_ranks_print_as_before(tmp_path):
    folder = rank0.make_fifos(str(tmp_path))
    proc = _run(tmp_path, "1", folder)
    out, err = proc.communicate(timeout=30)
    assert out.decode().splitlines()[:2] == ["not attached", "from C: fd 1"] and err == b"to stderr\n" + b"x" * 10000
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


BUFFERED = r'''
import os, sys, time
from remote_runner.scriptread.rank0 import buffer_stdout
out = buffer_stdout(flush_s=0.05)
assert sys.stdout is out and not out.line_buffering
print("one")
print("two")
print("bar 1/3", file=sys.stderr, end="\r")  # stderr goes out after what stdout holds
print("three")
pid = os.fork()  # what stdout holds goes out before the fork: the child does not print it again
if pid == 0:
    print("child")  # line-buffered in the child (it has no flushing thread)
    os._exit(0)
os.waitpid(pid, 0)
print("four")
time.sleep(float(sys.argv[1]))  # "four" reaches the pipe by the flushing thread, while the script sleeps
os._exit(0)  # no flush at exit: what got out did so on its own
'''


def test_rank_0_stdout_is_batched_yet_in_order_and_on_time(tmp_path):
    """Rank 0's stdout is block-buffered (a write per print into a pipe would slow a chatty script by a tenth)
    and flushed every 50 ms; stderr and forks send it first, so the two streams keep the script's order (here
    both go into one pipe, which shows that order)."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", BUFFERED, "3"], env=dict(os.environ, PYTHONPATH=str(REPO),
                            PYTHONUNBUFFERED="1"), stdout=write_fd, stderr=write_fd)
    os.close(write_fd)
    got = b""
    deadline = time.monotonic() + 60
    while not got.endswith(b"four\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([read_fd], [], [], 1)
        if ready:
            data = os.read(read_fd, 65536)
            if not data:
                break
            got += data
    assert proc.poll() is None, "four arrived only when the script ended"  # it sleeps 3 s after printing it
    assert got == b"one\ntwo\nbar 1/3\rthree\nchild\nfour\n"
    assert proc.wait(30) == 0
    os.close(read_fd)


TQDM_WRITE = r'''
import sys
from remote_runner.scriptread.rank0 import attach_rank0
from tqdm import tqdm

assert attach_rank0()
bar = tqdm(total=60, mininterval=0)  # on stderr, drawn at every step
for step in range(1, 61):
    bar.update(1)
    if step % 5 == 0:  # Transformers' way: the log dict through tqdm.write (stdout), which redraws the bar after
        tqdm.write(str({"loss": step / 100, "epoch": step / 60}))
bar.close()
'''


def test_a_line_printed_between_two_bar_frames_gets_the_step_of_the_bar_however_late_it_is_read(tmp_path):
    """The script prints its bar on stderr and its log dicts on stdout; the supervisor reads only once it has
    all ended (the worst lag there is): each dict still gets the step the bar showed when it was printed, as
    Python's two streams come through one FIFO in the order they were written. Two pipes read stderr first
    would give every dict the last step."""
    from remote_runner.scriptread.output import OutputReader
    from remote_runner.scriptread.pump import OutputPump
    from remote_runner.scriptread.sink import MetricSink

    folder = rank0.make_fifos(str(tmp_path))
    fds = {name: rank0.open_reader(os.path.join(folder, name)) for name in rank0.FIFOS}
    env = dict(os.environ, PYTHONPATH=str(REPO), RANK="0", **{rank0.OUTPUT_ENV: folder})
    proc = subprocess.run([sys.executable, "-c", TQDM_WRITE], env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b"", proc
    for _, hold in fds.values():
        os.close(hold)
    written = []

    class Writer:
        def write(self, record, t=None):
            written.append(dict(record))

    sink = MetricSink(Writer(), lambda *a, **k: None)
    log = os.open(os.devnull, os.O_WRONLY)
    (out, _), (err, _), (framed, _) = (fds[name] for name in rank0.FIFOS)
    pump = OutputPump({out: (log, OutputReader("stdout", sink)), err: (log, OutputReader("stderr", sink))},
                      first=[err, out], framed=(framed, {1: out, 2: err}))
    pump.start()
    pump.join(30)
    os.close(log)
    rank0.remove_fifos(folder, str(tmp_path))
    got = [(r["step"], r["loss"]) for r in written if "loss" in r]
    assert got == [(step, step / 100) for step in range(5, 61, 5)], got
