"""Queued signals carrying Python objects must not corrupt reference counts.

PySide6 6.12.0 lost a reference to the emitted Python constants on every queued
emit; after a few thousand emits the interpreter freed ``True``/``None`` and died
("none_dealloc: deallocating None").  The app emits at that rate while runs
stream, so the dependency pin excludes it; this test fails (crashes) on it.
"""
import subprocess
import sys

SCRIPT = """
import sys
from PySide6.QtCore import QCoreApplication, QObject, Qt, QTimer, Signal
app = QCoreApplication(sys.argv)
class Emitter(QObject):
    sig = Signal(str, object)
got = []
emitter = Emitter()
emitter.sig.connect(lambda a, b: got.append(b), Qt.QueuedConnection)
for i in range(20000):
    emitter.sig.emit("x", None if i % 3 == 0 else (True if i % 3 == 1 else False))
QTimer.singleShot(0, app.quit)
app.exec()
print(len(got), got.count(None), got.count(True))
"""


def test_many_queued_emits_of_python_constants():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["20000", "6667", "6667"]
