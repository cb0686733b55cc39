"""A user's own script: the run settings in its framework's words or the user's mapping (ddpgui.toml)."""
from .frameworks import (
    FRAMEWORK_NAMES,
    ScriptKnobs,
    ScriptSettingError,
    given_settings,
    recognise,
    script_knobs,
    with_script_settings,
)
from .mapping import MAPPING_FILE, Mapping, MappingError, Words, mapping_text, read_mapping, write_mapping

__all__ = ["FRAMEWORK_NAMES", "MAPPING_FILE", "Mapping", "MappingError", "ScriptKnobs", "ScriptSettingError", "Words",
           "given_settings", "mapping_text", "read_mapping", "recognise", "script_knobs", "with_script_settings",
           "write_mapping"]
