"""A user's script given the run's compile, precision and batch size in its own framework's words (issue 22):
recognition from the entry file's code, the words, the folder's ddpgui.toml, the sweep's argument and
environment axes, what the script reports it ran with, and the comparison's groups of script runs."""
import argparse
from pathlib import Path

import pytest
from helpers.script_folders import FRAMEWORKS, GPTLIKE, script_folder

from ddpgui.cli import parse_command
from ddpgui.cli import sweeps as sweep_cli
from ddpgui.cli.options import arg_pair
from ddpgui.core.analysis.settings import setting_key, setting_labels, settings_of
from ddpgui.core.runs.config import make_config, relaunch_settings, settings_text
from ddpgui.core.runs.reported import Reported, script_settings_lines, settings_warnings
from ddpgui.core.scripts import (
    Mapping,
    MappingError,
    Words,
    mapping_text,
    read_mapping,
    recognise,
    script_knobs,
    write_mapping,
)
from ddpgui.core.sweeps.plan import SweepError, SweepSpec, plan_sweep, split_values
from remote_runner.config import ConfigError
from remote_runner.scriptread.reports import SettingsReports

SCRIPTLOGS = Path(__file__).resolve().parents[1] / "fixtures" / "scriptlogs"
NANOGPT_CONFIGURATOR = "batch_size = 12\ndtype = 'bfloat16'\nexec(open('configurator.py').read())\n"


def script_settings(path, **settings) -> dict:
    return {"mode": "script", "script": {"dir": str(path), "entry": "train.py"}, **settings}


def test_each_framework_is_recognised_from_its_entry_files_code():
    hf = recognise((FRAMEWORKS / "hf_args" / "train.py").read_text())
    assert hf.framework == "transformers" and not hf.blocked
    accelerate = recognise((FRAMEWORKS / "accelerate_state" / "train.py").read_text())
    assert accelerate.framework == "accelerate" and not accelerate.blocked
    assert recognise(NANOGPT_CONFIGURATOR).framework == "nanogpt"
    assert recognise("from lightning.pytorch.cli import LightningCLI\nLightningCLI(Model, Data)\n").framework == \
        "lightning-cli"
    # A Trainer whose TrainingArguments are written in its code takes no argument: every setting says why
    fixed = recognise((FRAMEWORKS / "hf_trainer" / "train.py").read_text())
    assert fixed.framework == "transformers" and fixed.blocked == {"compile", "precision", "batch_size"}
    assert "no HfArgumentParser" in fixed.reasons["precision"]
    assert recognise((GPTLIKE / "train.py").read_text()).framework is None  # its configurator is inlined: yours
    assert recognise("def (:\n").framework is None  # a file that does not parse is no framework, and no crash


@pytest.mark.parametrize("source, settings, args, env", [
    ((FRAMEWORKS / "hf_args" / "train.py"), {"precision": "bf16", "compile": "max-autotune", "batch_size": 4},
     ["--torch_compile", "True", "--torch_compile_mode", "max-autotune", "--bf16", "True",
      "--per_device_train_batch_size", "4"], {}),
    ((FRAMEWORKS / "hf_args" / "train.py"), {"precision": "fp32", "compile": "off"},
     ["--torch_compile", "False", "--bf16", "False", "--fp16", "False"], {}),
    ((FRAMEWORKS / "accelerate_state" / "train.py"), {"precision": "bf16", "compile": "default"}, [],
     {"ACCELERATE_DYNAMO_BACKEND": "inductor", "ACCELERATE_MIXED_PRECISION": "bf16"}),
    ((FRAMEWORKS / "accelerate_state" / "train.py"), {"precision": "fp32", "compile": "reduce-overhead"}, [],
     {"ACCELERATE_DYNAMO_BACKEND": "inductor", "ACCELERATE_DYNAMO_MODE": "reduce-overhead",
      "ACCELERATE_MIXED_PRECISION": "no"}),
    (NANOGPT_CONFIGURATOR, {"precision": "fp16", "compile": "default", "batch_size": 8},
     ["--compile=True", "--dtype=float16", "--batch_size=8"], {}),
    ("from lightning.pytorch.cli import LightningCLI\n", {"precision": "bf16"},
     ["--trainer.precision=bf16-mixed"], {}),
])
def test_settings_become_the_frameworks_own_arguments_and_environment(tmp_path, source, settings, args, env):
    path = script_folder(tmp_path, source.parent if isinstance(source, Path) else source)
    cfg = make_config(script_settings(path, **settings))
    assert cfg.script.passed_args == args and cfg.script.passed_env == env
    assert cfg.script.applied == [s for s in ("compile", "precision", "batch_size") if s in settings]
    assert cfg.script.argv() == args  # no fixed argument: exactly the settings' words
    for setting, value in settings.items():
        assert getattr(cfg, setting) == value


