"""The error of a host profile that cannot be saved or used, and how messages about the hosts file quote values."""
from __future__ import annotations

import json


class HostError(ValueError):
    """A profile that cannot be saved or used; ``field`` names the offending field (``slurm.<name>`` inside the
    Slurm options of a cluster profile)."""

    def __init__(self, field_name: str, message: str, hint: str = ""):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.hint = hint


def shown(value: object) -> str:
    """A value as a message about the hosts file quotes it: as JSON, cut at 60 characters."""
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, (int, float, str, list, dict, type(None))) \
        else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
