"""Slurm clusters as targets: an SSH target on the login node that submits runs as jobs and asks Slurm about them.

Everything an SSH host does (deploy, follow, files, probe of the login node's
Python) works as it is: the run root is on the cluster's shared filesystem, so the
login node reads every node's spools.  Slurm's commands run on the login node:
``sbatch`` to submit, ``squeue`` (queued and running jobs, all of a host's jobs in
one call), ``sacct`` then ``scontrol show job`` once a job has left the queue,
``scancel`` to stop, ``sinfo`` for the partitions.
"""
from __future__ import annotations

import dataclasses
import posixpath
import re
from dataclasses import dataclass

from remote_runner.config import RunConfig
from remote_runner.slurm import node_run_dir

from ..hosts import HostProfile
from ..slurm import jobscript
from ..slurm.jobs import (
    SACCT_COLUMNS,
    SQUEUE_FORMAT,
    JobInfo,
    accounting_disabled,
    parse_sacct,
    parse_scontrol_job,
    parse_squeue,
)
from ..slurm.partitions import SINFO_FORMAT, Partition, parse_sinfo, request_problems
from ..ssh.connection import SSHConnection
from .base import CommandResult, LaunchResult, TargetError
from .ssh import SSHTarget

#: sbatch's refusals, and what to do about each.
_SBATCH_HINTS = (
    (r"Invalid partition", "set the host profile's partition to one that exists (ddpgui probe HOST lists them)"),
    (r"Invalid account", "set the host profile's account to one you belong to (sacctmgr show assoc user=$USER)"),
    (r"Invalid qos", "set the host profile's QoS to one your account may use, or leave it empty"),
    (r"time limit", "lower the host profile's time limit to the partition's (ddpgui probe HOST shows it)"),
    (r"node configuration is not available|Node count specification",
     "ask for fewer nodes, GPUs or memory per node than the partition's nodes have (ddpgui probe HOST)"),
    (r"gres", "check GPUs per node and the GPU flag (gres or gpus-per-node) in the host profile"),
)


@dataclass(frozen=True)
class Submission:
    """A run submitted as a job: its Slurm job id and each node's run directory."""

    job_id: str
    run_dirs: dict[int, str]
    script: str


