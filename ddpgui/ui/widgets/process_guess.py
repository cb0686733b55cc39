"""The launch form's process count while a host is not probed: a guess, and shown as one.

Before a host's probe the form cannot know how many GPUs or CPU processes it has; the count it offers then is
a guess: "2?" in the box, the words beside it greyed and saying so, a tooltip on how to know.  Once every node is
probed the count is shown plainly.
"""
from __future__ import annotations

from PySide6.QtWidgets import QLabel, QSpinBox

from .launch_tips import TIPS

#: The words beside a guessed count: greyed, italic (the value is not a fact).
GUESS_STYLE = "color: #5f6368; font-style: italic;"


def guess_tip(unprobed: list[str]) -> str:
    """The tooltip of a guessed count: which hosts are not probed and how to know."""
    who = ", ".join(unprobed)
    return (f"A guess: {who} {'is' if len(unprobed) == 1 else 'are'} not probed yet, so how many GPUs or CPU "
            "processes it can run is unknown. Test connection (in the hosts panel, F5) finds out.")


def process_limit(limit: int, what: str, nodes: int, unprobed: list[str]) -> tuple[str, str]:
    """The words beside the count (``of 8 GPUs``; per node, on the smallest node, for several nodes) and, when a
    node is not probed (``unprobed``: their names), the guess's tooltip ("" when the count is a fact)."""
    if not unprobed:
        return (f"of {limit} {what}" if nodes == 1 else f"per node, of {limit} {what} on the smallest node"), ""
    if nodes == 1:
        return f"of {limit}? (a guess: not probed)", guess_tip(unprobed)
    return f"of {limit}? per node ({len(unprobed)} not probed)", guess_tip(unprobed)


def show_processes(spin: QSpinBox, label: QLabel, text: str, guess: str = "") -> None:
    """``text`` beside the count; ``guess`` (its tooltip): the count is a guess, "2?" in the box and the words
    greyed; "" shows it as a fact."""
    spin.setSuffix("?" if guess else "")
    spin.setToolTip(guess or TIPS["nproc"])
    label.setStyleSheet(GUESS_STYLE if guess else "")
    label.setText(text)
