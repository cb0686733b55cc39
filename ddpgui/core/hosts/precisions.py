"""Which precisions the app offers on a host: one rule for the launch form, the New sweep dialog and plan_sweep.

A precision is refused, with the reason in plain words, when the host's probe says it cannot run there
(:func:`remote_runner.probe.precision_problems`: tf32 on a CPU, bf16 before Ampere, …) and, on a host that
trains on its CPU, fp16 too: a CPU has no fast fp16 arithmetic, so PyTorch emulates it (several times slower
than fp32) and the run measures nothing a GPU's fp16 would.  The runner itself still runs fp16 on a CPU when
given it (``ddpgui launch --precision fp16``); the app only stops offering it.  A host not probed yet is offered
everything.  A Slurm cluster is judged by its compute nodes (GPUs when the profile asks for them), not by the
login node its probe ran on.
"""
from __future__ import annotations

from remote_runner.config import PRECISIONS
from remote_runner.probe import precision_problems as probe_precision_problems

from .slurm_options import SlurmOptions

CPU_FP16 = ("fp16 is not offered on a CPU: a CPU has no fast fp16 arithmetic, so PyTorch emulates it (several "
            "times slower than fp32) and the run measures nothing a GPU's fp16 would; use bf16 or fp32.")


def cluster_precision_probe(probe: dict | None, options: SlurmOptions) -> dict:
    """What the precisions are judged by on a cluster: its compute nodes (GPUs when the profile asks for them),
    not the login node the probe ran on; the login node's torch says whether CPU fp16 autocast works."""
    gpus = [{}] * options.gpus_per_node
    return {"gpus": gpus, "best_device": "cuda" if gpus else "cpu", "torch": (probe or {}).get("torch") or {}}


def host_precision_problems(probe: dict | None, cluster: SlurmOptions | None = None) -> dict[str, str | None]:
    """precision → why the app does not offer it on this host (None: offered), from the host's probe report;
    ``cluster``: the host is a Slurm cluster with these options."""
    if cluster is not None:
        probe = cluster_precision_probe(probe, cluster)
    if not probe:
        return {p: None for p in PRECISIONS}
    problems = probe_precision_problems(probe)
    device = probe.get("best_device") or ("cuda" if probe.get("gpus") else "cpu")
    if device == "cpu" and problems.get("fp16") is None:
        problems["fp16"] = CPU_FP16
    return problems


def precision_problems(nodes: list[tuple[str, dict | None]],
                       cluster: SlurmOptions | None = None) -> dict[str, str | None]:
    """precision → why the app does not offer it on every one of ``nodes`` ((display name, probe) pairs: the
    nodes of one run, or the hosts of one sweep); one node's reason alone, several named ("a: …; b: …")."""
    problems: dict[str, str | None] = {}
    for precision in PRECISIONS:
        reasons = [(name, host_precision_problems(probe, cluster).get(precision)) for name, probe in nodes]
        reasons = [(name, reason) for name, reason in reasons if reason]
        problems[precision] = None if not reasons else reasons[0][1] if len(nodes) == 1 else \
            "; ".join(f"{name}: {reason}" for name, reason in reasons)
    return problems


__all__ = ["CPU_FP16", "cluster_precision_probe", "host_precision_problems", "precision_problems"]
