"""Inputs the CLI refuses, in words that fit, and messages that tell the truth (issue 23, items 8 and 9): a jump
host or host name that starts with '-', a host name with ';', names and tags over 200 characters, an empty
``--out``, a full output disk (a real tmpfs), a hosts.json that is a symbolic link, the progress line's rate, and
``show`` of a run that never started.  The real CLI in-process, on its own data and config folders."""
import json

import pytest
from helpers.small_disk import small_tmpfs
from helpers.stored_runs import constant_run, store_run

from ddpgui.cli import main
from ddpgui.core.runs.launches import STAGE_CONNECTING, launcher
from ddpgui.core.runs.live import LiveRun, format_rate, progress_line, stats_line
from ddpgui.core.store import RunStore

BASE = {"workload": "mlp", "nproc_per_node": 1, "compile": "off", "precision": "fp32", "batch_size": 32,
        "steps": 6000}
LONG = "x" * 201


@pytest.fixture
def ddpgui(tmp_path, monkeypatch, capsys):
    """``ddpgui ARGS`` in this process on private folders (the working folder is an empty one): (code, out, err)."""
    monkeypatch.setenv("DDPGUI_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DDPGUI_CONFIG_DIR", str(tmp_path / "config"))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")

    def run(*argv):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse refused a value
            code = exc.code
        out, err = capsys.readouterr()
        return code, out, err
    return run


def _host_names(ddpgui):
    code, out, _ = ddpgui("hosts", "list", "--json")
    assert code == 0
    return {h["name"] for h in json.loads(out)}


@pytest.mark.parametrize("option, value, said", [
    ("--jump", "-oProxyCommand=x", "the jump host \"-oProxyCommand=x\" starts with '-'"),
    ("--jump", "-oProxyCommand=x@gpu.example", "its login name \"-oProxyCommand=x\" starts with '-'"),
    ("--jump", "me@-gpu.example:22", "its host name \"-gpu.example\" starts with '-'"),
    ("--host", "-oProxyCommand=x", "the host name \"-oProxyCommand=x\" starts with '-'"),
])
def test_a_jump_host_starting_with_a_dash_is_refused_as_a_host_is(ddpgui, option, value, said):
    args = ["hosts", "add", "box", f"{option}={value}"] + (["--host", "gpu.example"] if option != "--host" else [])
    code, _, err = ddpgui(*args)
    assert code == 2 and said in err and "(it would be read as an option)" in err, err
    assert "Traceback" not in err and _host_names(ddpgui) == {"local"}


def test_a_host_name_with_a_semicolon_is_refused_in_words_that_fit(ddpgui):
    code, _, err = ddpgui("hosts", "add", "box", "--host", "gpu;reboot")
    assert code == 2 and "hostname: the host name \"gpu;reboot\" has ';' in it" in err, err
    assert "spaces" not in err  # there are none
    code, _, err = ddpgui("hosts", "add", "box", "--host", "gpu box;x")
    assert code == 2 and "has spaces and ';' in it" in err, err
    code, _, err = ddpgui("hosts", "add", "box", "--host", "gpu.example", "--user", "me;you")
    assert code == 2 and "user: the login name \"me;you\" has ';' in it" in err and "spaces" not in err, err
    assert _host_names(ddpgui) == {"local"}


@pytest.mark.parametrize("args, said", [
    (["launch", "nowhere", "--name", LONG], "argument --name: the name is 201 characters long (at most 200)"),
    (["launch", "nowhere", "--tag", LONG], "argument --tag: the tag is 201 characters long (at most 200)"),
    (["launch", "nowhere", "--tag", ""], "argument --tag: the tag is empty"),
    (["sweep", "nowhere", "--precision", "fp32,bf16", "--tag", LONG], "the tag is 201 characters long"),
    (["sweep", "nowhere", "--precision", "fp32,bf16", "--name", LONG],
     "ddpgui: the sweep's name is 201 characters long (at most 200)"),
    (["hosts", "add", "box", "--host", "h" * 201], "the host name \"hhh"),
])
def test_names_and_tags_over_200_characters_are_refused(ddpgui, tmp_path, args, said):
    code, _, err = ddpgui(*args)
    assert code == 2 and said in err and "Traceback" not in err, err
    if args[0] == "hosts":
        assert "is 201 characters long (at most 200)" in err
    assert not (tmp_path / "data" / "runs.sqlite3").exists() or not RunStore().list_runs()
    assert _host_names(ddpgui) == {"local"}


def test_200_characters_are_fine():
    from ddpgui.core.names import HOSTNAME_REFUSED, name_problem

    assert name_problem("x" * 200) is None and name_problem("x" * 200, HOSTNAME_REFUSED, option_like=False) is None


