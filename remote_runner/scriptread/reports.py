"""What a script says it runs with: precision, compile, batch size, world size and backend, as its framework
prints them.

The run was asked for bf16 on 2 processes; did the script use that?  Frameworks say so at start-up, in their own
words:

- Lightning: ``Using bfloat16 Automatic Mixed Precision (AMP)`` / ``Using 16bit Automatic Mixed Precision (AMP)``;
  its DDP strategy: ``distributed_backend=gloo`` and ``All distributed processes registered. Starting with 2
  processes``;
- Accelerate's state, as scripts print it: ``Mixed precision type: bf16``, ``Num processes: 2``,
  ``Distributed environment: MULTI_CPU  Backend: gloo``;
- Transformers' ``TrainingArguments`` printed by a script: ``bf16=True``, ``torch_compile=False``,
  ``per_device_train_batch_size=8`` (one field per line, or all on one);
- nanoGPT's configurator: ``Overriding: dtype = bfloat16``;
- torchrun: the ``WORLD_SIZE`` it started rank 0 with (rank 0 appends that report itself, :mod:`.rank0`).

Each new (setting, value) is an event ``script_reports`` with the line that said it; the client compares it
with what the run was asked (:mod:`ddpgui.core.runs.reported`).  Only the first ``SCAN_BYTES`` of each stream are
looked at (start-up is where frameworks say it), a chunk at a time with ``bytes.find``: a chatty script's
later output costs nothing.
"""
import re
from typing import Callable, Optional

from .frames import without_ansi

SCAN_BYTES = 4 * 1024 * 1024
_WORDS = (b"precision", b"bf16", b"fp16", b"tf32", b"torch_compile", b"batch_size", b"overriding:", b"processes",
          b"backend")
_LIGHTNING = re.compile(r"Using (bfloat16|bf16|16bit|16|32bit|64bit) Automatic Mixed Precision")
_ACCELERATE = re.compile(r"Mixed precision type:\s*(\w+)")
_HF_FIELD = re.compile(r"(?<![\w.])(bf16|fp16|tf32|torch_compile|torch_compile_mode|per_device_train_batch_size)"
                       r"\s*=\s*([\w.-]+)")
_WORLD = re.compile(r"Starting with (\d+) processes|^Num processes:\s*(\d+)$")
_BACKEND = re.compile(r"(?:distributed_backend=|Backend:\s*)(\w+)")
_NANOGPT = re.compile(r"Overriding:\s*(dtype|compile|batch_size)\s*=\s*(\S+)")
_PRECISION_WORDS = {"bfloat16": "bf16", "bf16": "bf16", "16bit": "fp16", "16": "fp16", "fp16": "fp16",
                    "float16": "fp16", "no": "fp32", "float32": "fp32", "32bit": "fp32", "fp32": "fp32"}


class SettingsReports:
    """Feed each stream's bytes (:meth:`feed`); ``event(name, **fields)`` gets a ``script_reports`` per new value."""

    def __init__(self, event: Callable[..., None]):
        self.event = event
        self.reported: dict = {}  # setting → value last reported
        self._scanned: dict = {}
        self._tail: dict = {}
        self._hf: dict = {}  # the TrainingArguments fields seen so far

    def feed(self, stream: str, data: bytes) -> None:
        scanned = self._scanned.get(stream, 0)
        if scanned >= SCAN_BYTES:
            return
        self._scanned[stream] = scanned + len(data)
        data = self._tail.get(stream, b"") + data
        cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        self._tail[stream] = data[cut:][-4096:]
        whole = data[:cut].lower()
        if not any(word in whole for word in _WORDS):
            return
        for raw in re.split(rb"[\r\n]", data[:cut]):
            low = raw.lower()
            if any(word in low for word in _WORDS):
                self._line(without_ansi(raw.decode("utf-8", "replace")).strip())

    def _line(self, line: str) -> None:
        found = _WORLD.search(line)
        if found:
            self._report("world_size", int(found.group(1) or found.group(2)), line)
        found = _BACKEND.search(line)
        if found:
            self._report("backend", found.group(1).lower(), line)
        found = _LIGHTNING.search(line)
        if found:
            self._report("precision", _PRECISION_WORDS.get(found.group(1), found.group(1)), line)
            return
        found = _ACCELERATE.search(line)
        if found:
            self._report("precision", _PRECISION_WORDS.get(found.group(1).lower(), found.group(1)), line)
            return
        found = _NANOGPT.search(line)
        if found:
            key, value = found.group(1), found.group(2)
            if key == "dtype":
                self._report("precision", _PRECISION_WORDS.get(value, value), line)
            elif key == "compile":
                self._report("compile", "off" if value == "False" else "on", line)
            elif value.isdigit():
                self._report("batch_size", int(value), line)
            return
        fields = dict(_HF_FIELD.findall(line))
        if fields:
            self._hf.update(fields)
            self._hf_reports()

    def _hf_reports(self) -> None:
        hf = self._hf

        def said(*keys: str) -> str:
            return "TrainingArguments " + ", ".join("%s=%s" % (k, hf[k]) for k in keys if k in hf)

        if hf.get("bf16") == "True":
            self._report("precision", "bf16", said("bf16"))
        elif hf.get("fp16") == "True":
            self._report("precision", "fp16", said("fp16"))
        elif hf.get("bf16") == "False" and hf.get("fp16") == "False":
            self._report("precision", "tf32" if hf.get("tf32") == "True" else "fp32", said("bf16", "fp16", "tf32"))
        if hf.get("torch_compile") == "False":
            self._report("compile", "off", said("torch_compile"))
        elif hf.get("torch_compile") == "True":
            mode = hf.get("torch_compile_mode")
            self._report("compile", mode if mode and mode != "None" else "on",
                         said("torch_compile", "torch_compile_mode"))
        size = hf.get("per_device_train_batch_size")
        if size is not None and size.isdigit():
            self._report("batch_size", int(size), said("per_device_train_batch_size"))

    def _report(self, setting: str, value: object, line: str) -> None:
        if self.reported.get(setting) == value:
            return
        self.reported[setting] = value
        self.event("script_reports", setting=setting, value=value, line=line[:300])


def reported_matches(asked: object, reported: object, setting: str) -> Optional[bool]:
    """Whether a report agrees with the setting asked (``on``: compiled, in a mode the script did not say)."""
    if setting == "compile" and reported == "on":
        return asked != "off"
    if setting in ("batch_size", "world_size"):
        try:
            return int(asked) == int(reported)
        except (TypeError, ValueError):
            return None
    return str(asked) == str(reported)
