"""Hostile text in argv, paths, environment values and script files is data on a real server, never shell.

These run against the throwaway account (home in a temp dir): if quoting were
broken, ``rm -rf ~`` would only wipe that, and the canary files would appear.
"""
import json
import posixpath

import pytest

from ddpgui.core.targets.uploads import upload_dir


@pytest.fixture
def target(sacrificial, tmp_path):
    with sacrificial.target(tmp_path) as t:
        yield t


@pytest.fixture
def canary(sacrificial):
    """Hostile strings whose execution would create ``canary`` or delete ``sentinel``."""
    home = sacrificial.account.home
    canary = home / "CANARY-created-by-injection"
    sentinel = home / "sentinel-must-survive"
    sentinel.write_text("still here")
    texts = [
        "; rm -rf ~",
        f"; touch {canary}",
        f"$(touch {canary})",
        f"`touch {canary}`",
        f"' ; touch {canary} ; echo '",
        f'" ; touch {canary} ; echo "',
        f"line one\ntouch {canary}\n",
        f"&& touch {canary} || touch {canary} | touch {canary}",
        f"> {canary}",
        "spaces   and\ttabs",
        "non-ASCII: ünïcødé ✓ 中文 🚀",
        "--help",
        "-rf",
        "*",
        "~",
        "$HOME ${HOME} \\$HOME",
    ]
    yield texts
    assert not canary.exists(), "a hostile string was executed by a shell"
    assert sentinel.read_text() == "still here"


def _safe_name(text: str) -> str:
    return text.replace("/", "∕")  # a file name cannot hold a slash; everything else stays


def test_hostile_argv_comes_back_verbatim(target, canary):
    for text in canary:
        result = target.exec(["printf", "%s", text])
        assert result.rc == 0 and result.stdout.decode() == text


def test_hostile_text_as_a_shell_positional_parameter(target, canary):
    for text in canary:
        result = target.exec(["sh", "-c", 'printf "%s|%s" "$1" "$#"', "sh", text, "second"])
        assert result.stdout.decode() == f"{text}|2"


def test_hostile_environment_values_are_data(target, canary):
    for text in canary:
        result = target.exec(["env", f"DDPGUI_HOSTILE={text}", "sh", "-c", 'printf "%s" "$DDPGUI_HOSTILE"'])
        assert result.stdout.decode() == text


def test_hostile_paths_for_files_and_directories(target, canary):
    root = target.run_root()
    for i, text in enumerate(canary):
        directory = posixpath.join(root, f"d{i} {_safe_name(text)}")
        path = posixpath.join(directory, _safe_name(text))
        target.makedirs(directory)
        target.write_file(path, text.encode())
        assert target.read_file(path) == text.encode()
        assert target.exec(["cat", "--", path]).stdout == text.encode()
        assert target.sha256(path) is not None


def test_hostile_run_config_and_script_args_are_written_as_data(target, canary):
    run_dir = posixpath.join(target.run_root(), "runs", "r1")
    target.makedirs(run_dir)
    config = {"name": canary[0], "script": {"args": canary}, "env": {"X": canary[2]}}
    target.write_file(posixpath.join(run_dir, "config.json"), json.dumps(config).encode())
    back = json.loads(target.exec([target.python, "-c", "import sys; print(open(sys.argv[1]).read())",
                                   posixpath.join(run_dir, "config.json")]).stdout)
    assert back == config


def test_hostile_file_names_in_an_uploaded_script_dir(target, canary, tmp_path):
    local = tmp_path / "proj"
    local.mkdir()
    names = [_safe_name(t) for t in canary]
    for name in names:
        (local / name).write_text(name)
    result = upload_dir(target, local)
    assert sorted(result.uploaded) == sorted(names)
    for name in names:
        assert target.read_file(posixpath.join(result.remote_dir, name)).decode() == name
    for name in names[:3]:
        (local / name).unlink()
    again = upload_dir(target, local)
    assert sorted(again.removed) == sorted(names[:3]) and again.uploaded == []
    for name in names:
        gone = target.exec(["test", "-e", posixpath.join(result.remote_dir, name)]).rc == 1
        assert gone == (name in names[:3])


def test_hostile_python_setting_is_not_a_command(sacrificial, tmp_path, canary):
    evil = f"python3; touch {sacrificial.account.home / 'CANARY-created-by-injection'}"
    with sacrificial.target(tmp_path, sacrificial.profile(python=evil)) as target:
        result = target.exec([target.python, "-c", "print(1)"])
    assert result.rc == 127  # the whole string is looked up as one program name
