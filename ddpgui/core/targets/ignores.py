"""The ignore rules of a script folder: its ``.gitignore`` files and ``.ddpguiignore`` files, with git's meaning.

``pathspec`` matches one pattern against one path (git's wildmatch: ``*``, ``?``,
``[...]``, ``**``, escapes, anchoring).  Its specs answer for a whole path at
once (a file inside a matched directory matches too), which is not how git
walks a tree, so the walk's rules are here, as git applies them to each entry:
a pattern matches the entry itself (a pattern without a slash its name, one with
a slash its path from the ignore file's directory; a trailing ``/`` only a
directory, a trailing ``/**`` everything inside); in one file the last matching
line wins (``!`` re-includes); each ignore file holds for its own directory and
below, a deeper file before a higher one; a ``.ddpguiignore`` before the
``.gitignore`` beside it (so ``!data/small.csv`` there uploads a file git
ignores).  An ignored directory is not entered: nothing under it comes back.
Inside a git work tree the parents' ``.gitignore`` files up to its top count too
(``../.gitignore`` in the reasons), less any line that would ignore the folder
itself or a directory on the way to it (the user chose the folder).  A symbolic
link is never a directory here, as in git.  ``.git/info/exclude`` and the global
excludes file are not read: they are one clone's settings, not the folder's.
"""
from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass
from pathlib import Path

from pathspec import GitIgnoreSpec, Pattern

log = logging.getLogger(__name__)

#: The ignore files of a directory, the one that takes precedence last.
IGNORE_FILES = (".gitignore", ".ddpguiignore")
#: Ignore files above the folder, in the parents inside its git work tree.
PARENT_IGNORE_FILES = (".gitignore",)
#: Appended to a pattern and to the path it is matched against, so that the pattern must end where the path
#: does (no file name holds a NUL): a match of one of the path's directories does not count.
_END = "\0"


@dataclass(frozen=True)
class Rule:
    """One pattern line of an ignore file."""

    line: int
    negated: bool
    dir_only: bool
    contents: bool  # ends in "/**": everything inside, at any depth (matched without _END)
    pattern: Pattern

    @classmethod
    def parse(cls, text: str, line: int) -> Rule | None:
        """The rule of line ``line``, or None for a blank line, a comment or a line git passes over."""
        if not text.strip() or text.startswith("#"):
            return None
        while text.endswith(" ") and not text.endswith("\\ "):  # trailing spaces count only when escaped
            text = text[:-1]
        negated = text.startswith("!")
        text = text[1:] if negated else text
        dir_only = text.endswith("/")
        text = text[:-1] if dir_only else text
        if not text.strip("/"):
            return None
        contents = text.endswith("/**")
        try:
            patterns = GitIgnoreSpec.from_lines([text if contents else text + _END]).patterns
        except ValueError:  # not a pattern git can use either ("\" alone): passed over
            return None
        if len(patterns) != 1 or patterns[0].include is None:
            return None
        return cls(line, negated, dir_only, contents, patterns[0])

    def matches(self, path: str, is_dir: bool) -> bool:
        """Whether the entry at ``path`` (relative to the ignore file's directory) is matched by this line."""
        if self.dir_only and not is_dir:
            return False
        return self.pattern.match_file(path if self.contents else path + _END) is not None


@dataclass(frozen=True)
class IgnoreFile:
    """One ignore file: where it is (named relative to the folder), its lines and its rules."""

    name: str  # e.g. "lib/.gitignore", "../.gitignore"
    base: str  # the path from the file's directory to the folder ("" when it is in the folder or below)
    lines: list[str]
    rules: list[Rule]  # the last line first

    @classmethod
    def read(cls, path: Path, name: str, base: str = "") -> IgnoreFile | None:
        """The ignore file at ``path``; ``base`` (a parent's file): the folder's path from that parent."""
        try:
            lines = path.read_bytes().decode("utf-8", "replace").splitlines()
        except OSError as exc:
            log.warning("cannot read %s: %s", path, exc.strerror or exc)
            return None
        rules = [rule for number, text in enumerate(lines, 1) if (rule := Rule.parse(text, number))]
        if base:  # the folder and the directories on the way to it stay in, whatever the parent says
            on_the_way = [base.rsplit("/", k)[0] for k in range(base.count("/") + 1)]
            rules = [r for r in rules if r.negated or not any(r.matches(d, True) for d in on_the_way)]
        return cls(name, base, lines, rules[::-1])

    def decide(self, rel: str, is_dir: bool) -> tuple[bool, int] | None:
        """(ignored, line number) by the last line that matches ``rel`` (a path relative to the file's directory,
        or to the folder for a parent's file), or None when none does."""
        path = posixpath.join(self.base, rel) if self.base else rel
        for rule in self.rules:
            if rule.matches(path, is_dir):
                return not rule.negated, rule.line
        return None

    def reason(self, line: int) -> str:
        return f"ignored by {self.name}:{line} `{self.lines[line - 1].rstrip()}`"


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