def test_a_setting_the_script_cannot_take_is_refused_naming_it_and_saying_how_to_map_it(tmp_path):
    accelerate = script_folder(tmp_path, FRAMEWORKS / "accelerate_state")
    with pytest.raises(ConfigError) as caught:
        make_config(script_settings(accelerate, batch_size=16))
    assert caught.value.field == "batch_size" and "DataLoader" in str(caught.value)
    assert "ddpgui.toml" in str(caught.value) and "[settings.batch_size]" in str(caught.value)
    fixed = script_folder(tmp_path, "from accelerate import Accelerator\nAccelerator(mixed_precision='fp16')\n", "fixed")
    with pytest.raises(ConfigError) as caught:
        make_config(script_settings(fixed, precision="bf16"))
    assert caught.value.field == "precision" and "passes mixed_precision= to Accelerator() itself" in str(caught.value)
    plain = script_folder(tmp_path, GPTLIKE, "plain")
    with pytest.raises(ConfigError) as caught:
        make_config(script_settings(plain, precision="bf16"))
    assert "does not recognise the script's framework" in str(caught.value)
    # A script given no setting starts as before, whatever it is
    cfg = make_config(script_settings(plain))
    assert cfg.script.applied == [] and cfg.script.argv() == [] and cfg.name == "train.py 1x"


def test_the_folders_mapping_gives_the_words_and_wins_over_the_frameworks(tmp_path):
    plain = script_folder(tmp_path, GPTLIKE)
    (plain / "ddpgui.toml").write_text('[settings.precision]\nfp32 = "--dtype=float32"\nbf16 = "--dtype=bfloat16"\n'
                                       '[settings.compile]\noff = "--compile=False"\ndefault = "--compile=True"\n'
                                       '[settings.batch_size]\nany = { args = "--batch_size={}", env = { BS = "{}" } }\n')
    cfg = make_config(script_settings(plain, precision="bf16", compile="off", batch_size=6))
    assert cfg.script.passed_args == ["--compile=False", "--dtype=bfloat16", "--batch_size=6"]
    assert cfg.script.passed_env == {"BS": "6"} and cfg.script.framework is None
    assert cfg.name == "train.py 1x compile=off bf16 batch=6"
    hf = script_folder(tmp_path, FRAMEWORKS / "hf_args", "hf")
    (hf / "ddpgui.toml").write_text('[settings.precision]\nbf16 = "--bf16 True --tf32 False"\n')
    assert make_config(script_settings(hf, precision="bf16", compile="off")).script.passed_args == \
        ["--torch_compile", "False", "--bf16", "True", "--tf32", "False"]


@pytest.mark.parametrize("text, where", [
    ('[settings.precision]\nbf16 = \n', "line 2"),
    ('[settings.precision]\nbf17 = "--x"\n', "no value 'bf17'"),
    ('[settings.lr]\nany = "--lr={}"\n', "[settings.lr] is no setting"),
    ('[runs]\n', "unknown table 'runs'"),
    ('[settings.precision]\nbf16 = "--dtype=\'bf16"\n', "cannot be split"),
    ('[settings.precision]\nbf16 = { env = { "1X" = "y" } }\n', "not an environment variable name"),
    ('[settings.precision]\nbf16 = ""\n', "gives no argument"),
])
def test_a_mapping_file_that_cannot_be_used_is_named_with_its_line_or_key(tmp_path, text, where):
    plain = script_folder(tmp_path, GPTLIKE)
    (plain / "ddpgui.toml").write_text(text)
    with pytest.raises(MappingError) as caught:
        read_mapping(plain)
    assert where in str(caught.value) and str(plain / "ddpgui.toml") in str(caught.value)
    with pytest.raises(ConfigError) as refused:
        make_config(script_settings(plain, precision="bf16"))
    assert refused.value.field == "script.mapping"
    assert make_config(script_settings(plain)).script.applied == []  # a launch that maps nothing still starts


