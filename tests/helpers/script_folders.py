"""A user's script folder for a test: a copy of a fixture (tests/fixtures/scripts) or one file of source."""
import shutil
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "scripts"
FRAMEWORKS = SCRIPTS / "frameworks"
GPTLIKE = SCRIPTS / "gptlike"


def script_folder(tmp_path: Path, source: Path | str, name: str = "script") -> Path:
    """``tmp_path/name``: a copy of the folder ``source``, or a folder whose train.py is the text ``source``."""
    out = tmp_path / name
    if isinstance(source, Path):
        shutil.copytree(source, out)
    else:
        out.mkdir()
        (out / "train.py").write_text(source)
    return out
