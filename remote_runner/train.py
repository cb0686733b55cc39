"""The DDP worker: ``python -m torch.distributed.run --nproc_per_node N -m remote_runner.train RUN_DIR``.

Every process reads ``RUN_DIR/config.json``, trains a built-in workload (or, in
inference mode, times its forward pass per precision: ``infer.py``) and on global rank 0 only
writes ``metrics.jsonl`` and ``events.jsonl`` (docs/PROTOCOL.md).  Each rank
writes ``pids/rank<R>.pid`` first, and ``error-rank<R>.json`` when it fails.

The test and benchmark hooks (``hooks.py``) are read from the environment once, in :func:`main`.
"""
import contextlib
import faulthandler
import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from typing import Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from remote_runner.capabilities import peak_tflops
from remote_runner.config import ConfigError, RunConfig, load_config
from remote_runner.devices import (
    Env,
    autocast,
    check_precision,
    compile_mode,
    grad_scaler,
    peak_memory_gib,
    setup,
    synchronize,
)
from remote_runner.fsutil import atomic_write
from remote_runner.hooks import Hooks
from remote_runner.infer import infer
from remote_runner.proctree import PIDS_DIR
from remote_runner.ranklog import NullLog, RunLog
from remote_runner.spools import METRICS
from remote_runner.status import CONFIG
from remote_runner.workloads import Workload, build_workload

OPTIMIZERS = {
    "sgd": lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9),
    "adam": lambda params, lr: torch.optim.Adam(params, lr=lr),
    "adamw": lambda params, lr: torch.optim.AdamW(params, lr=lr),
}


def main(run_dir: str) -> int:
    """Run one rank of the run in ``run_dir``; 0 on success, 1 after writing error-rank<R>.json."""
    rank = int(os.environ.get("RANK", "0"))
    faulthandler.enable()  # a crash in native code (SIGSEGV, SIGABRT) prints where Python was
    _write_pid(run_dir, rank)
    try:
        cfg = load_config(os.path.join(run_dir, CONFIG))
        if cfg.mode == "script":
            raise ConfigError("mode", "script runs start the user's script, not remote_runner.train")
        env = setup(cfg)
        try:
            if cfg.mode == "inference":
                infer(cfg, run_dir, env)
            else:
                train(cfg, run_dir, env, Hooks.from_environ(env.rank))
        finally:
            dist.destroy_process_group()
    except Exception as exc:
        _write_error(run_dir, rank, exc)
        traceback.print_exc()
        return 1
    return 0


def train(cfg: RunConfig, run_dir: str, env: Env, hooks: Hooks) -> None:
    """The training loop: DDP, gradient accumulation, rank-0 metrics every ``log_every`` steps."""
    check_precision(cfg.precision, env)
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank
    work = build_workload(cfg, env.device)
    torch.manual_seed(cfg.seed + env.rank)  # from here on each rank draws its own random numbers
    ddp = DDP(work.model, device_ids=[env.local_rank] if env.kind == "cuda" else None)
    # Compile the DDP-wrapped model, as the DDP docs advise: TorchDynamo then splits the graph at
    # DDP's bucket boundaries (DDPOptimizer) so gradient all-reduce still overlaps the backward pass.
    model = ddp if cfg.compile == "off" else torch.compile(ddp, mode=compile_mode(cfg.compile))
    optimizer = OPTIMIZERS[cfg.optimizer](work.model.parameters(), cfg.lr)
    scaler = grad_scaler(env.kind, enabled=cfg.precision == "fp16")  # a no-op unless fp16
    amp = autocast(cfg.precision, env.kind)
    loader, sampler = data_loader(cfg, env, work.dataset)
    steps_per_epoch = len(loader) // cfg.grad_accum
    if steps_per_epoch == 0:
        raise ConfigError("dataset_size", "%d samples do not fill one step of batch_size x grad_accum x world_size = %d"
                          % (cfg.dataset_size, cfg.batch_size * cfg.grad_accum * env.world_size))
    total = cfg.steps if cfg.steps is not None else (cfg.epochs * steps_per_epoch if cfg.epochs else None)
    deadline = time.monotonic() + 60.0 * cfg.minutes if cfg.minutes is not None else None
    batches = hooks.batches(epoch_batches(loader, sampler, steps_per_epoch * cfg.grad_accum), cfg.grad_accum)
    log = TrainLog(cfg, run_dir, env, work, steps_per_epoch, total, hooks) if env.master else NullLog()
    step = 0
    losses: list[torch.Tensor] = []
    while total is None or step < total:
        for micro in range(cfg.grad_accum):
            epoch, (x, y) = next(batches)
            x, y = x.to(env.device, non_blocking=True), y.to(env.device, non_blocking=True)
            # only the last micro-step all-reduces gradients; the others just accumulate them locally
            with ddp.no_sync() if micro < cfg.grad_accum - 1 else contextlib.nullcontext():
                with amp:
                    loss = work.loss_fn(model(x), y)
                scaler.scale(loss / cfg.grad_accum).backward()
            losses.append(loss.detach())
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        log.step_done(step)
        if step % cfg.log_every == 0 or step == total:
            log.interval(step, epoch, losses, optimizer.param_groups[0]["lr"])
            losses.clear()
            if deadline is not None and time_is_up(deadline, env.device):
                break
    log.summary(step)


