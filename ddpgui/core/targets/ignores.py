"""The ignore rules of a script folder: its ``.gitignore`` files and ``.ddpguiignore`` files, with git's meaning.

Patterns are matched by ``pathspec`` (git's wildmatch: negation, directory-only
patterns, anchoring, ``**``).  What git adds on top is here: each ignore file
holds for its own directory and below, with paths relative to that directory; a
deeper file takes precedence over a higher one, and inside a file the last
matching pattern wins; a ``.ddpguiignore`` takes precedence over the
``.gitignore`` beside it (so ``!data/small.csv`` there uploads a file git
ignores).  A directory that is ignored is not entered, so nothing under it can
be re-included (as in git).  When the folder lies inside a git work tree, the
``.gitignore`` files of its parents up to the top of the work tree count too
(named ``../.gitignore`` in the reasons).  A symbolic link is never a directory
here, as in git.  ``.git/info/exclude`` and the user's global excludes file are
not read: they are one clone's settings, not the folder's.
"""
from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass
from pathlib import Path

from pathspec import GitIgnoreSpec

log = logging.getLogger(__name__)

#: The ignore files of a directory, the one that takes precedence last.
IGNORE_FILES = (".gitignore", ".ddpguiignore")
#: Ignore files above the folder, in the parents inside its git work tree.
PARENT_IGNORE_FILES = (".gitignore",)


@dataclass(frozen=True)
class IgnoreFile:
    """One ignore file: where it is (named relative to the folder) and what it says."""

    name: str  # e.g. "lib/.gitignore", "../.gitignore"
    base: str  # the path from the file's directory to the folder ("" when it is in the folder or below)
    lines: list[str]
    spec: GitIgnoreSpec

    @classmethod
    def read(cls, path: Path, name: str, base: str = "") -> IgnoreFile | None:
        """The ignore file at ``path``; ``base`` (for a parent's file): the folder's path from that parent, whose
        patterns that ignore the folder itself or a directory on the way to it are left out (the user chose the
        folder: a parent's ``experiments/`` rule does not empty it)."""
        try:
            text = path.read_bytes().decode("utf-8", "replace")
        except OSError as exc:
            log.warning("cannot read %s: %s", path, exc.strerror or exc)
            return None
        lines = text.splitlines()
        on_the_way = [base.rsplit("/", k)[0] + "/" for k in range(base.count("/") + 1)] if base else []
        # A blank line gives no pattern, a comment a pattern that matches nothing: blank lines, invalid patterns
        # (git passes over them too) and those left out become comments, so that pattern i is line i + 1.
        return cls(name, base, lines, GitIgnoreSpec.from_lines([_kept(line, on_the_way) for line in lines]))

    def decide(self, rel: str, is_dir: bool) -> tuple[bool, int] | None:
        """(ignored, line number) of the last pattern of this file that matches ``rel`` (a path relative to the
        folder), or None when none does."""
        path = posixpath.join(self.base, rel) if self.base else rel
        result = self.spec.check_file(path + "/" if is_dir else path)
        if result.include is None or result.index is None:
            return None
        return bool(result.include), result.index + 1

    def reason(self, line: int) -> str:
        return f"ignored by {self.name}:{line} `{self.lines[line - 1].rstrip()}`"


def _kept(line: str, directories: list[str]) -> str:
    """``line``, or a comment in its place when it is blank, not a valid pattern, or ignores one of ``directories``."""
    if not line.strip() or line.startswith("#"):
        return "#"
    try:
        spec = GitIgnoreSpec.from_lines([line])
    except ValueError:
        return "#"
    return "#" if any(spec.check_file(d).include for d in directories) else line


def _work_tree_top(folder: Path) -> Path | None:
    """The top of the git work tree that holds ``folder`` (the nearest parent with a ``.git``), or None."""
    for parent in folder.parents:
        if (parent / ".git").exists():
            return parent
    return None


class IgnoreRules:
    """The ignore rules of one folder, read directory by directory as a top-down walk enters them."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self._files: dict[str, list[IgnoreFile]] = {}  # directory relative to the folder ("" the folder) → its files
        self._above: list[IgnoreFile] = []  # the parents' .gitignore files, deepest first
        top = None if (self.root / ".git").exists() else _work_tree_top(self.root)
        if top is not None:
            for parent in self.root.parents:
                if not parent.is_relative_to(top):
                    break
                base = self.root.relative_to(parent).as_posix()
                up = "../" * (base.count("/") + 1)
                for name in PARENT_IGNORE_FILES:
                    if (parent / name).is_file():
                        found = IgnoreFile.read(parent / name, up + name, base)
                        if found:
                            self._above.append(found)
        self.enter("")

    def enter(self, rel_dir: str) -> None:
        """Read the ignore files of the directory ``rel_dir`` (relative to the folder; "" for the folder)."""
        here = self.root / rel_dir if rel_dir else self.root
        found = []
        for name in IGNORE_FILES:
            path = here / name
            if path.is_file() and not path.is_symlink():
                read = IgnoreFile.read(path, posixpath.join(rel_dir, name) if rel_dir else name)
                if read:
                    found.append(read)
        if found:
            self._files[rel_dir] = found

    def reason(self, rel: str, is_dir: bool) -> str | None:
        """Why ``rel`` (a path relative to the folder) is ignored ("ignored by .gitignore:3 `*.ckpt`"), or None."""
        parent = posixpath.dirname(rel)
        while True:
            for found in reversed(self._files.get(parent, [])):
                decided = found.decide(rel[len(parent) + 1:] if parent else rel, is_dir)
                if decided is not None:
                    ignored, line = decided
                    return found.reason(line) if ignored else None
            if not parent:
                break
            parent = posixpath.dirname(parent)
        for found in self._above:
            decided = found.decide(rel, is_dir)
            if decided is not None:
                ignored, line = decided
                return found.reason(line) if ignored else None
        return None
