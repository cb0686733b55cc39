"""Slurm jobs as the app sees them: parsing squeue, scontrol and sacct output, and mapping their states onto ours.

Pure: the commands are run by :class:`ddpgui.core.targets.slurm.SlurmTarget`; this
module reads what they print (captured from a real cluster in tests/fixtures/slurm).
Every format used here exists since Slurm 17.x (``squeue -o`` with ``%i %T %r
%N %l %D``, ``scontrol show job -o``, ``sacct -P -o``); ``--json`` output (21.08+)
is not relied on.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

#: ``squeue -h -o`` format: id, state (long), reason, nodes, time used, time limit, node count.
SQUEUE_FORMAT = "%i|%T|%r|%N|%M|%l|%D"
#: ``sacct -X -n -P -o`` columns.
SACCT_COLUMNS = "JobID,State,ExitCode,Reason"

#: States of a job still in the queue (or finishing on its nodes).
QUEUED = frozenset({"PENDING", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED"})
LIVE = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING", "STOPPED"})
FINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                   "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"})


@dataclass
class JobInfo:
    """One job: its state (``PENDING``, ``RUNNING``, ``TIMEOUT``...), the reason, its nodes, restarts."""

    id: str
    state: str
    reason: str = ""
    nodes: str = ""
    time_limit: str = ""
    node_count: int | None = None
    restarts: int = 0
    exit_code: str = ""
    elapsed: str = ""
    source: str = "squeue"  # squeue | scontrol | sacct
    fields: dict = field(default_factory=dict)

    @property
    def queued(self) -> bool:
        return self.state in QUEUED

    @property
    def final(self) -> bool:
        return self.state in FINAL


def _state(text: str) -> str:
    """``CANCELLED by 0`` (sacct) and ``CANCELLED+`` (truncated) → ``CANCELLED``."""
    return re.split(r"[\s+]", text.strip(), maxsplit=1)[0].upper() if text.strip() else "UNKNOWN"


def parse_squeue(text: str) -> dict[str, JobInfo]:
    """``squeue -h -o SQUEUE_FORMAT`` lines by job id (lines of another shape are skipped)."""
    jobs = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 7 or not parts[0]:
            continue
        job_id, state, reason, nodes, used, limit, count = parts
        jobs[job_id] = JobInfo(job_id, _state(state), "" if reason in ("None", "(null)") else reason, nodes, limit,
                               int(count) if count.isdigit() else None, elapsed=used)
    return jobs


def parse_scontrol_job(text: str) -> JobInfo | None:
    """``scontrol show job -o ID`` (one line of KEY=VALUE words; values without spaces except a few)."""
    fields = dict(re.findall(r"(\w+)=(\S*)", text))
    if "JobId" not in fields or "JobState" not in fields:
        return None
    reason = fields.get("Reason", "")
    return JobInfo(fields["JobId"], _state(fields["JobState"]), "" if reason == "None" else reason,
                   fields.get("NodeList", "") if fields.get("NodeList") != "(null)" else "",
                   fields.get("TimeLimit", ""), int(fields["NumNodes"]) if fields.get("NumNodes", "").isdigit() else None,
                   int(fields.get("Restarts") or 0) if (fields.get("Restarts") or "0").isdigit() else 0,
                   fields.get("ExitCode", ""), fields.get("RunTime", ""), "scontrol", fields)


def parse_sacct(text: str) -> dict[str, JobInfo]:
    """``sacct -X -n -P -o SACCT_COLUMNS`` lines by job id (the allocation line of each job)."""
    jobs = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3 or not parts[0] or "." in parts[0]:
            continue
        reason = parts[3] if len(parts) > 3 else ""
        jobs[parts[0]] = JobInfo(parts[0], _state(parts[1]), "" if reason == "None" else reason,
                                 exit_code=parts[2], source="sacct")
    return jobs


def accounting_disabled(stderr: str) -> bool:
    """sacct's answer on a cluster without accounting storage (the run's own status files must then tell)."""
    return "accounting storage is disabled" in stderr or "slurmdbd" in stderr.lower()


#: What a pending reason means for the user, and what to do when it will not pass by itself.
_PENDING = {
    "Priority": ("other jobs are ahead of it in the queue", ""),
    "Resources": ("waiting for nodes to become free", ""),
    "BeginTime": ("waiting for its start time", ""),
    "Dependency": ("waiting for the jobs it depends on", ""),
    "JobHeldUser": ("held by you", "release it with scontrol release JOB"),
    "JobHeldAdmin": ("held by an administrator", "ask the cluster's administrators"),
    "QOSMaxJobsPerUserLimit": ("your QoS allows no more running jobs at once", "it starts when one of yours ends"),
    "AssocMaxJobsLimit": ("your account allows no more running jobs at once", "it starts when one of yours ends"),
    "ReqNodeNotAvail": ("a node it needs is down, drained or reserved", "check sinfo; choose another partition"),
    "PartitionTimeLimit": ("its time limit is above the partition's: it will never start",
                           "stop it and lower the time limit in the host profile (probe shows the partition's)"),
    "PartitionNodeLimit": ("it asks for more nodes than the partition allows: it will never start",
                           "stop it and ask for fewer nodes, or choose another partition"),
    "BadConstraints": ("no node can satisfy what it asks for: it will never start",
                       "stop it and check GPUs per node, memory and CPUs against the partition (probe)"),
    "PartitionDown": ("the partition is down", "wait for the administrators, or choose another partition"),
    "PartitionInactive": ("the partition is inactive", "choose another partition"),
}


def pending_text(job: JobInfo) -> tuple[str, str]:
    """``(message, hint)`` for a queued job: its reason in words (the raw reason kept in the message)."""
    reason = job.reason or "no reason given yet"
    words, hint = _PENDING.get(job.reason, ("", ""))
    if job.reason.startswith(("QOS", "Assoc")) and not words:
        words, hint = "a limit of your QoS or account holds it", "it starts when your other jobs end"
    text = f"queued in Slurm (job {job.id}): {reason}" + (f", {words}" if words else "")
    return text, hint


def end_columns(job: JobInfo, stop_requested: bool = False, time_limit: str = "") -> dict:
    """The run's final columns (state, failure, message, hint) from the job's end in Slurm."""
    state, jid = job.state, job.id
    limit = job.time_limit or time_limit
    out = "look at slurm-%s.out and stderr.log in the run directory (ddpgui show RUN)" % jid
    if state == "CANCELLED":
        if stop_requested:
            return {"state": "stopped", "failure": None, "message": "stopped on request (scancel)", "hint": ""}
        return {"state": "stopped", "failure": "cancelled", "hint": "rerun it if it should have finished",
                "message": f"Slurm job {jid} was cancelled outside ddpgui (scancel, or an administrator)"}
    table = {
        "COMPLETED": ("finished", None, "", ""),
        "TIMEOUT": ("failed", "timeout", f"Slurm ended job {jid} at its time limit" + (f" ({limit})" if limit else ""),
                    "ask for a longer time limit (the host profile's time limit) or train for fewer steps"),
        "NODE_FAIL": ("failed", "node_fail", f"a node of Slurm job {jid} failed" +
                      (f" ({job.nodes})" if job.nodes else ""),
                      "rerun it; if it happens again, tell the cluster's administrators the node's name"),
        "OUT_OF_MEMORY": ("failed", "out_of_memory", f"Slurm job {jid} ran out of memory on a node",
                          "ask for more memory (the host profile's memory per node) or lower the batch size"),
        "PREEMPTED": ("stopped", "preempted", f"Slurm preempted job {jid} for a job of higher priority",
                      "rerun it, or use a partition/QoS that is not preempted"),
        "BOOT_FAIL": ("failed", "boot_fail", f"the nodes of Slurm job {jid} failed to boot", "rerun it"),
        "DEADLINE": ("failed", "deadline", f"Slurm job {jid} reached its deadline", "rerun it with a later deadline"),
        "FAILED": ("failed", "job_failed", f"Slurm job {jid} failed" + (f" (exit code {job.exit_code})"
                                                                        if job.exit_code else ""), out),
    }
    ours, failure, message, hint = table.get(state, ("failed", "job_failed", f"Slurm job {jid} ended {state}", out))
    return {"state": ours, "failure": failure, "message": message, "hint": hint}
