"""What to show the user for an exception: its message and, apart, its hint."""
from __future__ import annotations


class HintedError(Exception):
    """An error whose message says what happened and whose ``hint`` what to do (shown apart by :func:`describe`)."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


def describe(exc: BaseException) -> tuple[str, str]:
    """``(message, hint)``; errors whose text already ends with `` — hint`` lose that ending.

    An OSError about a file (a data folder that cannot be made, a file that cannot be read) is said in words,
    with the path, instead of Python's ``[Errno N] ...``.
    """
    hint = getattr(exc, "hint", "") or ""
    if isinstance(exc, OSError) and not hint and exc.filename is not None:
        what = exc.strerror or type(exc).__name__
        return (f"cannot use {exc.filename}: {what[:1].lower() + what[1:]}",
                "check that the path exists and that you may read and write there; the data and settings folders "
                "can be moved with DDPGUI_DATA_DIR and DDPGUI_CONFIG_DIR")
    text = str(exc)
    if hint:
        text = text.removesuffix(f" — {hint}")
    return text, hint
