"""The user's own training script ("script" mode): its entry, and metrics from the lines it prints.

Each rank runs the script under :func:`run_script_and_exit` (``runner _script ENTRY ARGS``),
as ``python ENTRY ARGS`` would, and leaves the way the built-in workloads do.

The supervisor calls :func:`parse_metric_line` for every stdout line, so a line
that is not a metric must be refused quickly; every regex here is compiled once
and none of them can backtrack badly on long or hostile lines.

Forms understood (keys case-insensitive)::

    Epoch 0, Step 10, Loss: 1.2341
    iter 10: loss 4.2312, time 31.2ms, mfu 12.34%      (nanoGPT; % becomes a fraction)
    step 250: train loss 2.1, val loss 2.3              (-> train_loss, val_loss)
    step=10 loss=0.5 lr=3e-4
    {"iter": 10, "loss": 0.5}                           (one JSON object per line)
    {'loss': 0.5, 'learning_rate': 5e-05, 'epoch': 0.1} (a printed Python dict)

or a user-supplied regex with named groups (``(?P<step>\\d+)``, ``(?P<loss>...)``;
any other named group becomes a float field).
"""
import json
import math
import os
import re
import runpy
import sys
from re import Pattern
from typing import Optional, Union

from remote_runner.proctree import exit_without_finalizing
from remote_runner.spools import SpoolWriter

#: The hidden runner command each rank of a script-mode run starts with: ``_script ENTRY ARGS...``.
SCRIPT_COMMAND = "_script"
#: Longer lines are not metrics (and are not worth scanning).
MAX_LINE = 4096

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?)"
# A key starts only where no key character precedes it (no quadratic rescans of long words),
# may carry a qualifier ("val loss"), and is separated from its number by ":", "=" or spaces.
_PAIR = re.compile(
    r"(?<![\w./-])(?:(?P<qual>train|val|valid|validation|test|eval)[ _])?(?P<key>[a-z_][\w./-]*)['\"]?"
    r"(?:\s*[:=]\s*|\s+)(?P<value>" + _NUMBER + r")(?P<unit>ms|s|%)?(?![\w.])",
    re.IGNORECASE)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_MAYBE_NUMBER = re.compile(r"\d|nan|inf", re.IGNORECASE)

_STEP_KEYS = {"step": "step", "steps": "step", "iter": "step", "iters": "step", "iteration": "step",
              "it": "step", "global_step": "step"}
_RENAMES = dict(_STEP_KEYS, learning_rate="lr")
_TIME_KEYS = ("time", "dt", "step_time", "iter_time", "batch_time")
_COUNTERS = ("step", "epoch")


def run_script_and_exit(path: str, args: list[str]) -> None:
    """Run the script at ``path`` as its ``__main__`` with ``args``, then leave with its exit status.

    As ``python path args`` would: ``sys.argv = [path, *args]``, the script's folder first on
    ``sys.path``; a SystemExit gives its code, an exception prints its traceback (from the
    script's own frames, through ``sys.excepthook``) and gives 1.  Whatever the script made
    stays referenced until the process is gone, so nothing (a DDP reducer, a gloo process
    group) is destroyed on the way out.  Imports nothing the script does not import itself:
    it may set environment variables before it imports torch.
    """
    sys.argv = [path] + list(args)
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    kept = None  # the script's globals, or its exception (whose frames hold them): held, never read
    try:
        kept = runpy.run_path(path, run_name="__main__")
        code = 0
    except SystemExit as exc:
        kept, code = exc, _exit_status(exc.code)
    except BaseException as exc:  # KeyboardInterrupt too: shown as Python shows it
        kept = exc  # noqa: F841 (held, see above)
        shown = exc.with_traceback(_script_frames(exc.__traceback__, path))  # the hook may read either
        sys.excepthook(type(exc), shown, shown.__traceback__)
        code = 130 if isinstance(exc, KeyboardInterrupt) else 1
    exit_without_finalizing(code)


