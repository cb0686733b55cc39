"""The user's own training script ("script" mode): its entry.

Each rank runs the script under :func:`run_script_and_exit` (``runner _script ENTRY ARGS``),
as ``python ENTRY ARGS`` would, and leaves the way the built-in workloads do.  Its metrics are read
by the supervisor from what rank 0 prints and logs (:mod:`remote_runner.scriptread`).
"""
import os
import runpy
import sys

from remote_runner.proctree import exit_without_finalizing
from remote_runner.scriptread.rank0 import attach_rank0

#: The hidden runner command each rank of a script-mode run starts with: ``_script ENTRY ARGS...``.
SCRIPT_COMMAND = "_script"

def run_script_and_exit(path: str, args: list[str]) -> None:
    """Run the script at ``path`` as its ``__main__`` with ``args``, then leave with its exit status.

    As ``python path args`` would: ``sys.argv = [path, *args]``, the script's folder first on
    ``sys.path``; a SystemExit gives its code, an exception prints its traceback (from the
    script's own frames, through ``sys.excepthook``) and gives 1.  Whatever the script made
    stays referenced until the process is gone, so nothing (a DDP reducer, a gloo process
    group) is destroyed on the way out.  Imports nothing the script does not import itself:
    it may set environment variables before it imports torch.  Rank 0's output goes to the
    supervisor's FIFOs (:func:`~remote_runner.scriptread.rank0.attach_rank0`).
    """
    attach_rank0()
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