class TrainLog(RunLog):
    """Global rank 0's metrics and events: one record per log interval, steady-state totals."""

    def __init__(self, cfg: RunConfig, run_dir: str, env: Env, work: Workload, steps_per_epoch: int,
                 total_steps: Optional[int], hooks: Hooks):
        self.device, self.compiled, self.hooks = env.device, cfg.compile != "off", hooks
        self.warmup_steps = cfg.warmup_steps
        self.global_batch = cfg.batch_size * cfg.grad_accum * env.world_size
        self.world_size = env.world_size
        self.tokens_per_sample, self.flops_per_sample = work.tokens_per_sample, work.flops_per_sample
        peak = peak_tflops(env.gpu_name, cfg.precision)
        self.peak_tflops = peak * env.world_size if peak else None
        super().__init__(run_dir, hooks.metrics_spool(os.path.join(run_dir, METRICS)))
        self.losses: list[float] = []
        self.steady_samples, self.steady_s = 0, 0.0
        self.event("train_start", world_size=env.world_size, backend=env.backend, device=env.kind,
                   gpu_name=env.gpu_name, precision=cfg.precision, compile=cfg.compile, workload=cfg.workload,
                   model_size=work.size, params=work.params, global_batch=self.global_batch,
                   tokens_per_sample=work.tokens_per_sample,
                   grad_checkpointing=cfg.grad_checkpointing and cfg.workload == "transformer",
                   steps_per_epoch=steps_per_epoch, total_steps=total_steps)
        if self.compiled:
            self.event("compile_start")  # the first step traces and compiles the model
        self.started = self.last_t = time.perf_counter()
        self.last_step = 0

    def step_done(self, step: int) -> None:
        """Events that mark phases: compile done after step 1, warm-up done."""
        if step == 1 and self.compiled:
            synchronize(self.device)  # the device may still be running the first step
            self.event("compile_end", duration_s=time.perf_counter() - self.started)
        if step == self.warmup_steps:
            self.event("warmup_done", step=step)

    def interval(self, step: int, epoch: int, losses: list[torch.Tensor], lr: float) -> None:
        """One metrics record for the steps since the last one.

        The loss is rank 0's own mean over the interval: DDP keeps the replicas identical, so it
        estimates the global loss from rank 0's shard without a collective per log interval.
        """
        # .item() waits for every queued step to finish: the loop's only CPU-GPU sync point
        loss = (losses[0] if len(losses) == 1 else torch.stack(losses).mean()).item()
        now = time.perf_counter()
        steps, seconds = step - self.last_step, now - self.last_t
        warmup = self.last_step < self.warmup_steps  # the interval includes warm-up steps
        samples_per_s = self.global_batch * steps / seconds
        tflops = self.flops_per_sample * samples_per_s / 1e12 if self.flops_per_sample else None
        record = {"phase": "train", "step": step, "epoch": epoch, "loss": loss, "lr": lr,
                  "samples_per_s": samples_per_s, "step_time_ms": 1e3 * seconds / steps,
                  "tflops": tflops, "mfu": tflops / self.peak_tflops if tflops and self.peak_tflops else None,
                  "mem_peak_gib": peak_memory_gib(self.device), "world_size": self.world_size,
                  "global_batch": self.global_batch, "warmup": warmup}
        if self.tokens_per_sample:
            record["tokens_per_s"] = samples_per_s * self.tokens_per_sample
        self.metric(record)
        if not warmup:
            self.steady_samples += self.global_batch * steps
            self.steady_s += seconds
        self.losses.append(loss)
        self.last_step, self.last_t = step, now

    def summary(self, step: int) -> None:
        steady = self.steady_samples / self.steady_s if self.steady_s else None
        finite = [x for x in self.losses if x == x]  # NaN != NaN: a diverged interval is not the best
        self.event("summary", steps=step, duration_s=self.last_t - self.started, steady_samples_per_s=steady,
                   steady_tokens_per_s=steady * self.tokens_per_sample if steady and self.tokens_per_sample else None,
                   final_loss=self.losses[-1] if self.losses else None, best_loss=min(finite) if finite else None,
                   mem_peak_gib=peak_memory_gib(self.device))
        self.close()
        self.hooks.steady_rate(steady, self.global_batch, self.metrics)


