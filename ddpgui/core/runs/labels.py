"""Run names told apart: the words in which several runs' names differ (a sweep's runs share its name and most
of their settings: ``… 14:22: compile=off precision=fp32 #1`` and ``… compile=default precision=fp32 #1`` are
``compile=off`` and ``compile=default`` beside each other)."""
from __future__ import annotations


def _common(rows: list[list[str]]) -> int:
    """How many leading words every row shares."""
    count = 0
    for words in zip(*rows):
        if any(w != words[0] for w in words):
            break
        count += 1
    return count


def differing_parts(names: list[str]) -> list[str]:
    """Each name without the leading and trailing words all of ``names`` share (whole words, split at spaces);
    a name that would be left empty (two runs of one name, or a name that is all shared words) stays whole."""
    if len(names) < 2:
        return list(names)
    rows = [name.split() for name in names]
    head = _common(rows)
    tails = [words[head:] for words in rows]
    tail = _common([list(reversed(words)) for words in tails])
    parts = [" ".join(words[:len(words) - tail]) for words in tails]
    return [part or name for part, name in zip(parts, names)]


__all__ = ["differing_parts"]
