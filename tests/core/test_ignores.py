"""The script upload's ignore rules (.gitignore files, nested ones, and .ddpguiignore), checked against git itself."""
import random
import subprocess
from pathlib import Path

import pytest

from ddpgui.core.targets.uploads import scan

#: A root .gitignore with negation, a directory pattern, anchoring, `**`, a comment, a blank line and a line git
#: passes over ("!" alone); the line numbers matter: the reasons name them.
ROOT_GITIGNORE = """\
*.ckpt
# checkpoints we do keep:
!keep.ckpt

build/
/top.txt
logs/**/*.tmp
data/
!data/keep.txt
!
*.bak
"""
NESTED_GITIGNORE = """\
!*.ckpt
local.txt
/anchored.txt
"""
FILES = ["train.py", "a.ckpt", "keep.ckpt", "top.txt", "build/x.o", "deep/build/y.o", "deep/top.txt",
         "deep/anchored.txt", "sub/b.ckpt", "sub/local.txt", "sub/anchored.txt", "sub/inner/anchored.txt",
         "sub/inner/local.txt", "logs/a/b/c.tmp", "logs/c.tmp", "logs/keep.txt", "data/keep.txt", "data/big.bin",
         "other/build", "notes.bak", "sub/notes.bak"]


def git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True).stdout


def make_tree(root: Path) -> Path:
    for rel in FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    (root / ".gitignore").write_text(ROOT_GITIGNORE)
    (root / "sub" / ".gitignore").write_text(NESTED_GITIGNORE)
    return root


@pytest.fixture
def repo(tmp_path):
    root = make_tree(tmp_path / "proj")
    git(root, "init", "-q")
    return root


def test_the_files_uploaded_are_those_git_does_not_ignore(repo):
    files, skipped = scan(repo)
    not_ignored = git(repo, "ls-files", "-z", "--others", "--exclude-standard").decode().split("\0")
    assert sorted(f.rel for f in files) == sorted(n for n in not_ignored if n)
    ignored = [n for n in git(repo, "ls-files", "-z", "--others", "--ignored", "--exclude-standard").decode()
               .split("\0") if n]

    def covers(entry, rel):  # a skipped file, or a skipped folder (its files were not looked at)
        return rel == entry or (entry.endswith("/") and rel.startswith(entry))

    assert all(any(covers(entry, rel) for entry, _ in skipped) for rel in ignored), (ignored, skipped)
    assert all(any(covers(entry, rel) for rel in ignored) for entry, _ in skipped if entry != ".git/"), skipped


def test_each_skipped_file_names_the_rule_that_ignored_it(repo):
    _, skipped = scan(repo)
    assert dict(skipped) == {
        ".git/": "version control",
        "a.ckpt": "ignored by .gitignore:1 `*.ckpt`",
        "build/": "ignored by .gitignore:5 `build/`",
        "deep/build/": "ignored by .gitignore:5 `build/`",
        "top.txt": "ignored by .gitignore:6 `/top.txt`",
        "logs/a/b/c.tmp": "ignored by .gitignore:7 `logs/**/*.tmp`",
        "logs/c.tmp": "ignored by .gitignore:7 `logs/**/*.tmp`",
        "data/": "ignored by .gitignore:8 `data/`",  # !data/keep.txt cannot re-include it: its folder is ignored
        "notes.bak": "ignored by .gitignore:11 `*.bak`",
        "sub/notes.bak": "ignored by .gitignore:11 `*.bak`",
        "sub/local.txt": "ignored by sub/.gitignore:2 `local.txt`",
        "sub/inner/local.txt": "ignored by sub/.gitignore:2 `local.txt`",
        "sub/anchored.txt": "ignored by sub/.gitignore:3 `/anchored.txt`",
    }


def test_a_ddpguiignore_ignores_more_and_can_take_back_what_git_ignores(tmp_path):
    root = make_tree(tmp_path / "proj")  # not a git repository: the same rules hold
    (root / "secrets.env").write_text("TOKEN=1\n")
    (root / ".ddpguiignore").write_text("secrets.env\n!build/\n")
    (root / "sub" / ".ddpguiignore").write_text("# the nested one too\n*.txt\n")
    files, skipped = scan(root)
    reasons = dict(skipped)
    assert reasons["secrets.env"] == "ignored by .ddpguiignore:1 `secrets.env`"
    assert reasons["sub/anchored.txt"] == "ignored by sub/.ddpguiignore:2 `*.txt`"  # before sub/.gitignore
    assert "build/" not in reasons and "build/x.o" in {f.rel for f in files}
    assert "deep/build/" not in reasons  # `!build/` holds at any depth, as `build/` did
    assert {".ddpguiignore", "sub/.ddpguiignore", ".gitignore"} <= {f.rel for f in files}


