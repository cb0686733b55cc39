"""Error texts as the windows show them (Qt-free): no exception class names, no ``got ''`` for an empty field;
plain text put into rich text."""
from __future__ import annotations

import html
import re

#: ``HostUnreachable: ``, ``ddpgui.core.x.TargetError: ``: a class name, not words for the user.
_CLASS_PREFIX = re.compile(r"^(?:[A-Za-z_][\w]*\.)*(?:[A-Z][a-z0-9]+){2,}(?:Error|Exception)?:\s+"
                           r"|^(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception):\s+")
_EMPTY = re.compile(r""",? got (?:''|""|None)$""")


def without_class_name(text: str) -> str:
    """``HostUnreachable: cannot connect …`` → ``cannot connect …`` (any number of such prefixes)."""
    while True:
        stripped = _CLASS_PREFIX.sub("", text, count=1)
        if stripped == text:
            return text
        text = stripped


def required_or(label: str, message: str) -> str:
    """A validation message for the field called ``label``: "``label`` is required (the rule)" when what it
    refused was empty, else the message itself."""
    message = without_class_name(message)
    field, sep, rest = message.partition(": ")
    rest = rest if sep and " " not in field else message
    if rest.endswith(" is empty"):  # core.names' words for an empty name ("the host name is empty")
        return f"{label} is required"
    if _EMPTY.search(rest):
        rule = _EMPTY.sub("", rest).removeprefix("must be ").strip()
        return f"{label} is required" + (f" ({rule})" if rule else "")
    return message


def as_rich(text: str) -> str:
    """Plain text as it reads in a rich-text label or tooltip (``<``, ``>`` and ``&`` escaped, quotes kept)."""
    return html.escape(text, quote=False)
