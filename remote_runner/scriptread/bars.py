"""Progress-bar frames: one drawing of a tqdm or Rich bar, as a script redraws it with carriage returns.

tqdm (its default format, and Lightning's ``TQDMProgressBar``, whose bar format always shows ``n/total``)::

    Epoch 3:  40%|████      | 4/10 [00:00<00:00, 72.39it/s, v_num=2, train_loss=0.671]
    train: 5it [00:01, 4.90it/s, loss=0.5]                      (no total)
    Sanity Checking: |          | 0/? [00:00<?, ?it/s]          (Lightning, total unknown)
    100%|██████████| 1.23k/10.0k [00:01<00:09, 1.02kit/s]       (unit_scale; 1.36s/it when slow)

Rich (Lightning's ``RichProgressBar``; values that do not fit go onto indented lines below, read by
:func:`continuation_values`)::

    Epoch 0/4  ━━━━━━━━━━━━━━━╸━━━━━ 3/10 0:00:01 • 0:00:02 90.35it/s v_num: 1.000 train_loss: 3.888

The description is the bar's identity, never a metric; Lightning's ``v_num`` is never a metric.
Most lines are not bars: a line without the bar's fixed parts is refused before any regex runs.
"""
import re
from dataclasses import dataclass, field
from typing import Optional

from .lines import MAX_LINE, metric_value

_SCALE = r"[kMGTPEZY]?"
_COUNT = r"\d+(?:\.\d+)?" + _SCALE
_TQDM_TIME = r"(?:\d+:)?\d\d:\d\d"
# The right part of a tqdm frame: "4/10 [00:00<00:01, 72.39it/s, k=v, ...]" or "5it [00:01, 4.90it/s]".
# It starts where no digit or "." precedes it (one start per number, so a line of digits is one pass).
_TQDM = re.compile(
    r"(?<![\w.])(?P<n>" + _COUNT + r")(?:/(?P<total>" + _COUNT + r"|\?)|[^\W\d]*) \["
    r"(?P<elapsed>" + _TQDM_TIME + r")(?:<(?P<remaining>" + _TQDM_TIME + r"|\?))?, +"
    r"(?P<rate>\?|\d+(?:\.\d+)?" + _SCALE + r")(?P<rate_unit>[^\W\d]*)/(?P<per>[^\W\d]+)"
    r"(?P<postfix>, [^\]]*)?\]")
_RICH_TIME = r"(?:\d+ days?, )?\d+:\d\d:\d\d|-:--:--"
# Lightning's Rich columns after the description and the bar: "3/10 0:00:01 • 0:00:02 90.35it/s metrics".
_RICH = re.compile(
    r"(?<![\w.])(?P<n>\d+)/(?P<total>\d+(?:\.\d+)?|--|\?) +(?P<elapsed>" + _RICH_TIME + r") • "
    r"(?P<remaining>" + _RICH_TIME + r")(?: +(?P<rate>\d+(?:\.\d+)?)(?P<unit>it/s|s/it))?(?P<metrics> .*)?")
_RICH_BAR = "━╸╺╾╼─- "
_PERCENT = re.compile(r"\s*\d{1,3}%$")
_EPOCH = re.compile(r"\bepoch\s*(\d+)(?:\s*/\s*(\d+))?", re.IGNORECASE)
_COUNTER = re.compile(r"\d+(?:\s*/\s*\d+)?")
_PHASE = re.compile(r"\b(valid|sanity|test|predict|eval)", re.IGNORECASE)
_PHASES = {"valid": "validation", "sanity": "sanity", "test": "test", "predict": "predict", "eval": "eval"}
_MULTIPLIERS = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "Z": 1e21, "Y": 1e24}


@dataclass
class BarFrame:
    """One drawing of a progress bar."""

    desc: str  #: the description without its digits and colon ("Epoch", "Validation DataLoader"): the bar's identity
    n: int  #: the count done (with unit_scale, "1.23k" gives 1230)
    total: Optional[int]  #: None when unknown ("?", "--" or no total drawn)
    elapsed_s: Optional[float]
    remaining_s: Optional[float]  #: None when unknown ("?", "-:--:--")
    rate: Optional[float]  #: iterations per second ("1.36s/it" gives 1/1.36); None when unknown ("?", 0.00)
    values: dict = field(default_factory=dict)  #: the postfix metrics by series name; never v_num
    epoch: Optional[int] = None  #: from "Epoch 3" / "Epoch 3/10" in the description
    epochs_total: Optional[int] = None  #: the number after the slash, as printed (Lightning's Rich bar: max_epochs - 1)
    nested: bool = False  #: drawn below another bar (tqdm's position > 0: the frame moved the cursor up)
    style: str = "tqdm"  #: "tqdm" or "rich"
    phase: str = "train"  #: "validation", "sanity", "test", "predict" or "eval" when the description says so


