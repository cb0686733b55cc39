"""A script folder's ``ddpgui.toml``: how the run settings reach a script whose framework ddpgui does not know.

::

    # ddpgui: how compile, precision and batch size reach this script
    [settings.precision]
    fp32 = "--dtype=float32"
    bf16 = "--dtype=bfloat16"

    [settings.compile]
    off = "--compile=False"
    default = "--compile=True"

    [settings.batch_size]
    any = "--batch_size={}"

A value is the arguments to pass (split as a shell would, never run by one) or a table
``{ args = "...", env = { NAME = "value" } }``; ``{}`` in a batch size's words is the number.  The launch form
writes this file when the user maps a setting there, so the mapping is remembered for the folder (and can be
committed with the code).
"""
from __future__ import annotations

import json
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from remote_runner.config import COMPILE_MODES, PRECISIONS, SCRIPT_SETTINGS, env_problem

MAPPING_FILE = "ddpgui.toml"
#: The values each setting's mapping is keyed by (a batch size maps every number with the key ``any``).
SETTING_VALUES = {"compile": COMPILE_MODES, "precision": PRECISIONS, "batch_size": ("any",)}


def join_args(args) -> str:
    """The arguments as one line that ``shlex.split`` gives back: a word is quoted only where splitting needs it
    (space, quote, backslash), so ``--batch_size={}`` and ``$HOME`` read as written (no shell ever sees them)."""
    return " ".join(a if a and not any(c.isspace() or c in "'\"\\" for c in a) else shlex.quote(a) for a in args)


class MappingError(ValueError):
    """A ddpgui.toml that cannot be used: the message names the file, and the line where TOML gives one."""


@dataclass(frozen=True)
class Words:
    """What one setting's value becomes for the script: arguments and environment variables."""

    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def with_number(self, number: int) -> Words:
        return Words(tuple(a.replace("{}", str(number)) for a in self.args),
                     tuple((k, v.replace("{}", str(number))) for k, v in self.env))

    def text(self) -> str:
        """``--dtype=bfloat16`` / ``ACCELERATE_MIXED_PRECISION=bf16``: as the launch form shows it."""
        return " ".join([join_args(self.args)] * bool(self.args) + [f"{k}={v}" for k, v in self.env]) or "(nothing)"


@dataclass
class Mapping:
    """setting → value key → Words (``mapping["precision"]["bf16"]``)."""

    settings: dict[str, dict[str, Words]] = field(default_factory=dict)

    def words(self, setting: str, value: object) -> Words | None:
        table = self.settings.get(setting) or {}
        if setting == "batch_size":
            found = table.get("any")
            return found.with_number(int(value)) if found is not None else None
        return table.get(str(value))


def read_mapping(folder: str | Path) -> Mapping | None:
    """The folder's ddpgui.toml, None when there is none; raises MappingError naming the file and the line."""
    path = Path(folder).expanduser() / MAPPING_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise MappingError(f"{path} cannot be read: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MappingError(f"{path} is not valid TOML: {exc}") from None
    return parse_mapping(data, str(path))


def parse_mapping(data: dict, where: str = MAPPING_FILE) -> Mapping:
    unknown = sorted(set(data) - {"settings"})
    if unknown:
        raise MappingError(f"{where}: unknown table {unknown[0]!r} (the mapping lives under [settings])")
    settings = data.get("settings", {})
    if not isinstance(settings, dict):
        raise MappingError(f"{where}: settings must be a table")
    out: dict[str, dict[str, Words]] = {}
    for setting, table in settings.items():
        if setting not in SCRIPT_SETTINGS:
            raise MappingError(f"{where}: [settings.{setting}] is no setting a script can be given "
                               f"({', '.join(SCRIPT_SETTINGS)})")
        if not isinstance(table, dict):
            raise MappingError(f"{where}: [settings.{setting}] must be a table of value = \"arguments\"")
        out[setting] = {}
        for value, words in table.items():
            if value not in SETTING_VALUES[setting]:
                raise MappingError(f"{where}: {setting} has no value {value!r} (one of "
                                   f"{', '.join(SETTING_VALUES[setting])})")
            out[setting][value] = _words(words, f"{where}: settings.{setting}.{value}")
    return Mapping(out)


def _words(value: object, where: str) -> Words:
    if isinstance(value, str):
        value = {"args": value}
    if not isinstance(value, dict) or set(value) - {"args", "env"}:
        raise MappingError(f"{where} must be the arguments as text, or a table with args and env")
    args = value.get("args", "")
    env = value.get("env", {})
    if not isinstance(args, str):
        raise MappingError(f"{where}: args must be text, e.g. \"--dtype=bfloat16\"")
    try:
        split = tuple(shlex.split(args))
    except ValueError as exc:
        raise MappingError(f"{where}: {args!r} cannot be split into arguments: {exc}") from None
    if not isinstance(env, dict):
        raise MappingError(f"{where}: env must be a table of NAME = \"value\"")
    for name, text in env.items():
        problem = env_problem(name, text)
        if problem:
            raise MappingError(f"{where}: {problem}")
    if not split and not env:
        raise MappingError(f"{where} gives no argument and no environment variable")
    return Words(split, tuple(env.items()))


def mapping_text(mapping: Mapping) -> str:
    """The ddpgui.toml that :func:`read_mapping` reads back as ``mapping``."""
    lines = ["# ddpgui: how compile, precision and batch size reach this script (see `ddpgui launch --help`)"]
    for setting in SCRIPT_SETTINGS:
        table = mapping.settings.get(setting)
        if not table:
            continue
        lines += ["", f"[settings.{setting}]"]
        for value, words in table.items():
            key = value if value.replace("-", "").isalnum() else json.dumps(value)
            if words.env:
                env = ", ".join(f"{k} = {_toml_str(v)}" for k, v in words.env)
                lines.append(f"{key} = {{ args = {_toml_str(join_args(words.args))}, env = {{ {env} }} }}")
            else:
                lines.append(f"{key} = {_toml_str(join_args(words.args))}")
    return "\n".join(lines) + "\n"


def _toml_str(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's; DEL, a control character to TOML, is escaped too)."""
    return json.dumps(text).replace("\x7f", "\\u007f")


def write_mapping(folder: str | Path, mapping: Mapping) -> Path:
    """Write the folder's ddpgui.toml (atomically: a temp file renamed over it)."""
    path = Path(folder).expanduser() / MAPPING_FILE
    temp = path.with_name(f".{MAPPING_FILE}.tmp")
    temp.write_text(mapping_text(mapping), encoding="utf-8")
    temp.replace(path)
    return path
