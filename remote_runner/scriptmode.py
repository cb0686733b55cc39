"""The user's own training script ("script" mode): its entry, and metrics from the lines it prints.

Each rank runs the script under :func:`run_script_and_exit` (``runner _script ENTRY ARGS``),
as ``python ENTRY ARGS`` would, and leaves the way the built-in workloads do.  What a printed
line holds is read by :mod:`remote_runner.scriptread.lines`.
"""
import os
import re
import runpy
import sys
from re import Pattern
from typing import Optional, Union

from remote_runner.proctree import exit_without_finalizing
from remote_runner.scriptread.lines import parse_metric_line
from remote_runner.spools import SpoolWriter

#: The hidden runner command each rank of a script-mode run starts with: ``_script ENTRY ARGS...``.
SCRIPT_COMMAND = "_script"

def run_script_and_exit(path: str, args: list[str]) -> None:
    """Run the script at ``path`` as its ``__main__`` with ``args``, then leave with its exit status.

    As ``python path args`` would: ``sys.argv = [path, *args]``, the script's folder first on
    ``sys.path``; a SystemExit gives its code, an exception prints its traceback (from the
    script's own frames, through ``sys.excepthook``) and gives 1.  Whatever the script made
    stays referenced until the process is gone, so nothing (a DDP reducer, a gloo process
    group) is destroyed on the way out.  Imports nothing the script does not import itself:
    it may set environment variables before it imports torch.
    """
    sys.argv = [path] + list(args)
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    kept = None  # the script's globals, or its exception (whose frames hold them): held, never read
    try:
        kept = runpy.run_path(path, run_name="__main__")
        code = 0
    except SystemExit as exc:
        kept, code = exc, _exit_status(exc.code)
    except BaseException as exc:  # KeyboardInterrupt too: shown as Python shows it
        kept = exc  # noqa: F841 (held, see above)
        shown = exc.with_traceback(_script_frames(exc.__traceback__, path))  # the hook may read either
        sys.excepthook(type(exc), shown, shown.__traceback__)
        code = 130 if isinstance(exc, KeyboardInterrupt) else 1
    exit_without_finalizing(code)


def _exit_status(code: object) -> int:
    """The process exit status of ``SystemExit(code)``, as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code)
    sys.stderr.write("%s\n" % (code,))
    return 1


def _script_frames(tb, path: str):
    """The traceback from the script's first frame on (without runpy's and ours), or None."""
    while tb is not None and tb.tb_frame.f_code.co_filename != path:
        tb = tb.tb_next
    return tb


class ScriptMetrics:
    """Turns a script's stdout lines into records in the metrics spool at ``path``.

    A line without a step gets the running count of metric lines as its step; ``world_size``,
    when given, goes into every record as it does in the built-in workloads' records.
    """

    def __init__(self, path: str, metric_regex: Optional[Union[str, Pattern]] = None,
                 world_size: Optional[int] = None):
        self.regex = re.compile(metric_regex) if isinstance(metric_regex, str) else metric_regex
        self.writer = SpoolWriter(path)
        self.extra: dict[str, object] = {"phase": "script"}
        if world_size is not None:
            self.extra["world_size"] = world_size
        self.count = 0

    def feed(self, line: str) -> Optional[dict]:
        """Parse one line; the record written (without seq and t), or None when it held no metric."""
        record = parse_metric_line(line, self.regex)
        if record is None:
            return None
        self.count += 1
        if record.get("step") is None:
            record["step"] = self.count
        record.update(self.extra)
        self.writer.write(record)
        return record

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> "ScriptMetrics":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
