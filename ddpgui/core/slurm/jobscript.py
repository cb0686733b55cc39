"""The batch script and ``sbatch`` command line of one run (docs/PROTOCOL.md, "Slurm").

The script holds the profile's resource directives (kept in the run directory as
``job.sbatch``, so a user can read and resubmit it), the profile's setup lines, and
the runner's ``slurm-job``; the paths (output, working directory) go on the command
line, where no ``#SBATCH`` parsing can split a run root with spaces.
"""
from __future__ import annotations

import posixpath
import re
import shlex

from remote_runner.config import RunConfig

from ..hosts.slurm_options import SlurmOptions

SCRIPT_NAME = "job.sbatch"


def job_name(cfg: RunConfig) -> str:
    return f"ddpgui-{cfg.run_id}"


def directives(options: SlurmOptions, cfg: RunConfig) -> list[str]:
    """The ``#SBATCH`` lines: nodes, one task per node, then the profile's resources and its extra lines."""
    lines = [f"--nodes={cfg.nnodes}", "--ntasks-per-node=1", f"--partition={options.partition}"]
    if options.account:
        lines.append(f"--account={options.account}")
    if options.qos:
        lines.append(f"--qos={options.qos}")
    if options.time_limit:
        lines.append(f"--time={options.time_limit}")
    if options.gpus_per_node:
        lines.append(f"--gres=gpu:{options.gpus_per_node}" if options.gpu_flag == "gres"
                     else f"--gpus-per-node={options.gpus_per_node}")
    # One task per node runs every rank of the node: at least a CPU per rank unless the profile says otherwise.
    lines.append(f"--cpus-per-task={options.cpus_per_task or cfg.nproc_per_node}")
    if options.mem:
        lines.append(f"--mem={options.mem}")
    lines += list(options.sbatch_lines)
    return ["#SBATCH " + line for line in lines]


def job_script(options: SlurmOptions, cfg: RunConfig, runner: list[str], base: str, profile: str) -> str:
    """The batch script: directives, setup lines, then ``exec PYTHON RUNNER slurm-job BASE NNODES``."""
    setup = list(options.setup_lines)
    command = "exec " + shlex.join([*runner, "slurm-job", base, str(cfg.nnodes), "--profile", profile])
    return "\n".join([
        "#!/bin/bash",
        f"# ddpgui run {cfg.run_id} ({cfg.name or 'unnamed'}): {cfg.nnodes} node(s) x {cfg.nproc_per_node} "
        "process(es); written by ddpgui, resubmit with sbatch to run it again as it was",
        *directives(options, cfg),
        *(["# the host profile's setup lines", *setup] if setup else []),
        command,
        "",
    ])


def sbatch_argv(cfg: RunConfig, first_dir: str) -> list[str]:
    """``sbatch --parsable`` with the job name, output file and working directory (node 0's run directory)."""
    return ["sbatch", "--parsable", f"--job-name={job_name(cfg)}",
            f"--output={posixpath.join(first_dir, 'slurm-%j.out')}", f"--chdir={first_dir}",
            posixpath.join(first_dir, SCRIPT_NAME)]


def parse_job_id(stdout: str) -> str | None:
    """The job id ``sbatch --parsable`` printed (``123`` or ``123;cluster``), or ``Submitted batch job 123``
    (what sbatch before 14.03, or a site's wrapper script, prints)."""
    for line in reversed(stdout.strip().splitlines()):
        head = line.strip().split(";", 1)[0]
        if head.isdigit():
            return head
        m = re.match(r"^Submitted batch job (\d+)", line.strip())
        if m:
            return m.group(1)
    return None
