"""Advice the launch form shows under a valid run (a hint, never a refusal): settings that will run but waste
what the host has."""
from __future__ import annotations


def launch_advice(settings: dict, world: int, global_batch: int, gpus: bool | None) -> str:
    """One line of advice for these settings on hosts with GPUs (``gpus`` true), without (false: probed, none
    found) or not known yet (None, falsy), or ""."""
    if gpus and 0 < global_batch < 32 * world:
        return (f"A global batch of {global_batch} is small for {world} GPUs: they will mostly wait on "
                "communication. Try a larger batch per GPU.")
    if gpus is False and settings.get("workload") and settings.get("model_size") == "large":
        return ("The large model is sized for a GPU: on a CPU each step takes seconds (auto, the default, is the "
                "small model here).")
    return ""