class SlurmTarget(SSHTarget):
    """A Slurm cluster: an :class:`SSHTarget` to its login node, plus its queue."""

    def __init__(self, profile: HostProfile, connection: SSHConnection):
        super().__init__(profile, connection)
        self.options = profile.slurm
        self._accounting: bool | None = None  # sacct works here (None: not asked yet)
        self._sacct_columns = SACCT_COLUMNS
        self.commands = 0  # Slurm commands run (the status-poll load on the login node)

    # ---- Slurm's commands ------------------------------------------------------------------
    def slurm(self, argv: list[str], timeout: float = 60.0) -> CommandResult:
        """Run one Slurm command on the login node; a missing command says how to get it."""
        self.commands += 1
        result = self.exec(argv, timeout=timeout)
        err = result.stderr.decode("utf-8", "replace")
        if result.rc == 127 or (result.rc != 0 and "command not found" in err):
            raise TargetError(f"{argv[0]} was not found on {self.name}'s login node",
                              "is this a Slurm cluster? If Slurm's commands need a module there, add its directory "
                              "to PATH in the login shell's profile (~/.bashrc), e.g. module load slurm")
        return result

    def submit(self, cfg: RunConfig) -> Submission:
        """Prepare every node's run directory (config, job script) and ``sbatch`` the job."""
        dirs = self.prepare(cfg)
        base = self.run_dir(cfg.run_id)
        script = jobscript.job_script(self.options, cfg, self.runner(), base, self.name)
        self.write_file(posixpath.join(dirs[0], jobscript.SCRIPT_NAME), script.encode(), 0o700)
        result = self.slurm(jobscript.sbatch_argv(cfg, dirs[0]), timeout=120)
        job_id = jobscript.parse_job_id(result.stdout.decode("utf-8", "replace"))
        if result.rc != 0 or job_id is None:
            err = result.stderr.decode("utf-8", "replace").strip() or result.stdout.decode("utf-8", "replace").strip()
            hint = next((h for pattern, h in _SBATCH_HINTS if re.search(pattern, err, re.IGNORECASE)),
                        f"the job script is {posixpath.join(dirs[0], jobscript.SCRIPT_NAME)} on {self.name}")
            raise TargetError(f"sbatch refused the job on {self.name}: {err[-400:] or 'no output'}", hint)
        return Submission(job_id, dirs, script)

    def prepare(self, cfg: RunConfig, exist_ok: bool = False) -> dict[int, str]:
        """Create every node's run directory with its config (``launch --new --no-start``); ``exist_ok``: one the
        job made already (a requeued attempt's, remote_runner.slurm.prepare_attempt) is fine."""
        base = self.run_dir(cfg.run_id)
        dirs = {k: node_run_dir(base, cfg.nnodes, k) for k in range(cfg.nnodes)}
        for k, run_dir in dirs.items():
            node_cfg = dataclasses.replace(cfg, node_rank=k, scheduler="slurm", rdzv_endpoint=None)
            try:
                self._runner_json("launch", run_dir, "--new", "--no-start", "--profile", self.name,
                                  stdin=node_cfg.to_json().encode())
            except TargetError as exc:
                if not (exist_ok and "already exists" in str(exc)):
                    raise
        return dirs

    def launch(self, config: RunConfig) -> LaunchResult:
        raise TargetError(f"{self.name} is a Slurm cluster: its runs are submitted as jobs", "use RunManager.launch")

    def jobs(self, job_ids: list[str]) -> dict[str, JobInfo]:
        """The state of each job: from one ``squeue`` while in the queue, then from sacct or scontrol."""
        if not job_ids:
            return {}
        result = self.slurm(["squeue", "-h", "-j", ",".join(job_ids), "-o", SQUEUE_FORMAT])
        err = result.stderr.decode("utf-8", "replace")
        if result.rc != 0 and "Invalid job id" not in err:  # old Slurm: rc 1 when every id has left the queue
            raise TargetError(f"squeue failed on {self.name}: {err.strip()[-300:]}", "try again later")
        found = {k: v for k, v in parse_squeue(result.stdout.decode("utf-8", "replace")).items() if k in job_ids}
        gone = [j for j in job_ids if j not in found]
        if gone:
            found.update(self.ended_jobs(gone))
        return found

    def ended_jobs(self, job_ids: list[str]) -> dict[str, JobInfo]:
        """Jobs that left the queue: sacct where accounting is on, else ``scontrol show job`` (kept for
        MinJobAge, 300 s by default); a job neither knows any more is absent."""
        found: dict[str, JobInfo] = {}
        if self._accounting is not False:
            result = self.slurm(["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", self._sacct_columns])
            if result.rc != 0 and "Invalid field" in result.stderr.decode("utf-8", "replace"):
                self._sacct_columns = SACCT_COLUMNS.replace(",Reason", "")  # sacct before 19.05 has no Reason
                result = self.slurm(["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", self._sacct_columns])
            if result.rc == 0:
                self._accounting = True
                found = {k: v for k, v in parse_sacct(result.stdout.decode("utf-8", "replace")).items()
                         if k in job_ids}
            elif accounting_disabled(result.stderr.decode("utf-8", "replace")) or result.rc == 127:
                self._accounting = False
        for job_id in job_ids:
            if job_id not in found:
                info = self.scontrol_job(job_id)
                if info is not None:
                    found[job_id] = info
        return found

    def scontrol_job(self, job_id: str) -> JobInfo | None:
        result = self.slurm(["scontrol", "show", "job", "-o", job_id])
        return parse_scontrol_job(result.stdout.decode("utf-8", "replace")) if result.rc == 0 else None

    def cancel(self, job_id: str, signal: str | None = None) -> None:
        """``scancel`` the job, or send its steps ``signal`` (``TERM``: the ranks flush and record a stop)."""
        argv = ["scancel", *([f"--signal={signal}"] if signal else []), job_id]
        result = self.slurm(argv)
        err = result.stderr.decode("utf-8", "replace").strip()
        if result.rc != 0 and "already completing or completed" not in err and "Invalid job id" not in err:
            raise TargetError(f"scancel {job_id} failed on {self.name}: {err[-300:]}",
                              f"cancel it on the login node yourself: scancel {job_id}")

    def partitions(self) -> list[Partition]:
        result = self.slurm(["sinfo", "-h", "-o", SINFO_FORMAT])
        if result.rc != 0:
            raise TargetError(f"sinfo failed on {self.name}: {result.stderr.decode(errors='replace').strip()[-300:]}",
                              "check that the login node reaches the cluster's controller")
        return parse_sinfo(result.stdout.decode("utf-8", "replace"))

    def queue(self) -> list[JobInfo]:
        """The login user's jobs in the queue (every job of theirs, not only ddpgui's)."""
        self.commands += 1
        result = self.exec(["sh", "-c", 'exec squeue -h -u "${USER:-$(id -un)}" -o "$0"', SQUEUE_FORMAT])
        return list(parse_squeue(result.stdout.decode("utf-8", "replace")).values()) if result.rc == 0 else []

    def version(self) -> str:
        result = self.slurm(["sinfo", "--version"])
        return result.stdout.decode("utf-8", "replace").strip()

    def check_request(self, cfg: RunConfig, uses_gpus: bool | None = None) -> list[tuple[str, str, str]]:
        """``(field, message, hint)`` for what makes ``cfg`` impossible on the profile's partition."""
        gpus = self.options.gpus_per_node > 0 if uses_gpus is None else uses_gpus
        return request_problems(self.partitions(), self.options, cfg.nnodes, cfg.nproc_per_node, gpus)

    def probe(self) -> dict:
        """The login node's probe (its Python and torch), with the cluster: version, partitions, the user's queue."""
        report = super().probe()
        # What the runner found is the login node's: its GPUs, driver and even torch are often not the compute
        # nodes' (a module or venv of the setup lines), so they warn, never block a launch.
        report["problems"] = [dict(p, severity="warning", message="on the login node: " + p.get("message", ""))
                              for p in report.get("problems") or []]
        parts = self.partitions()
        report["slurm"] = {"version": self.version(), "partitions": [p.to_json() for p in parts],
                           "queue": [dataclasses.asdict(j) for j in self.queue()],
                           "partition": self.options.partition}
        problems = request_problems(parts, self.options, 1, 1, self.options.gpus_per_node > 0)
        report["problems"] = [*(report.get("problems") or []),
                              *({"message": m, "hint": h, "field": f, "severity": "error"} for f, m, h in problems)]
        return report
