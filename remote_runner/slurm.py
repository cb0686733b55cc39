"""A run as one Slurm job: ``slurm-job`` in the batch script, ``slurm-node`` once per node under ``srun``.

The client prepared every node's run directory (``launch --new --no-start``) and
submitted a batch script that ends in ``runner slurm-job BASE NNODES``.  On the
batch host (the job's first node) ``slurm-job``:

1. finds the rendezvous: the first node of ``scontrol show hostnames
   $SLURM_JOB_NODELIST``, reached at that node's ``NodeAddr`` (what Slurm itself
   uses to reach it; often the same name), and a port free on it right now;
2. writes it into each node's config.json (``rdzv_endpoint``);
3. on a requeued job (``SLURM_RESTART_COUNT`` > 0) gives the new attempt run
   directories of its own, ``<run id>-r<N>`` (docs/PROTOCOL.md, "Slurm");
4. runs ``srun --ntasks-per-node=1`` of ``slurm-node``, whose exit status is the job's.

``slurm-node`` is the node's supervisor in the foreground (Slurm owns the process,
so it is not detached): node rank from ``SLURM_NODEID``, the same spools and
status.json as any run.  Its status names the Slurm node, never this machine's
hostname, so a login node sharing the run root never judges a compute node's pid.
"""
import json
import os
import shutil
import subprocess
import sys
from typing import Optional

from .fsutil import atomic_write
from .status import CONFIG, write_status

#: The environment variables a Slurm job step has (``slurm-node`` refuses to run without them).
JOB_ENV = ("SLURM_JOB_ID", "SLURM_NODEID", "SLURM_JOB_NODELIST")


def node_run_dir(base: str, nnodes: int, node: int) -> str:
    """The run directory of ``node``: ``BASE`` for a one-node run, ``BASE.node<k>`` otherwise (as the client)."""
    return base if nnodes == 1 else "%s.node%d" % (base, node)


def attempt_base(base: str, restarts: int) -> str:
    """The run directory base of attempt ``restarts`` of a requeued job: ``BASE-r<N>`` (BASE itself first)."""
    return base if restarts <= 0 else "%s-r%d" % (base, restarts)


def head_node(nodelist: str, run=subprocess.run) -> str:
    """The first node of ``nodelist`` (``scontrol show hostnames``; a plain name list when scontrol is absent)."""
    try:
        out = run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=60)
        names = out.stdout.split() if out.returncode == 0 else []
    except OSError:
        names = []
    return names[0] if names else nodelist.split(",")[0]


def node_address(node: str, run=subprocess.run) -> str:
    """How the other nodes reach ``node``: its ``NodeAddr`` from ``scontrol show node -o``, else its name."""
    try:
        out = run(["scontrol", "show", "node", "-o", node], capture_output=True, text=True, timeout=60)
    except OSError:
        return node
    for word in out.stdout.split():
        if word.startswith("NodeAddr="):
            return word.split("=", 1)[1] or node
    return node


def _free_port() -> int:
    from .supervisor import free_port

    return free_port()


def _endpoint(address: str, port: int) -> str:
    return "[%s]:%d" % (address, port) if ":" in address else "%s:%d" % (address, port)


def prepare_attempt(base: str, nnodes: int, restarts: int) -> str:
    """The base of this attempt's run directories; for a requeued job, new ones with the first attempt's configs.

    A directory of this attempt that exists already (a requeue that came back to the
    same attempt number after a crash of this step) is reused as it is.
    """
    new_base = attempt_base(base, restarts)
    if new_base == base:
        return base
    run_id = os.path.basename(new_base)
    for node in range(nnodes):
        src, dst = node_run_dir(base, nnodes, node), node_run_dir(new_base, nnodes, node)
        if os.path.isdir(dst):  # the client made it when it saw the requeue: its config follows the mkdir at once
            _wait_for(os.path.join(dst, CONFIG), 30.0)
            continue
        with open(os.path.join(src, CONFIG), encoding="utf-8") as fh:
            config = json.load(fh)
        config.update(run_id=run_id, name=(config.get("name") or run_id) + " (attempt %d)" % (restarts + 1))
        os.makedirs(dst, 0o700)
        atomic_write(os.path.join(dst, CONFIG), json.dumps(config, indent=2, sort_keys=True).encode(), 0o600)
    return new_base


