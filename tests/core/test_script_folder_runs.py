"""A script run on This computer works in the script's own folder, as `torchrun train.py` there would: its relative
paths are the user's, nothing is copied, and the run records the code's fingerprint (real supervisor, real torchrun,
real git, real run store and CLI)."""
import os
import subprocess

import pytest

from ddpgui.cli import main as cli_main
from ddpgui.core.paths import data_dir
from ddpgui.core.runs import launches
from ddpgui.core.runs.config import make_config
from ddpgui.core.targets.base import TargetError
from ddpgui.core.targets.fingerprint import fingerprint
from ddpgui.core.targets.local import LocalTarget
from ddpgui.core.targets.uploads import DEFAULT_SIZE_CAP

#: Reads a dataset over the upload cap and writes a checkpoint, both by relative paths.
TRAIN = """\
import os

size = os.path.getsize("data/big.bin")
with open("data/big.bin", "rb") as fh:
    fh.seek(size - 4)
    tail = fh.read()
os.makedirs("out", exist_ok=True)
if os.environ.get("RANK", "0") == "0":
    with open("out/ckpt.txt", "w") as fh:
        fh.write("%s %d %r" % (os.getcwd(), size, tail))
print("step 1: loss 0.5", flush=True)
"""


def git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@example.org", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def project(tmp_path):
    """A git repository (one commit) with an uncommitted edit and a sparse dataset over the upload cap."""
    root = tmp_path / "my project"
    (root / "data").mkdir(parents=True)
    (root / "train.py").write_text(TRAIN)
    (root / ".gitignore").write_text("out/\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    (root / "train.py").write_text(TRAIN + "# tuned\n")
    with open(root / "data" / "big.bin", "wb") as fh:  # sparse: no disk used, never read by the fingerprint
        fh.seek(DEFAULT_SIZE_CAP + 2**20 - 4)
        fh.write(b"END!")
    return root


def everything_under(path):
    return {os.path.relpath(os.path.join(d, n), path) for d, _, names in os.walk(path) for n in names}


@pytest.mark.slow
def test_a_local_script_run_works_in_its_own_folder_and_records_its_fingerprint(manager, project, capsys):
    before = everything_under(data_dir())
    expected = fingerprint(project)
    record = manager.launch("local", {"mode": "script", "nproc_per_node": 2,
                                      "script": {"dir": str(project), "entry": "train.py"}})
    final = manager.wait(record.id, timeout=300)
    assert final.state == "finished", (final.message, manager.store.log_tail(final.id, "stderr.log")[-3000:])
    size = DEFAULT_SIZE_CAP + 2**20
    assert (project / "out" / "ckpt.txt").read_text() == f"{project} {size} b'END!'"
    new = everything_under(data_dir()) - before  # the run's own directory (and the runner): nothing of the folder
    assert new and all(p.startswith((f"local/runs/{final.id}/", "local/runner-", "runs.")) for p in new), sorted(new)
    assert not any(os.path.basename(p) in ("ckpt.txt", "big.bin", "train.py") for p in new), sorted(new)
    assert not os.path.exists(data_dir() / "local" / "scripts")

    script = final.config["script"]
    assert script["dir"] == str(project)  # a rerun works in the same folder
    assert script["fingerprint"] == expected
    assert expected["git_commit"] == git(project, "rev-parse", "HEAD") and expected["git_dirty"]
    capsys.readouterr()
    assert cli_main(["show", final.id]) == 0
    shown = capsys.readouterr().out
    assert (f"\n  code        git {expected['git_commit'][:7]} + uncommitted changes "
            f"(sha256 {expected['git_dirty'][:12]}…)\n") in shown, shown

    (project / "train.py").write_text(TRAIN + "# tuned again\n")  # a rerun fingerprints the code it runs
    edited = fingerprint(project)
    rerun = manager.wait(manager.rerun(final.id).id, timeout=300)
    assert rerun.state == "finished" and rerun.config["script"]["fingerprint"] == edited
    assert edited["git_dirty"] != expected["git_dirty"] and edited["git_commit"] == expected["git_commit"]


def test_a_script_that_is_not_there_is_refused_saying_so(manager, tmp_path):
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "train.py").write_text("print(1)\n")
    with pytest.raises(TargetError) as refused:
        manager.launch("local", {"mode": "script", "script": {"dir": str(folder), "entry": "trian.py"}})
    assert str(refused.value) == (f"the script trian.py is not in {folder} — check the entry file's name (relative "
                                  "to the folder) and the folder")
    assert refused.value.field == "script.entry"
    failed = manager.store.list_runs()[0]
    assert failed.state == "failed" and failed.message == f"the script trian.py is not in {folder}"
    with pytest.raises(TargetError, match="^the script folder .*/gone does not exist on this computer"):
        manager.launch("local", {"mode": "script", "script": {"dir": str(tmp_path / "gone"), "entry": "train.py"}})


class Elsewhere(LocalTarget):
    """A host that does not see this computer's files (a run root here stands in for another machine's)."""

    sees_local_files = False


def test_an_entry_the_ignore_rules_leave_out_is_refused_before_anything_is_uploaded(tmp_path):
    folder = tmp_path / "proj"
    (folder / "scripts").mkdir(parents=True)
    (folder / "train.py").write_text("print(1)\n")
    (folder / "scripts" / "go.py").write_text("print(1)\n")
    (folder / ".gitignore").write_text("# generated\ntrain.py\nscripts/\n")
    target = Elsewhere("box", run_root=str(tmp_path / "box"))
    for entry, rule in (("train.py", "ignored by .gitignore:2 `train.py`"),
                        ("scripts/go.py", "ignored by .gitignore:3 `scripts/`")):
        cfg = make_config({"mode": "script", "script": {"dir": str(folder), "entry": entry}})
        with pytest.raises(TargetError) as refused:
            launches.place_script(target, cfg, launches.read_script_folder(cfg))
        assert str(refused.value) == (f"the script {entry} would not be uploaded to box: {rule} — change that rule, "
                                      f"or add `!{entry}` to a .ddpguiignore in the folder")
    assert not (tmp_path / "box").exists()
    (folder / ".ddpguiignore").write_text("!train.py\n")
    cfg = make_config({"mode": "script", "script": {"dir": str(folder), "entry": "train.py"}})
    launches.place_script(target, cfg, launches.read_script_folder(cfg))
    assert cfg.script.dir.startswith(str(tmp_path / "box" / "scripts"))
    assert os.path.isfile(os.path.join(cfg.script.dir, "train.py"))
    assert cfg.script.fingerprint == fingerprint(folder)
