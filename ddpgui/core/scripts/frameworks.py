"""The run settings (compile, precision, batch size) in a user's script's own words.

The framework is recognised from the entry file's code (its imports and calls, read with ``ast``, never run):

- ``transformers``: a script that parses ``TrainingArguments`` with ``HfArgumentParser`` takes ``--bf16 True``,
  ``--torch_compile True``, ``--per_device_train_batch_size N``;
- ``lightning-cli``: a ``LightningCLI`` script takes ``--trainer.precision=bf16-mixed``;
- ``accelerate``: an ``Accelerator()`` reads ``ACCELERATE_MIXED_PRECISION``, ``ACCELERATE_DYNAMO_BACKEND`` and
  ``ACCELERATE_DYNAMO_MODE`` (unless the code passes its own ``mixed_precision=``/``dynamo_backend=``);
- ``nanogpt``: nanoGPT's ``configurator.py`` takes ``--dtype=bfloat16 --compile=True --batch_size=N``.

A ddpgui.toml in the folder (:mod:`.mapping`) gives the words for any other script, and wins over the
framework's for the settings it maps.  A setting with no words is refused with the reason (never ignored).
"""
from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from remote_runner.config import SCRIPT_SETTINGS

from .mapping import MAPPING_FILE, Mapping, MappingError, Words, read_mapping

FRAMEWORK_NAMES = {"transformers": "Transformers, HfArgumentParser", "lightning-cli": "Lightning, LightningCLI",
                   "accelerate": "Accelerate", "nanogpt": "nanoGPT, configurator.py"}

_HF_PRECISION = {"fp32": ("--bf16", "False", "--fp16", "False"), "bf16": ("--bf16", "True"),
                 "fp16": ("--fp16", "True"), "tf32": ("--tf32", "True")}
_LIGHTNING_PRECISION = {"fp32": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}
_ACCELERATE_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}
_NANOGPT_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


class ScriptSettingError(ValueError):
    """A setting the script cannot be given: ``setting`` names it; the message says why and what to do."""

    def __init__(self, setting: str, message: str):
        super().__init__(message)
        self.setting = setting


@dataclass
class ScriptKnobs:
    """What an entry file takes: its framework, the user's mapping, and why a setting has no words."""

    framework: str | None = None
    mapping: Mapping | None = None
    #: setting → why the framework gives it (or some of its values) no words (a mapping can still give them)
    reasons: dict[str, str] = field(default_factory=dict)
    #: the settings the framework's words cannot reach in this script (its code fixes them)
    blocked: frozenset[str] = frozenset()

    @property
    def described(self) -> str:
        name = FRAMEWORK_NAMES.get(self.framework or "", "a script ddpgui does not recognise")
        return name + (f", with the folder's {MAPPING_FILE}" if self.mapping is not None else "")

    def words(self, setting: str, value: object) -> Words:
        """The arguments and environment that give the script ``setting = value``; raises ScriptSettingError."""
        if self.mapping is not None:
            found = self.mapping.words(setting, value)
            if found is not None:
                return found
        found = _framework_words(self.framework, setting, value) if setting not in self.blocked else None
        if found is not None:
            return found
        why = self.reasons.get(setting) or (
            f"{FRAMEWORK_NAMES[self.framework]} has no word for {setting} {value}" if self.framework else
            "ddpgui does not recognise the script's framework")
        example = {"precision": 'bf16 = "--dtype=bfloat16"', "compile": 'default = "--compile=True"',
                   "batch_size": 'any = "--batch_size={}"'}[setting]
        raise ScriptSettingError(setting, f"{setting} {value} cannot be given to this script: {why}; map it once in "
                                          f"the launch form or in {MAPPING_FILE} ([settings.{setting}] {example})")

    def preview(self, setting: str, value: object) -> tuple[Words | None, str]:
        """(words, "") or (None, the reason): what the launch form shows beside the setting."""
        try:
            return self.words(setting, value), ""
        except ScriptSettingError as exc:
            return None, str(exc)


def _framework_words(framework: str | None, setting: str, value: object) -> Words | None:
    if framework == "transformers":
        if setting == "precision":
            return Words(_HF_PRECISION[value]) if value in _HF_PRECISION else None
        if setting == "compile":
            args = ("--torch_compile", "False" if value == "off" else "True")
            return Words(args + (("--torch_compile_mode", str(value)) if value not in ("off", "default") else ()))
        return Words(("--per_device_train_batch_size", str(value)))
    if framework == "lightning-cli":
        return Words((f"--trainer.precision={_LIGHTNING_PRECISION[value]}",)) \
            if setting == "precision" and value in _LIGHTNING_PRECISION else None
    if framework == "accelerate":
        if setting == "precision":
            return Words(env=(("ACCELERATE_MIXED_PRECISION", _ACCELERATE_PRECISION[value]),)) \
                if value in _ACCELERATE_PRECISION else None
        if setting == "compile":
            env = [("ACCELERATE_DYNAMO_BACKEND", "no" if value == "off" else "inductor")]
            return Words(env=tuple(env + ([("ACCELERATE_DYNAMO_MODE", str(value))]
                                          if value not in ("off", "default") else [])))
        return None
    if framework == "nanogpt":
        if setting == "precision":
            return Words((f"--dtype={_NANOGPT_DTYPE[value]}",)) if value in _NANOGPT_DTYPE else None
        if setting == "compile":
            return Words((f"--compile={value != 'off'}",)) if value in ("off", "default") else None
        return Words((f"--batch_size={value}",))
    return None