def _exit_status(code: object) -> int:
    """The process exit status of ``SystemExit(code)``, as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code)
    sys.stderr.write("%s\n" % (code,))
    return 1


def _script_frames(tb, path: str):
    """The traceback from the script's first frame on (without runpy's and ours), or None."""
    while tb is not None and tb.tb_frame.f_code.co_filename != path:
        tb = tb.tb_next
    return tb


def parse_metric_line(line: str, regex: Optional[Pattern] = None) -> Optional[dict]:
    """The metrics on one printed line, e.g. ``{"step": 10, "loss": 1.2341}``; None when it has none.

    With ``regex`` only that pattern's named groups are read.  Values that are NaN or infinite
    become None.  A line counts as a metric line when it has a key containing "loss", or a
    step/epoch counter together with another number.
    """
    if "\r" in line:  # progress bars redraw with \r: the last drawing is the current one
        line = line.rstrip("\r\n").rsplit("\r", 1)[-1]
    if len(line) > MAX_LINE or not _MAYBE_NUMBER.search(line):
        return None
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if regex is not None:
        return _from_regex(line, regex)
    stripped = line.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        record = _from_json(stripped)
        if record is not None:
            return record
    return _qualified({_key(m.group("qual"), m.group("key"), m.group("unit")): _value(m.group("value"), m.group("unit"))
                       for m in _PAIR.finditer(line)})


def _from_regex(line: str, regex: Pattern) -> Optional[dict]:
    match = regex.search(line)
    if match is None:
        return None
    fields: dict[str, Optional[float]] = {}
    for name, text in match.groupdict().items():
        if text is None:
            continue
        try:
            fields[_key(None, name, None)] = _finite(float(text))
        except ValueError:
            continue
    return _counters_as_int(fields) if fields else None


def _from_json(text: str) -> Optional[dict]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: hostile nesting
        return None
    if not isinstance(data, dict):
        return None
    return _qualified({_key(None, str(k), None): _finite(_float(v)) for k, v in data.items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool)})


def _float(value: Union[int, float]) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer too large for a float
        return math.inf


def _key(qualifier: Optional[str], key: str, unit: Optional[str]) -> str:
    key = key.lower()
    if unit in ("ms", "s") and key in _TIME_KEYS:
        return "step_time_ms"
    key = _RENAMES.get(key, key)
    return "%s_%s" % (qualifier.lower(), key) if qualifier else key


def _value(text: str, unit: Optional[str]) -> Optional[float]:
    value = _finite(float(text))
    if value is None or not unit or unit == "ms":
        return value
    return value * 1000.0 if unit == "s" else value / 100.0


def _finite(value: float) -> Optional[float]:
    return value if math.isfinite(value) else None


def _qualified(fields: dict[str, Optional[float]]) -> Optional[dict]:
    """``fields`` when they make a metric record (see :func:`parse_metric_line`), else None."""
    if any("loss" in key for key in fields) or (any(k in fields for k in _COUNTERS) and len(fields) > 1):
        return _counters_as_int(fields)
    return None


def _counters_as_int(fields: dict[str, Optional[float]]) -> dict:
    for key in _COUNTERS:
        value = fields.get(key)
        if value is not None and float(value).is_integer():
            fields[key] = int(value)
    return fields


class ScriptMetrics:
    """Turns a script's stdout lines into records in the metrics spool at ``path``.

    A line without a step gets the running count of metric lines as its step; ``world_size``,
    when given, goes into every record as it does in the built-in workloads' records.
    """

    def __init__(self, path: str, metric_regex: Optional[Union[str, Pattern]] = None,
                 world_size: Optional[int] = None):
        self.regex = re.compile(metric_regex) if isinstance(metric_regex, str) else metric_regex
        self.writer = SpoolWriter(path)
        self.extra: dict[str, object] = {"phase": "script"}
        if world_size is not None:
            self.extra["world_size"] = world_size
        self.count = 0

    def feed(self, line: str) -> Optional[dict]:
        """Parse one line; the record written (without seq and t), or None when it held no metric."""
        record = parse_metric_line(line, self.regex)
        if record is None:
            return None
        self.count += 1
        if record.get("step") is None:
            record["step"] = self.count
        record.update(self.extra)
        self.writer.write(record)
        return record

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> "ScriptMetrics":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