def parse_bar(text: str, up: bool = False) -> Optional[BarFrame]:
    """The progress-bar frame drawn in ``text`` (one segment, ANSI codes removed), or None when it is no bar.

    ``up``: the raw segment moved the cursor up (a tqdm bar at position > 0; for Rich, its redraw).
    """
    if len(text) > MAX_LINE or "/" not in text:
        return None
    if "[" in text:
        match = _TQDM.search(text)
        if match is not None:
            return _tqdm_frame(text, match, up)
    if "•" in text:
        match = _RICH.search(text)
        if match is not None:
            return _rich_frame(text, match)
    return None


def continuation_values(text: str) -> Optional[dict]:
    """The ``key: value`` pairs of an indented line Rich wrapped below a bar, or None when it is not one.

    Every word must belong to a pair and every value must be a number (``{}`` when the only pair is v_num).
    """
    if not text[:1].isspace() or len(text) > MAX_LINE or ":" not in text:
        return None
    words = text.split()
    if not words or len(words) % 2:
        return None
    values = {}
    for key, value in zip(words[::2], words[1::2]):
        if len(key) < 2 or not key.endswith(":") or key.count(":") != 1:
            return None
        if key == "v_num:":
            continue
        parsed = metric_value(key[:-1], value)
        if parsed is None:
            return None
        values[parsed[0]] = parsed[1]
    return values


def _tqdm_frame(text: str, match: "re.Match[str]", up: bool) -> Optional[BarFrame]:
    n, total, elapsed, remaining, rate, rate_unit, per, postfix = match.group(
        "n", "total", "elapsed", "remaining", "rate", "rate_unit", "per", "postfix")
    left = text[:match.start()].rstrip()
    if left.endswith("|"):  # "{desc}: {percentage}%|{bar}| n/total": the bar never holds "|"
        opening = left.rfind("|", 0, len(left) - 1)
        if opening < 0:
            return None
        left = _PERCENT.sub("", left[:opening])
    speed = None if rate == "?" else _count(rate)
    if speed and per != "s" and rate_unit == "s":  # "1.36s/it"
        speed = 1.0 / speed
    return _frame(left, "tqdm", up, n=round(_count(n)), total=None if total in (None, "?") else round(_count(total)),
                  elapsed_s=_tqdm_seconds(elapsed), remaining_s=None if remaining in (None, "?") else
                  _tqdm_seconds(remaining), rate=speed or None, values=_postfix(postfix[2:] if postfix else ""))


def _rich_frame(text: str, match: "re.Match[str]") -> BarFrame:
    n, total, elapsed, remaining, rate, unit, metrics = match.group(
        "n", "total", "elapsed", "remaining", "rate", "unit", "metrics")
    speed = float(rate) if rate is not None else None
    if speed and unit == "s/it":
        speed = 1.0 / speed
    values = {}
    words = metrics.split() if metrics else []
    for i in range(len(words) - 1):
        key = words[i]
        if key.endswith(":") and len(key) > 1 and key != "v_num:":
            parsed = metric_value(key[:-1], words[i + 1])
            if parsed is not None:
                values[parsed[0]] = parsed[1]
    # Rich moves the cursor up to redraw the whole display: ``up`` says nothing about nesting there
    return _frame(text[:match.start()].rstrip(_RICH_BAR), "rich", False, n=int(n),
                  total=None if total in ("--", "?") else round(float(total)), elapsed_s=_rich_seconds(elapsed),
                  remaining_s=_rich_seconds(remaining), rate=speed or None, values=values)


def _frame(description: str, style: str, nested: bool, **parts) -> BarFrame:
    description = description.strip()
    if description.endswith(":"):
        description = description[:-1]
    epoch = epochs_total = None
    found = _EPOCH.search(description)
    if found is not None:
        epoch = int(found.group(1))
        epochs_total = int(found.group(2)) if found.group(2) else None
    desc = " ".join(_COUNTER.sub(" ", description).split()).rstrip(":").strip()
    phase = _PHASE.search(desc)
    return BarFrame(desc=desc, epoch=epoch, epochs_total=epochs_total, nested=nested, style=style,
                    phase=_PHASES[phase.group(1).lower()] if phase else "train", **parts)


def _postfix(text: str) -> dict:
    """tqdm's postfix ``k=v, k2=v2`` as numbers by series name (strings and v_num left out)."""
    values = {}
    for item in text.split(", "):
        key, sep, value = item.partition("=")
        if sep:
            parsed = metric_value(key, value)
            if parsed is not None:
                values[parsed[0]] = parsed[1]
    return values


def _count(text: str) -> float:
    """A tqdm count or rate, "1.23k" being 1230."""
    if text[-1:] in _MULTIPLIERS:
        return float(text[:-1]) * _MULTIPLIERS[text[-1]]
    return float(text)


def _tqdm_seconds(text: str) -> float:
    seconds = 0.0
    for part in text.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds


def _rich_seconds(text: str) -> Optional[float]:
    if text.startswith("-"):
        return None
    days = 0
    if "," in text:
        head, text = text.split(",", 1)
        days = int(head.split()[0])
    return days * 86400.0 + _tqdm_seconds(text.strip())