def _names(tree: ast.AST) -> tuple[set[str], set[str], list[ast.Call]]:
    """(top-level modules imported, every name and attribute used, every call) of a module."""
    modules: set[str] = set()
    names: set[str] = set()
    calls: list[ast.Call] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(a.name.split(".")[0] for a in node.names)
            names.update((a.asname or a.name).split(".")[-1] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module.split(".")[0])
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Call):
            calls.append(node)
    return modules, names, calls


def _called(call: ast.Call, name: str) -> bool:
    func = call.func
    return (isinstance(func, ast.Name) and func.id == name) or (isinstance(func, ast.Attribute) and func.attr == name)


def recognise(source: str) -> ScriptKnobs:
    """The framework of an entry file's code, why it gives a setting no words, and the settings its code fixes."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ScriptKnobs()
    modules, names, calls = _names(tree)
    if any(_called(c, "exec") and any(isinstance(n, ast.Constant) and n.value == "configurator.py"
                                      for n in ast.walk(c)) for c in calls):
        return ScriptKnobs("nanogpt", reasons={
            "precision": "nanoGPT turns tf32 on itself; its --dtype takes float32, bfloat16 or float16",
            "compile": "nanoGPT's --compile is on or off, with no mode"})
    if "LightningCLI" in names:
        return ScriptKnobs("lightning-cli", reasons={
            "precision": "Lightning's precision is 32-true, bf16-mixed or 16-mixed (no tf32)",
            "compile": "LightningCLI has no compile switch (the code calls torch.compile or not)",
            "batch_size": "the batch size is your DataModule's own argument (e.g. --data.batch_size={})"})
    if "transformers" in modules and "TrainingArguments" in names:
        if "HfArgumentParser" in names:
            return ScriptKnobs("transformers")
        why = "the script builds its TrainingArguments in its code (no HfArgumentParser reads the command line)"
        return ScriptKnobs("transformers", reasons=dict.fromkeys(SCRIPT_SETTINGS, why),
                           blocked=frozenset(SCRIPT_SETTINGS))
    if "accelerate" in modules and "Accelerator" in names:
        reasons = {"precision": "Accelerate's mixed precision is no, bf16 or fp16 (no tf32)",
                   "batch_size": "Accelerate has no batch-size setting (the script's DataLoader chooses it)"}
        blocked = set()
        for call in calls:
            if _called(call, "Accelerator"):
                given = {k.arg for k in call.keywords}
                if "mixed_precision" in given:
                    reasons["precision"] = "the script passes mixed_precision= to Accelerator() itself"
                    blocked.add("precision")
                if given & {"dynamo_backend", "dynamo_plugin"}:
                    reasons["compile"] = "the script passes its own dynamo settings to Accelerator()"
                    blocked.add("compile")
        return ScriptKnobs("accelerate", reasons=reasons, blocked=frozenset(blocked))
    return ScriptKnobs()


#: (entry path, its stamp, the mapping's stamp) → what it takes: the launch form asks at every keystroke, a sweep
#: at every cell; the files are read and parsed again only when they change.
_KNOBS: dict[tuple, ScriptKnobs] = {}


def _stamp(path: Path) -> tuple | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def script_knobs(folder: str | Path, entry: str) -> ScriptKnobs:
    """What the entry file in ``folder`` takes; raises MappingError for a ddpgui.toml that cannot be used."""
    base = Path(folder).expanduser()
    path = base / entry
    key = (str(path), _stamp(path), _stamp(base / MAPPING_FILE))
    found = _KNOBS.get(key)
    if found is None:
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            source = ""
        found = dataclasses.replace(recognise(source), mapping=read_mapping(base))
        if len(_KNOBS) >= 64:
            _KNOBS.clear()
        _KNOBS[key] = found
    return found


def given_settings(settings: dict, script: dict) -> list[str]:
    """The settings a launch gives the script: a stored run's ``applied`` ones (a rerun, a duplicate), none for a
    run stored before settings reached scripts (its config holds the defaults, which it never passed), else
    those set."""
    if script.get("applied") is not None:
        return [s for s in SCRIPT_SETTINGS if s in script["applied"]]
    if "run_id" in settings:  # a stored config (relaunch_settings empties its id)
        return []
    return [s for s in SCRIPT_SETTINGS if settings.get(s) is not None]


def with_script_settings(settings: dict) -> dict:
    """``settings`` of a script run with the given compile/precision/batch_size in the script's words
    (``script.passed_args``/``passed_env``, ``applied``, ``framework``); raises ScriptSettingError naming the
    setting, or MappingError for the folder's ddpgui.toml."""
    script = dict(settings.get("script") or {})
    given = given_settings(settings, script)
    if not script.get("dir"):
        return settings
    try:
        knobs = script_knobs(script["dir"], script.get("entry") or "train.py")
    except MappingError:
        if given:
            raise
        knobs = ScriptKnobs()  # nothing to map: a broken ddpgui.toml stops no launch that gives no setting
    args: list[str] = []
    env: dict[str, str] = {}
    for setting in given:
        words = knobs.words(setting, settings[setting])
        args += words.args
        env.update(words.env)
    script.update(framework=knobs.framework, applied=given, passed_args=args, passed_env=env)
    return dict(settings, script=script)

