"""The run config: defaults, and a refusal naming the field for every kind of bad input."""
import json

import pytest

from remote_runner.config import ConfigError, RunConfig, config_from_dict, load_config


def test_defaults_are_a_valid_short_run():
    cfg = config_from_dict({})
    assert cfg.steps == 200 and cfg.epochs is None and cfg.minutes is None
    assert cfg.mode == "train" and cfg.backend == "auto" and cfg.world_size == 1


def test_a_scripts_length_is_unknown_unless_given():
    script = {"mode": "script", "script": {"dir": "/srv/nanogpt"}}
    assert config_from_dict(script).steps is None
    assert config_from_dict(dict(script, steps=5000)).steps == 5000


def test_round_trip_through_json(tmp_path):
    cfg = config_from_dict({"workload": "transformer", "nproc_per_node": 2, "precision": "bf16", "minutes": 1.5,
                            "script": None, "env": {"A": "1"}, "tags": ["x"]})
    path = tmp_path / "config.json"
    path.write_text(cfg.to_json())
    again = load_config(str(path))
    assert again == cfg and again.minutes == 1.5 and again.steps is None


@pytest.mark.parametrize("data, field, words", [
    ({"batchsize": 4}, "batchsize", "unknown key"),
    ({"batch_size": "32"}, "batch_size", "expected an integer"),
    ({"batch_size": True}, "batch_size", "expected an integer"),
    ({"batch_size": 0}, "batch_size", "at least 1"),
    ({"lr": "fast"}, "lr", "expected a number"),
    ({"grad_checkpointing": 1}, "grad_checkpointing", "true or false"),
    ({"precision": "fp8"}, "precision", "must be one of"),
    ({"compile": "yes"}, "compile", "must be one of"),
    ({"workload": "resnet152"}, "workload", "must be one of"),
    ({"steps": 10, "minutes": 2}, "minutes", "not steps and minutes"),
    ({"tags": "a,b"}, "tags", "expected a list"),
    ({"tags": ["a", 3]}, "tags[1]", "expected a string"),
    ({"env": {"A": 1}}, "env['A']", "expected a string"),
    ({"mode": "script"}, "script", "script mode needs"),
    ({"mode": "script", "script": {"dir": "/x", "entry": "../etc/passwd"}}, "script.entry", "relative path"),
    ({"script": {"dir": "/x", "entry": "t.py", "bogus": 1}}, "script.bogus", "unknown key"),
    ({"script": {"dir": "/x", "metric_regex": "(unclosed"}}, "script.metric_regex", "regular expression"),
    ({"nnodes": 2}, "rdzv_endpoint", "rendezvous"),
    ({"schema": 99}, "schema", "schema"),
    ([1, 2], "config", "expected an object"),
])
def test_bad_config_is_refused_naming_the_field(data, field, words):
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    assert info.value.field == field
    assert words in str(info.value) and repr(field) in str(info.value)


def test_malformed_json_file_is_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"steps": 10,')
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert "not valid JSON" in str(info.value)


def test_dataclass_fields_are_the_json_keys():
    keys = set(json.loads(RunConfig().to_json()))
    assert {"nproc_per_node", "compile", "precision", "batch_size", "steps", "warmup_steps"} <= keys