def test_a_mapping_written_by_the_form_reads_back_the_same_with_hostile_text(tmp_path):
    plain = script_folder(tmp_path, GPTLIKE)
    mapping = Mapping({"precision": {"bf16": Words(("--dtype=bfloat16", "--note=a \"quoted\" $HOME; rm -rf /",
                                                    "é\x7f\t")),
                                     "fp32": Words((), (("MY_DTYPE", "fp32 \\ 'x'"),))},
                       "batch_size": {"any": Words(("--bs", "{}"))}})
    write_mapping(plain, mapping)
    assert read_mapping(plain) == mapping
    assert "[settings.precision]" in mapping_text(mapping)
    cfg = make_config(script_settings(plain, precision="bf16", batch_size=3))
    assert cfg.script.passed_args == ["--dtype=bfloat16", "--note=a \"quoted\" $HOME; rm -rf /", "é\x7f\t", "--bs", "3"]


def test_a_rerun_gives_the_script_what_the_run_was_given_and_nothing_else(tmp_path):
    hf = script_folder(tmp_path, FRAMEWORKS / "hf_args")
    first = make_config(script_settings(hf, precision="bf16"))
    again = make_config(relaunch_settings(first.to_dict()))
    assert again.script.applied == ["precision"] and again.script.passed_args == ["--bf16", "True"]
    assert again.run_id != first.run_id
    plain = make_config(script_settings(hf))
    assert make_config(relaunch_settings(plain.to_dict())).script.passed_args == []  # its default fp32 is not given
    old = first.to_dict()
    del old["script"]["applied"]  # stored before settings reached scripts: its config's precision was never passed
    assert make_config(relaunch_settings(old)).script.passed_args == []


def _spec(argv):
    return sweep_cli._spec(parse_command(["sweep", "local", *argv]))


def test_a_sweep_takes_arguments_and_environment_variables_as_axes(tmp_path):
    hf = script_folder(tmp_path, FRAMEWORKS / "hf_args")
    spec = _spec(["--script", str(hf), "--nproc", "2", "--precision", "fp32,bf16", "--arg", "--learning_rate=1e-4,3e-4",
                  "--arg", "--run_name=a;$(reboot)", "--env", "OMP_NUM_THREADS=1,4", "--env", "KEEP=0\\,1",
                  "--repeats", "2", "--", "--output_dir", "out"])
    assert spec.matrix == {"precision": ["fp32", "bf16"], "arg:--learning_rate": ["1e-4", "3e-4"],
                           "env:OMP_NUM_THREADS": ["1", "4"]}
    sweep, cells = plan_sweep(spec)
    assert len(cells) == 16 and "your script chooses its own seeds" in sweep.seeds
    assert cells[3].label == "precision=fp32 --learning_rate=3e-4 OMP_NUM_THREADS=4 #1"
    cfg = make_config(cells[3].settings)
    # The shell's characters are data: one argument, as given
    assert cfg.script.argv() == ["--output_dir", "out", "--run_name=a;$(reboot)", "--learning_rate=3e-4",
                                 "--bf16", "False", "--fp16", "False"]
    assert cfg.env == {"KEEP": "0,1", "OMP_NUM_THREADS": "4"} and cfg.nproc_per_node == 2
    # One value is no axis: it is given to every cell
    one = _spec(["--script", str(hf), "--arg", "--learning_rate=1e-4", "--precision", "fp32,bf16"])
    assert list(one.matrix) == ["precision"] and one.base["script"]["options"] == {"--learning_rate": "1e-4"}


