"""What to show the user for an exception: its message and, apart, its hint."""
from __future__ import annotations


def describe(exc: BaseException) -> tuple[str, str]:
    """``(message, hint)``; errors whose text already ends with `` — hint`` lose that ending."""
    hint = getattr(exc, "hint", "") or ""
    text = str(exc)
    if hint:
        text = text.removesuffix(f" — {hint}")
    return text, hint
