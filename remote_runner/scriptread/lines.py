"""Metrics from one printed line of a user's script.

The supervisor calls :func:`parse_metric_line` for every line the script prints (100,000 lines/s
must stay cheap), so a line that is not a metric is refused early: over :data:`MAX_LINE`, or
without a digit (or nan/inf), it is not scanned at all.  Every regex here is compiled once and is
linear: a key may only start where no key character precedes it, and a number only right after
its key's separator, so a 4 KiB line of digits, colons or equals signs costs one pass.

Forms understood (keys case-insensitive, lowercased)::

    Epoch 0, Step 10, Loss: 1.2341
    iter 10: loss 4.2312, time 31.2ms, mfu 12.34%      (nanoGPT; % becomes a fraction)
    step 250: train loss 2.1, val loss 2.3              (-> train_loss, val_loss)
    step:  2  loss:  6.1098  grad_norm:  4.6416  memory:  2.49GiB(3.14%)  tps: 177,138  tflops: 96.17  mfu: 9.72%
                                                        (torchtitan: memory_gib, thousands separators)
    validate step: 10  loss:  4.1234  ...               (torchtitan's validation: val_loss, ...)
    {'loss': '4.312', 'grad_norm': '0.8636', 'learning_rate': '4.688e-05', 'epoch': '0.25'}
                                                        (Transformers' Trainer; numbers, or strings as in v5)
    epoch 0: {'accuracy': 0.75, 'f1': 0.8}              (accelerator.print in Accelerate's examples)
    step=10 loss=0.5 lr=3e-4, {"iter": 10, "loss": 0.5}, loss: tensor(0.5123, grad_fn=<...>)

or a user-supplied regex with named groups (``(?P<step>\\d+)``, ``(?P<loss>...)``; any other
named group becomes a float field).

Keys: ``learning_rate`` becomes ``lr``, step aliases (``iter``, ``global_step``...) ``step``; a unit
that names a size (GiB, MiB, GB, MB) or a time (s, ms) goes into the key (``memory_gib``,
``eval_time_s``) unless the key already ends with it, except the step time, which is always
``step_time_ms`` in milliseconds; ``%`` makes a fraction.  Lightning's ``v_num`` is never a metric.
"""
import json
import math
import re
from re import Pattern
from typing import Optional, Union

#: Longer lines are not metrics (and are not worth scanning).
MAX_LINE = 4096
#: A step or epoch above this (the largest integer a float holds exactly) is not a counter.
MAX_COUNTER = 2 ** 53

# A number: "12,345" (thousands, only in whole groups of three), 0.5, .5, 5e-4, nan, inf.  A number
# followed by ",<digit>" is part of a list ("1,2") and is not a value.
_NUMBER = (r"[-+]?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d|,\d)|\d+(?:\.\d*)?(?!,\d)|\.\d+)(?:[eE][-+]?\d+)?"
           r"|[-+]?(?:nan|inf(?:inity)?)")
_UNIT = r"GiB|MiB|GB|MB|ms|s|%"
# A value as printed: 0.5, '0.5' (Trainer v5), tensor(0.5..., np.float64(0.5).
_VALUE = (r"(?:tensor\(|np\.(?:float|int)\d*\()?(?P<vq>['\"]?)(?P<value>" + _NUMBER + r")(?P<unit>" + _UNIT
          + r")?(?P=vq)")
# A key starts only where no key character precedes it (no quadratic rescans of long words), may
# carry a qualifier ("val loss", "grad norm"), and is separated from its value by ":", "=" or spaces.
# A value followed by a word character, ".", "%|" (a bar's "100%|") or a quote ('cuda:0') is not one.
_PAIR = re.compile(
    r"(?<![\w./-])(?:(?P<qual>train|training|val|valid|validate|validation|test|eval|grad)[ _])?"
    r"(?P<key>[a-z_][\w./-]*)['\"]?(?:\s*[:=]\s*|\s+)" + _VALUE + r"(?![\w.|'\"%])",
    re.IGNORECASE)
_VALUE_ONLY = re.compile(_VALUE + r"\)?", re.IGNORECASE)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_MAYBE_NUMBER = re.compile(r"\d|nan|inf", re.IGNORECASE)

_STEP_KEYS = {"step": "step", "steps": "step", "iter": "step", "iters": "step", "iteration": "step",
              "it": "step", "global_step": "step"}
_RENAMES = dict(_STEP_KEYS, learning_rate="lr")
_TIME_KEYS = ("time", "dt", "step_time", "iter_time", "batch_time")
_COUNTERS = ("step", "epoch")
# Words followed by a number in ordinary prose ("iter 1 of 3: the cost is 0.9") or in a line's address
# ("rank 0:", "pid 4242") are no metric names.
_NOT_METRICS = frozenset(["v_num", "of", "is", "in", "at", "to", "for", "the", "a", "an", "by", "with", "from", "on",
                          "and", "or", "per", "over", "after", "than", "are", "was", "were", "be", "has", "have",
                          "took", "into", "about", "last", "next", "every", "each", "all", "only", "rank",
                          "local_rank", "pid", "port", "worker"])