def test_a_sweep_with_a_setting_a_cell_cannot_give_is_refused_before_anything_starts(tmp_path):
    accelerate = script_folder(tmp_path, FRAMEWORKS / "accelerate_state")
    with pytest.raises(SweepError) as caught:
        plan_sweep(_spec(["--script", str(accelerate), "--precision", "fp32,tf32"]))
    assert caught.value.axis == "precision" and "precision = tf32 is refused" in str(caught.value)
    with pytest.raises(SweepError) as caught:
        plan_sweep(_spec(["--script", str(accelerate), "--precision", "fp32,bf16", "--batch-size", "8"]))
    assert "batch_size" in str(caught.value) and "DataLoader" in str(caught.value)
    with pytest.raises(SweepError) as caught:
        plan_sweep(SweepSpec(hosts=["local"], base={"workload": "mlp"}, matrix={"arg:--lr": ["1", "2"]}))
    assert "this sweep runs no script" in str(caught.value)
    with pytest.raises(SweepError) as caught:
        plan_sweep(SweepSpec(hosts=["local"], base={"workload": "mlp"}, matrix={"env:1BAD": ["1", "2"]}))
    assert "not an environment variable name" in str(caught.value)
    with pytest.raises(SweepError):
        plan_sweep(SweepSpec(hosts=["local"], base=script_settings(accelerate), matrix={"arg:lr": ["1", "2"]}))
    with pytest.raises(SystemExit):  # the CLI refuses --arg without a name of an option before it plans
        parse_command(["sweep", "local", "--arg", "lr=1,2"])


def test_script_runs_group_and_are_labelled_by_what_they_were_given(tmp_path):
    hf = script_folder(tmp_path, FRAMEWORKS / "hf_args")
    configs = [make_config(dict(script_settings(hf, precision=p, env={"OMP_NUM_THREADS": t}),
                                script={"dir": str(hf), "entry": "train.py", "args": ["--output_dir", "out"],
                                        "options": {"--learning_rate": lr}})).to_dict()
               for p in ("fp32", "bf16") for lr in ("1e-4",) for t in ("1", "4")]
    repeat = make_config(dict(relaunch_settings(configs[0]), seed=3)).to_dict()
    assert setting_key(repeat, ["local"]) == setting_key(configs[0], ["local"])  # a repeat
    assert len({setting_key(c, ["local"]) for c in configs}) == 4
    shown = settings_of(configs[0], ["local"])
    assert shown["entry"] == "train.py" and shown["--learning_rate"] == "1e-4" and shown["OMP_NUM_THREADS"] == "1"
    assert "workload" not in shown and "compile" not in shown and "lr" not in shown  # not given to the script
    assert setting_labels([settings_of(c, ["local"]) for c in configs]) == [
        "fp32 OMP_NUM_THREADS=1", "fp32 OMP_NUM_THREADS=4", "bf16 OMP_NUM_THREADS=1", "bf16 OMP_NUM_THREADS=4"]
    assert settings_text(configs[2]) == "script train.py ×1 bf16 (args --output_dir out --learning_rate=1e-4)"


def test_a_script_that_reports_other_settings_than_it_was_given_is_warned_about(tmp_path):
    hf = script_folder(tmp_path, FRAMEWORKS / "hf_args")
    config = make_config(script_settings(hf, precision="bf16", compile="default")).to_dict()
    reports = {"precision": Reported("precision", "fp32", "TrainingArguments bf16=False, fp16=False"),
               "compile": Reported("compile", "on", "TrainingArguments torch_compile=True")}
    assert settings_warnings(config, reports) == [
        "asked precision bf16, the script reports fp32 (\u201cTrainingArguments bf16=False, fp16=False\u201d)"]
    lines = dict(script_settings_lines(config, reports))
    assert lines["passed"] == ("compile default, precision bf16 → --torch_compile True --bf16 True "
                               "(Transformers, HfArgumentParser)")
    assert settings_warnings(config, {"precision": Reported("precision", "bf16", "x")}) == []
    # The processes the run started against the world size the script reports (Lightning's "Starting with")
    two = dict(config, nproc_per_node=2, nnodes=1)
    line = "All distributed processes registered. Starting with 1 processes"
    assert settings_warnings(two, {"world_size": Reported("world_size", 1, line)}) == [
        f"asked 2 processes, the script reports 1 (\u201c{line}\u201d)"]
    assert settings_warnings(dict(two, nnodes=2), {"world_size": Reported("world_size", 4, "x")}) == []
    said = {"batch_size": Reported("batch_size", 8, "x"), "world_size": Reported("world_size", 2, "x"),
            "backend": Reported("backend", "gloo", "x")}
    assert dict(script_settings_lines(two, said))["reported"] == "batch size 8; 2 processes; backend gloo"