def _wait_for(path: str, timeout: float) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.1)


def set_endpoint(base: str, nnodes: int, endpoint: Optional[str]) -> None:
    """Write the rendezvous ``endpoint`` into every node's config.json (multi-node runs only)."""
    if nnodes == 1:
        return
    for node in range(nnodes):
        path = os.path.join(node_run_dir(base, nnodes, node), CONFIG)
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
        config["rdzv_endpoint"] = endpoint
        atomic_write(path, json.dumps(config, indent=2, sort_keys=True).encode(), 0o600)


def job(base: str, nnodes: int, profile: Optional[str] = None) -> int:
    """``slurm-job BASE NNODES``: the batch step. Returns the exit status of the ``srun`` of every node."""
    from .supervisor import self_command

    missing = [name for name in JOB_ENV[::2] if not os.environ.get(name)]
    if missing:
        sys.stderr.write("slurm-job runs inside a Slurm batch job (%s is not set)\n" % ", ".join(missing))
        return 2
    restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    base = prepare_attempt(os.path.abspath(base), nnodes, restarts)
    head = head_node(os.environ["SLURM_JOB_NODELIST"])
    here = os.environ.get("SLURMD_NODENAME") or ""
    # The batch step runs on the job's first node: a port free here is free on the head. Elsewhere
    # (a site whose batch host is not the first node), a port derived from the job id, which
    # two jobs sharing a node are unlikely to pick both.
    port = _free_port() if here in ("", head) else 20000 + int(os.environ["SLURM_JOB_ID"]) % 20000
    set_endpoint(base, nnodes, _endpoint(node_address(head), port))
    srun = shutil.which("srun") or "srun"
    argv = [srun, "--nodes", str(nnodes), "--ntasks", str(nnodes), "--ntasks-per-node", "1",
            "--kill-on-bad-exit=0", "--unbuffered"] + self_command() + ["slurm-node", base, str(nnodes)]
    if profile:
        argv += ["--profile", profile]
    sys.stdout.write("ddpgui: attempt %d, rendezvous %s:%d (%s), run directories %s\n"
                     % (restarts + 1, head, port, node_address(head), base))
    sys.stdout.flush()
    return subprocess.call(argv)


def node(base: str, nnodes: int, profile: Optional[str] = None) -> int:
    """``slurm-node BASE NNODES``: this node's supervisor, in the foreground of its ``srun`` task."""
    import time

    from .spools import append_event
    from .supervisor import Supervisor, record_end, reserve_space

    if not all(os.environ.get(name) for name in JOB_ENV):
        sys.stderr.write("slurm-node runs as a task of a Slurm job step (%s not set)\n" % ", ".join(JOB_ENV))
        return 2
    node_id = int(os.environ["SLURM_NODEID"])
    run_dir = node_run_dir(os.path.abspath(base), nnodes, node_id)
    slurm_node = os.environ.get("SLURMD_NODENAME") or "node %d" % node_id
    # "host" names the Slurm node and job: never equal to a login node's hostname, so a host that
    # shares the run root leaves this pid to Slurm (status.runs_elsewhere).
    write_status(run_dir, state="starting", started_at=time.time(), profile=profile,
                 host="%s (Slurm job %s)" % (slurm_node, os.environ["SLURM_JOB_ID"]),
                 slurm_job=os.environ["SLURM_JOB_ID"], slurm_node=slurm_node)
    reserve_space(run_dir)
    append_event(run_dir, "placed", node=slurm_node, job=os.environ["SLURM_JOB_ID"],
                 message="node %d runs on Slurm node %s (job %s)" % (node_id, slurm_node, os.environ["SLURM_JOB_ID"]))
    try:
        supervisor = Supervisor(run_dir)
    except Exception as exc:
        record_end(run_dir, "failed", message=str(exc), hint="check the run's config.json and the job's environment")
        return 1
    return supervisor.run(keep_host=True)