@pytest.fixture
def stored(ddpgui):
    with RunStore() as store:
        constant_run(store, "run-a", 100.0, BASE, steps=6000)
        constant_run(store, "run-b", 200.0, dict(BASE, precision="bf16"), steps=6000)
    return ["run-a", "run-b"]


@pytest.mark.parametrize("command", [["export"], ["export", "--format", "tensorboard"], ["compare"]])
def test_an_empty_out_is_refused(ddpgui, stored, tmp_path, command):
    code, _, err = ddpgui(*command, *stored, "--out", "")
    assert code == 2 and "ddpgui: --out is empty: it names the folder the files are written to" in err, err
    assert "hint: give a folder, e.g. --out results" in err
    assert list((tmp_path / "cwd").iterdir()) == []  # nothing written where the command ran


@pytest.mark.parametrize("command, first_file", [
    (["export"], "points.csv"),
    (["export", "--format", "tensorboard"], "run-a-run-a/events.out.tfevents."),
    (["compare", "--format", "json"], "runs.json"),
])
def test_a_full_output_disk_names_the_file_and_removes_the_partial_one(ddpgui, stored, tmp_path, command,
                                                                        first_file):
    with small_tmpfs(tmp_path / "small disk", size="256k") as disk:
        out = disk / "out"
        code, _, err = ddpgui(*command, *stored, "--out", str(out))
        assert code == 1, err
        assert f"ddpgui: {out}/{first_file}" in err and "was not written: no space left on the disk; the partial " \
               "file was removed, which leaves" in err and f"free in {out}" in err, err
        assert "hint: free some space on that disk, or write the export to another folder" in err
        assert "DDPGUI_DATA_DIR" not in err and "Traceback" not in err
        left = [p for p in out.rglob("*") if p.is_file()]
        assert left == [], left  # no partial file, visible or hidden


def test_an_out_that_cannot_be_a_folder_says_so_without_the_data_folder_hint(ddpgui, stored, tmp_path):
    (tmp_path / "a file").write_text("mine\n")
    code, _, err = ddpgui("export", *stored, "--out", str(tmp_path / "a file" / "out"))
    assert code == 1 and f"ddpgui: cannot make the output folder {tmp_path / 'a file' / 'out'}: not a directory" in err
    assert "hint: choose a folder you may write to" in err and "DDPGUI_DATA_DIR" not in err, err
    assert (tmp_path / "a file").read_text() == "mine\n"


def test_a_hosts_file_that_is_a_symbolic_link_is_written_through(ddpgui, tmp_path):
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "hosts.json").write_text(json.dumps({"schema": 1, "hosts": [{"name": "old", "hostname": "old.lab"}]}))
    (tmp_path / "config").mkdir()
    link = tmp_path / "config" / "hosts.json"
    link.symlink_to(dotfiles / "hosts.json")
    code, _, err = ddpgui("hosts", "add", "new", "--host", "new.lab")
    assert code == 0, err
    assert link.is_symlink() and link.resolve() == dotfiles / "hosts.json"  # the link is kept ...
    hosts = json.loads((dotfiles / "hosts.json").read_text())["hosts"]
    assert [h["name"] for h in hosts] == ["local", "new", "old"]  # ... and its target holds the change
    assert _host_names(ddpgui) == {"local", "old", "new"}
    assert sorted(p.name for p in dotfiles.iterdir()) == ["hosts.json"]  # no temp file left beside it


def test_the_progress_line_shows_the_ten_second_mean_the_app_shows():
    """One record's samples/s (a fast step after a slow one: 2000) is not the run's rate: 1 step/s of 32 samples
    over the last 10 s is, and it is what the ETA (80 steps left: 01:20) is computed from."""
    live = LiveRun(total_steps=100)
    live.add_event({"event": "train_start", "t": 1000.0})
    for step in range(1, 21):
        live.add_metric({"t": 1000.0 + step, "step": step, "loss": 1.0, "global_batch": 32, "warmup": False,
                         "samples_per_s": 2000.0 if step == 20 else 20.0, "tokens_per_s": 64000.0 if step == 20 else
                         640.0})
    line = progress_line(live)
    assert f"  {format_rate(32.0, 'samples/s')}  " in line and "ETA 01:20" in line, line
    assert f"  {format_rate(1024.0, 'tok/s')}" in line, line  # 32 tokens a sample, as the record says
    assert format_rate(32.0, "samples/s") in stats_line(live, active=True)  # the app's header: the same number
    assert "2000" not in line


def test_show_of_a_run_that_never_started_says_not_probed(ddpgui):
    with RunStore() as store:
        store_run(store, "never-started", BASE, environment=launcher(STAGE_CONNECTING), state="failed")
    code, out, err = ddpgui("show", "never-started")
    assert code == 0, err
    assert "  environment not probed" in out and "None" not in out, out