def _reports(chunks):
    events = []
    reader = SettingsReports(lambda event, **fields: events.append((fields["setting"], fields["value"])))
    for stream, data in chunks:
        reader.feed(stream, data)
    return events


def test_what_the_real_frameworks_print_at_start_up_is_read_as_their_settings():
    from transformers import TrainingArguments

    printed = str(TrainingArguments(output_dir="out", bf16=True, use_cpu=True, per_device_train_batch_size=4,
                                    torch_compile=False, report_to="none"))
    data = f"03/02/2026 10:00:00 - INFO - __main__ - Training/evaluation parameters {printed}\n".encode()
    # Cut into pieces where a pipe may cut it: a line split between two reads is read whole
    assert sorted(_reports([("stdout", data[i:i + 333]) for i in range(0, len(data), 333)])) == [
        ("batch_size", 4), ("compile", "off"), ("precision", "bf16")]
    assert _reports([("stderr", b"\x1b[1mUsing bfloat16 Automatic Mixed Precision (AMP)\x1b[0m\r\n")]) == \
        [("precision", "bf16")]
    assert _reports([("stdout", b"Distributed environment: MULTI_CPU\nMixed precision type: no\n\n")]) == \
        [("precision", "fp32")]
    assert _reports([("stdout", b"Overriding: dtype = bfloat16\nOverriding: compile = True\n")]) == \
        [("precision", "bf16"), ("compile", "on")]
    # Lightning's DDP strategy at start-up (a real capture: tests/fixtures/scriptlogs), and Accelerate's state
    lightning = (SCRIPTLOGS / "lightning_tqdm.stderr").read_bytes()
    assert _reports([("stderr", lightning[i:i + 50]) for i in range(0, len(lightning), 50)])[:2] == [
        ("backend", "gloo"), ("world_size", 2)]
    assert _reports([("stdout", b"Distributed environment: MULTI_CPU  Backend: gloo\nNum processes: 2\n")]) == [
        ("backend", "gloo"), ("world_size", 2)]
    assert _reports([("stdout", b"Starting with 3 epochs and 2 processes\n")]) == []  # not the strategy's line
    # A chatty script's later output is not scanned: only the start-up's first megabytes
    assert _reports([("stdout", b"x" * (5 << 20)), ("stdout", b"\nMixed precision type: bf16\n")]) == []


def test_the_launch_form_preview_says_what_is_passed_or_why_not(tmp_path):
    knobs = script_knobs(script_folder(tmp_path, FRAMEWORKS / "hf_args"), "train.py")
    words, why = knobs.preview("precision", "bf16")
    assert words.text() == "--bf16 True" and why == ""
    accelerate = script_knobs(script_folder(tmp_path, FRAMEWORKS / "accelerate_state", "acc"), "train.py")
    assert accelerate.preview("precision", "bf16")[0].text() == "ACCELERATE_MIXED_PRECISION=bf16"
    words, why = accelerate.preview("batch_size", 8)
    assert words is None and "DataLoader" in why
    assert accelerate.described == "Accelerate"


def test_arg_pairs_need_an_option_name():
    assert arg_pair("--lr=3e-4") == ("--lr", "3e-4") and arg_pair("-x=") == ("-x", "")
    for bad in ("lr=1", "--lr", "-- =1", "--a b=1"):
        with pytest.raises(argparse.ArgumentTypeError):
            arg_pair(bad)
    assert split_values("a,b\\,c,d\\") == ["a", "b,c", "d\\"]
