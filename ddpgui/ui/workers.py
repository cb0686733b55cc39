"""Background work as generators on a QThreadPool (the superqt worker pattern).

A work function is plain Python: a generator that yields progress values and
returns a result, or an ordinary function.  The worker emits ``yielded`` for each
value, then ``returned`` or ``errored``, then ``finished``, always on the GUI
thread.  ``abort()`` is cooperative: it takes effect at the next ``yield``.
:class:`WorkerPool` tracks live workers so the app can abort and await them all on quit.
"""
from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable

from PySide6.QtCore import QRunnable, QThreadPool, Signal

from ddpgui.core.store import StoreFileError

from .bridge import GuiRelay


class WorkerAborted(Exception):
    """Raised inside a work function's generator when the worker was aborted."""


class _Relay(GuiRelay):
    """Lives on the GUI thread; the worker thread posts ``(signal name, value)`` pairs to it."""

    started = Signal()
    yielded = Signal(object)
    returned = Signal(object)
    errored = Signal(object)
    finished = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.received.connect(self._dispatch)

    def _dispatch(self, posted: tuple[str, object]) -> None:
        kind, value = posted
        signal = getattr(self, kind)
        if kind in ("started", "finished"):
            signal.emit()
        else:
            signal.emit(value)
        if kind == "errored" and isinstance(value, StoreFileError):  # the app's dialog, as for one raised in a slot
            sys.excepthook(type(value), value, value.__traceback__)


class GeneratorWorker(QRunnable):
    """Runs ``func(*args, **kwargs)`` on a pool thread; signals arrive on the GUI thread."""

    def __init__(self, func: Callable, *args: object, **kwargs: object):
        super().__init__()
        self.setAutoDelete(False)
        self._func, self._args, self._kwargs = func, args, kwargs
        self._abort = threading.Event()
        self.done = threading.Event()
        self.relay = _Relay()
        self.started, self.yielded = self.relay.started, self.relay.yielded
        self.returned, self.errored, self.finished = self.relay.returned, self.relay.errored, self.relay.finished

    def abort(self) -> None:
        self._abort.set()

    def run(self) -> None:
        def post(kind: str, value: object) -> None:
            self.relay.post((kind, value))

        post("started", None)
        try:
            result = self._func(*self._args, **self._kwargs)
            if inspect.isgenerator(result):
                result = self._drain(result, post)
            post("returned", result)
        except Exception as exc:
            post("errored", exc)
        finally:
            self.done.set()
            post("finished", None)

    def _drain(self, gen, post) -> object:
        while True:
            if self._abort.is_set():
                gen.close()
                raise WorkerAborted("cancelled")
            try:
                value = next(gen)
            except StopIteration as stop:
                return stop.value
            post("yielded", value)


class WorkerPool:
    """Starts workers and keeps them until they finish, so quitting can abort and await them."""

    def __init__(self, max_threads: int = 8):
        self.pool = QThreadPool()
        self.pool.setMaxThreadCount(max_threads)
        self._live: set[GeneratorWorker] = set()

    def start(self, func: Callable, *args: object, on_yield: Callable | None = None,
              on_return: Callable | None = None, on_error: Callable | None = None,
              on_finish: Callable | None = None, **kwargs: object) -> GeneratorWorker:
        worker = GeneratorWorker(func, *args, **kwargs)
        for signal, slot in ((worker.yielded, on_yield), (worker.returned, on_return),
                             (worker.errored, on_error), (worker.finished, on_finish)):
            if slot is not None:
                signal.connect(slot)
        worker.finished.connect(lambda: self._live.discard(worker))
        self._live.add(worker)
        self.pool.start(worker)
        return worker

    @property
    def active(self) -> int:
        return sum(1 for w in self._live if not w.done.is_set())

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        """Abort every worker and wait for them (work blocked in I/O ends at its own timeout)."""
        for worker in list(self._live):
            worker.abort()
        return self.pool.waitForDone(timeout_ms)