def test_a_folder_inside_a_repository_honours_the_parents_gitignore(tmp_path):
    top = tmp_path / "repo"
    folder = top / "experiments" / "e1"
    for rel in ("train.py", "run.log", "out/model.pt", "notes.txt"):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(rel)
    git(top, "init", "-q")
    (top / ".gitignore").write_text("*.log\nexperiments/\n")  # the folder itself ignored: that rule is left out
    (top / "experiments" / ".gitignore").write_text("out/\n")
    files, skipped = scan(folder)
    assert sorted(f.rel for f in files) == ["notes.txt", "train.py"]
    assert dict(skipped) == {"run.log": "ignored by ../../.gitignore:1 `*.log`",
                             "out/": "ignored by ../.gitignore:1 `out/`"}


def test_a_symbolic_link_to_a_directory_is_not_a_directory_to_the_rules(tmp_path):
    root = tmp_path / "proj"
    (root / "real").mkdir(parents=True)
    (root / "train.py").write_text("")
    (root / "linked").symlink_to(root / "real", target_is_directory=True)
    (root / ".gitignore").write_text("linked/\n")  # git: a directory pattern does not match a link
    assert dict(scan(root)[1]) == {"linked/": "a symbolic link to a directory (not followed)"}
    (root / ".gitignore").write_text("linked\n")
    assert dict(scan(root)[1]) == {"linked/": "ignored by .gitignore:1 `linked`"}


#: Patterns and places for random trees: negations, directory-only and anchored patterns, `**` in each position,
#: character classes, escapes, trailing spaces, patterns that match both files and directories.
PATTERNS = ["*.txt", "!keep.txt", "a/", "/a", "b", "**/c", "a/**", "!a/x.txt", "*.log", "!*.log", "d/*.txt", "/d/",
            "x*", "!x1", "**/b/*.py", "e/**/f", "*.py", "!e/", "c/", "?.txt", "[ab].log", "\\!z", " ", "#q", "y/",
            "!y/k.txt", "/*.md", "**/", "f", "a/b/", "*/", "!*/", "d/a", "/e/g", "a/**/", "!**/b/", "x1 ", "**/f/**",
            "e/*/f", "*", "!*.py", "!d/", "!e/g/", "g", "?", "!a", "/b/f", "**/*.log", "!**/x*"]
DIRECTORIES = ["", "a", "b", "c", "d", "e", "a/b", "e/c", "e/g/f", "y", "d/a"]
NAMES = ["keep.txt", "x.txt", "x1", "x2", "m.log", "t.py", "f", "b", "c", "!z", "r.md", "k.txt", "a.log"]


def random_tree(root: Path, rnd: random.Random) -> None:
    for directory in DIRECTORIES:
        for name in rnd.sample(NAMES, 3):
            path = root / directory / name
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(name)
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                pass  # a name taken by a directory, or a directory by a file
    for directory in rnd.sample(DIRECTORIES, 3):
        if (root / directory).is_dir():
            (root / directory / ".gitignore").write_text("\n".join(rnd.sample(PATTERNS, rnd.randint(1, 8))) + "\n")


def test_random_trees_and_rules_give_what_git_gives(tmp_path):
    git(tmp_path, "init", "-q")
    for seed in range(60):
        random_tree(tmp_path / f"t{seed}", random.Random(seed))
        listed = git(tmp_path, "ls-files", "-z", "--others", "--exclude-standard", "--", f"t{seed}").decode()
        expected = sorted(n.split("/", 1)[1] for n in listed.split("\0") if n)
        assert sorted(f.rel for f in scan(tmp_path / f"t{seed}")[0]) == expected, (seed, [
            (str(p.relative_to(tmp_path)), p.read_text()) for p in (tmp_path / f"t{seed}").rglob(".gitignore")])
