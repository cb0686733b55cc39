"""The one check of names a user types: host names and login names (of a profile, or of a jump host), run names,
sweep names and tags.

:func:`name_problem` says in words what is wrong with a name, or None; each caller wraps the words in its own
error (a HostError, a SweepError, an argparse error) with the field it concerns::

    problem = name_problem(hostname, refused=HOSTNAME_REFUSED, option_like=False)
    # '-oProxyCommand=x' → "starts with '-' (it would be read as an option)"
"""
from __future__ import annotations

#: The longest name, tag or host name accepted (a longer one is a paste gone wrong, not a name).
MAX_NAME_CHARS = 200
#: What a host name or address cannot hold (besides control characters): spaces and what a shell or an SSH
#: destination would read as something else.
HOSTNAME_REFUSED = " \t\n\r@/\\'\"`$;&|<>()"
#: What a login name cannot hold (besides control characters).
USER_REFUSED = " \t\n\r@:/'\"`$;&|<>()"
_WORDS = {" ": "spaces", "\t": "tabs", "\n": "line breaks", "\r": "carriage returns"}


def name_problem(text: object, refused: str = "", option_like: bool = True, empty_ok: bool = True,
                 max_chars: int = MAX_NAME_CHARS) -> str | None:
    """Why ``text`` cannot be a name, in words that complete "<the name> ..." (None when it can).

    ``refused``: characters it may not hold (with ``refused``, control characters are refused too);
    ``option_like``: whether it may start with '-' (a host or login name may not: a program given it as an
    argument would read an option); ``empty_ok``: whether it may be empty.
    """
    if not isinstance(text, str):
        return f"must be text, not {type(text).__name__}"
    if not text:
        return None if empty_ok else "is empty"
    if len(text) > max_chars:
        return f"is {len(text)} characters long (at most {max_chars})"
    if not option_like and text.startswith("-"):
        return "starts with '-' (it would be read as an option)"
    if refused:
        found = list(dict.fromkeys(c for c in text if c in refused or ord(c) < 0x20 or ord(c) == 0x7f))
        if found:
            return f"has {_listed([_WORDS.get(c) or repr(c) for c in found])} in it"
    return None


def _listed(words: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def run_label_problem(name: str, tags: list[str]) -> tuple[str, str] | None:
    """(the refusal, its field: "name" or "tags") for a run's name or first bad tag, as the CLI's --name and
    --tag refuse them; None when both are fine."""
    problem = name_problem(name)
    if problem:
        return f"the name {problem}", "name"
    for tag in tags:
        problem = name_problem(tag)
        if problem:
            return f"the tag {problem}", "tags"
    return None