def data_loader(cfg: RunConfig, env: Env, dataset: Dataset) -> tuple[DataLoader, DistributedSampler]:
    """This rank's shard of ``dataset`` in batches of ``cfg.batch_size``."""
    # drop_last in both: every rank gets the same number of full batches, so no rank waits in an
    # all-reduce that another never joins, and a compiled model sees one batch shape
    sampler = DistributedSampler(dataset, num_replicas=env.world_size, rank=env.rank, shuffle=True,
                                 seed=cfg.seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler, drop_last=True,
                        num_workers=cfg.num_workers, pin_memory=env.kind == "cuda",
                        persistent_workers=cfg.num_workers > 0)
    return loader, sampler


def epoch_batches(loader: DataLoader, sampler: DistributedSampler, per_epoch: int) -> Iterator[tuple[int, object]]:
    """(epoch, batch) without end: ``per_epoch`` batches per epoch (whole optimizer steps)."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same one on every rank
        for _, batch in zip(range(per_epoch), loader):
            yield epoch, batch
        epoch += 1


def time_is_up(deadline: float, device: torch.device) -> bool:
    """Whether any rank has passed the deadline.  All ranks must leave the loop at the same
    step: one that trained on would wait forever in its next all-reduce."""
    flag = torch.tensor([float(time.monotonic() >= deadline)], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _write_pid(run_dir: str, rank: int) -> None:
    pids = os.path.join(run_dir, PIDS_DIR)
    os.makedirs(pids, mode=0o700, exist_ok=True)
    with open(os.path.join(pids, "rank%d.pid" % rank), "w", encoding="utf-8") as fh:
        fh.write("%d\n" % os.getpid())


def _write_error(run_dir: str, rank: int, exc: BaseException) -> None:
    """``error-rank<R>.json`` for the failure diagnoser, replaced atomically."""
    record = {"rank": rank, "type": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc(),
              "t": time.time()}
    for extra in ("hint", "field"):  # BackendError.hint, ConfigError.field
        if getattr(exc, extra, None):
            record[extra] = getattr(exc, extra)
    path = os.path.join(run_dir, "error-rank%d.json" % rank)
    atomic_write(path, json.dumps(record, indent=1).encode("utf-8"))


def main_and_exit(run_dir: str) -> int:
    """Run the rank, then leave without interpreter finalization (see proctree.exit_without_finalizing)."""
    from remote_runner.proctree import exit_without_finalizing

    exit_without_finalizing(main(run_dir))
    return 1  # not reached


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m remote_runner.train RUN_DIR")
    main_and_exit(sys.argv[1])
