"""Everything the supervisor does to read a script run's metrics, in one object (``Supervisor.script_reading``).

Per run: the metrics spool's writer and the sink, the readers of rank 0's stdout and stderr, the watcher
of the log files the script writes.  Per torchrun attempt (a taken rendezvous port starts another): the
FIFOs rank 0 writes to and the thread that pumps them.
"""
import os
import re
from typing import Optional

from ..config import RunConfig
from ..spools import METRICS, SpoolWriter, append_event
from . import rank0
from .files import LogFileWatcher
from .output import OutputReader
from .pump import OutputPump
from .reports import SettingsReports
from .sink import MetricSink

#: Seconds the pipes are read after torchrun has ended (a process the script left behind may hold one).
DRAIN_S = 5.0


class ScriptReading:
    def __init__(self, run_dir: str, config: RunConfig):
        self.run_dir = run_dir
        script = config.script
        regex = re.compile(script.metric_regex) if script and script.metric_regex else None
        self.writer = SpoolWriter(os.path.join(run_dir, METRICS))
        self.sink = MetricSink(self.writer, self._event, world_size=config.world_size,
                               loss_series=script.loss_series if script else None)
        self.reports = SettingsReports(self._event)
        self.readers = {name: OutputReader(name, self.sink, regex, reports=self.reports)
                        for name in ("stdout", "stderr")}
        self.watcher = LogFileWatcher(run_dir, self.sink)
        self.watcher.start()
        self._pump: Optional[OutputPump] = None
        self._holds: list = []
        self._fifos: dict = {}
        self._folder = run_dir  # where the FIFOs are (see rank0.make_fifos)

    def _event(self, event: str, /, **fields: object) -> None:
        append_event(self.run_dir, event, **fields)

    def prepare(self, env: dict) -> None:
        """Before torchrun starts: the FIFOs, and the environment that points rank 0 at them.

        Two defaults, unless the user set them: Rich (Lightning's default progress bar) draws its live frames
        only on a terminal, ``TTY_COMPATIBLE=1`` makes it draw them here too, as in the user's terminal; tqdm
        redraws a bar at most every 0.1 s, so a line printed after a fast step (Transformers' log dict) would
        get the step of a frame drawn a few steps before, ``TQDM_MININTERVAL=0.002`` lets a bar show every step
        up to 500 steps a second (at most 500 frames a second, tens of KB; 0.01 left a Transformers Trainer's
        log one step behind on a loaded 2-core machine, whose steps took under 10 ms)."""
        self._folder = rank0.make_fifos(self.run_dir)
        for name, fifo in (("stdout", rank0.STDOUT_FIFO), ("stderr", rank0.STDERR_FIFO), ("framed", rank0.FRAMED_FIFO)):
            read_fd, hold_fd = rank0.open_reader(os.path.join(self._folder, fifo))
            self._fifos[name] = read_fd
            self._holds.append(hold_fd)
        env[rank0.OUTPUT_ENV] = self._folder
        env[rank0.FILES_ENV] = self.run_dir
        env.setdefault("TTY_COMPATIBLE", "1")
        env.setdefault("TQDM_MININTERVAL", "0.002")

    def start(self, torchrun_stdout, stdout_log_fd: int, stderr_log_fd: int) -> None:
        """torchrun has started: pump its stdout (the other ranks) and rank 0's FIFOs into the logs."""
        others = os.dup(torchrun_stdout.fileno())
        torchrun_stdout.close()
        pipes = {others: (stdout_log_fd, None),
                 self._fifos["stdout"]: (stdout_log_fd, self.readers["stdout"]),
                 self._fifos["stderr"]: (stderr_log_fd, self.readers["stderr"])}
        self._pump = OutputPump(pipes, first=[self._fifos["stderr"], self._fifos["stdout"]],
                                framed=(self._fifos["framed"], {1: self._fifos["stdout"], 2: self._fifos["stderr"]}))
        self._pump.start()

    def attempt_ended(self) -> None:
        """torchrun has ended: let the pipes end, read them to their end (bounded), remove the FIFOs."""
        self._release_holds()
        if self._pump is not None:
            self._pump.join(DRAIN_S)
            self._pump = None
        rank0.remove_fifos(self._folder, self.run_dir)

    def attempt_failed(self) -> None:
        """torchrun could not be started: nothing will read the FIFOs."""
        self._release_holds()
        for fd in self._fifos.values():
            os.close(fd)
        self._fifos = {}
        rank0.remove_fifos(self._folder, self.run_dir)

    def close(self) -> None:
        """The run has ended: the files' last records, then the no-metric report when nothing was read."""
        self.watcher.stop()
        self.sink.close(list(self.readers.items()))
        self.writer.close()

    def _release_holds(self) -> None:
        for fd in self._holds:
            os.close(fd)
        self._holds = []