_SIZE_UNITS = {"gib": "_gib", "mib": "_mib", "gb": "_gb", "mb": "_mb", "ms": "_ms", "s": "_s"}
# A qualifier on the step ("validate step: 10") qualifies the whole line's values.
_LINE_QUALIFIERS = {"val": "val", "valid": "val", "validate": "val", "validation": "val", "test": "test",
                    "eval": "eval"}

Fields = dict[str, Optional[Union[int, float]]]


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
    return _qualified(_from_pairs(line))


def is_summary(record: dict) -> bool:
    """Whether ``record`` is the Trainer's closing dict (``train_runtime``, ``train_loss``...): a summary, not a step."""
    return "train_runtime" in record


def metric_key(key: str, qualifier: Optional[str] = None, unit: Optional[str] = None) -> str:
    """The series name of a printed ``key`` (lowercase, renamed, its unit and qualifier added)."""
    key = key.lower()
    unit = unit.lower() if unit else None
    if unit in ("ms", "s") and key in _TIME_KEYS and not qualifier:
        return "step_time_ms"
    key = _RENAMES.get(key, key)
    if qualifier:
        key = "%s_%s" % (qualifier.lower(), key)
    suffix = _SIZE_UNITS.get(unit) if unit else None
    if suffix and not key.endswith(suffix):
        key += suffix
    return key


def metric_value(key: str, text: str) -> Optional[tuple[str, Optional[float]]]:
    """``(series name, value)`` for a value printed as ``text`` (a progress bar's ``loss=0.5``), or None.

    None when ``text`` is not one number (with its unit, quotes, ``tensor(...)``); the value is
    None when the number is NaN or infinite.  Lightning's ``v_num`` gives None.
    """
    name = key.strip()
    if not name or name.lower() in _NOT_METRICS or len(text) > 200:
        return None
    match = _VALUE_ONLY.fullmatch(text.strip())
    if match is None:
        return None
    unit = match.group("unit")
    name = metric_key(name, None, unit)
    return name, _value(match.group("value"), unit, name == "step_time_ms")


def _from_pairs(line: str) -> Fields:
    fields: Fields = {}
    line_qualifier = None
    for qualifier, key, _quote, value, unit in _PAIR.findall(line):
        lower = key.lower()
        if lower in _NOT_METRICS:
            continue
        counter = lower in _STEP_KEYS or lower == "epoch"
        name = metric_key(key, None if counter else qualifier, unit)
        if counter and qualifier:
            line_qualifier = _LINE_QUALIFIERS.get(qualifier.lower(), line_qualifier)
        fields[name] = _value(value, unit, name == "step_time_ms")
    if line_qualifier:
        prefix = line_qualifier + "_"
        fields = {k if k in _COUNTERS or k.startswith(prefix) else prefix + k: v for k, v in fields.items()}
    return fields


def _from_regex(line: str, regex: Pattern) -> Optional[dict]:
    match = regex.search(line)
    if match is None:
        return None
    fields: Fields = {}
    for name, text in match.groupdict().items():
        if text is None:
            continue
        try:
            fields[metric_key(name)] = _finite(float(text))
        except ValueError:
            continue
    fields = _counters(fields)
    return fields if fields else None


def _from_json(text: str) -> Optional[dict]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: hostile nesting
        return None
    if not isinstance(data, dict):
        return None
    fields: Fields = {}
    for key, value in data.items():
        name = metric_key(str(key))
        if name in _NOT_METRICS or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            fields[name] = _finite(_float(value))
        elif isinstance(value, str):  # '{"loss": "0.5"}', as Trainer v5 prints its values
            parsed = metric_value(str(key), value)
            if parsed is not None:
                fields[parsed[0]] = parsed[1]
    return _qualified(fields)


def _float(value: Union[int, float]) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer too large for a float
        return math.inf


def _value(text: str, unit: Optional[str], in_ms: bool) -> Optional[float]:
    text = text.replace(",", "")
    if unit == "%":
        return _scaled(text, -2)
    if in_ms and unit and unit.lower() == "s":
        return _scaled(text, 3)
    return _finite(float(text))


def _scaled(text: str, power: int) -> Optional[float]:
    """``text`` times ``10**power``, rounded once ("9.72" % gives 0.0972, not 0.09720000000000001)."""
    if "e" in text or "E" in text or "n" in text or "N" in text:  # an exponent already, nan or inf
        return _finite(float(text) * 10.0 ** power)
    return _finite(float("%se%d" % (text, power)))


def _finite(value: float) -> Optional[float]:
    return value if math.isfinite(value) else None


def _qualified(fields: Fields) -> Optional[dict]:
    """``fields`` when they make a metric record (see :func:`parse_metric_line`), else None."""
    fields = _counters(fields)
    if any("loss" in key for key in fields) or (any(k in fields for k in _COUNTERS) and len(fields) > 1):
        return fields
    return None


def _counters(fields: Fields) -> Fields:
    """Integral step and epoch as ints; a step or epoch that cannot be one (negative, above 2**53) dropped."""
    for key in _COUNTERS:
        if key not in fields:
            continue
        value = fields[key]
        if value is None or not 0 <= value <= MAX_COUNTER:
            del fields[key]
        elif float(value).is_integer():
            fields[key] = int(value)
    return fields
