"""``--model-size`` of ``launch`` and ``sweep``: the built-in workload's size reaches the run's config, a sweep
takes it as an axis, and a size that does not exist is refused before anything starts."""
import pytest

from ddpgui.cli import build_parser
from ddpgui.cli.options import launch_settings
from ddpgui.cli.sweeps import _spec
from ddpgui.core.analysis.settings import settings_of
from ddpgui.core.runs.config import make_config


def test_launch_gives_the_size_to_the_run_and_defaults_to_auto():
    parse = build_parser().parse_args
    assert make_config(launch_settings(parse(["launch", "local", "--workload", "transformer", "--model-size",
                                              "large"]))).model_size == "large"
    assert make_config(launch_settings(parse(["launch", "local"]))).model_size == "auto"


def test_a_sweep_compares_sizes_and_a_script_run_has_no_size_setting():
    spec = _spec(build_parser().parse_args(["sweep", "local", "--workload", "transformer", "--model-size",
                                            "small,large", "--precision", "fp32"]))
    assert spec.matrix == {"model_size": ["small", "large"]} and spec.base["precision"] == "fp32"
    assert settings_of({"workload": "transformer", "model_size": "large"})["model_size"] == "large"
    script = {"mode": "script", "model_size": "large", "script": {"dir": "/src", "entry": "train.py"}}
    assert "model_size" not in settings_of(script)  # a user's script ignores it: no setting of its run


def test_a_size_that_does_not_exist_is_refused_with_the_choices(capsys):
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(["launch", "local", "--model-size", "huge"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "--model-size" in err and "huge" in err and "large" in err


def test_a_run_stored_before_sizes_existed_is_a_repeat_of_one_at_the_default():
    from ddpgui.core.analysis.settings import setting_key

    old = {"workload": "mlp", "precision": "fp32"}  # stored before model_size and keep_outputs were config keys
    new = dict(old, model_size="auto", keep_outputs=True)  # what a launch stores now (to_dict: every field)
    assert setting_key(old) == setting_key(new)
    assert setting_key(old) != setting_key(dict(old, model_size="large"))
