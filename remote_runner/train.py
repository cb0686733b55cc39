"""The DDP worker: ``python -m torch.distributed.run --nproc_per_node N -m remote_runner.train RUN_DIR``.

Every process reads ``RUN_DIR/config.json``, trains a built-in workload (or, in
inference mode, times its forward pass per precision) and on global rank 0 only
writes ``metrics.jsonl`` and ``events.jsonl`` (docs/PROTOCOL.md).  Each rank
writes ``pids/rank<R>.pid`` first, and ``error-rank<R>.json`` when it fails.

Test hook: with ``DDPGUI_TEST_FAIL_RANK=R`` and ``DDPGUI_TEST_FAIL_STEP=S`` in
the environment, rank R raises ``RuntimeError("injected failure ...")`` at the
start of step S; the tests use it to prove that the other ranks do not hang.
"""
import contextlib
import copy
import faulthandler
import json
import math
import os
import resource
import sys
import time
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Optional

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from remote_runner.capabilities import peak_tflops, precision_problem, resolve_backend, resolve_device
from remote_runner.config import ConfigError, RunConfig, load_config
from remote_runner.spools import METRICS, SpoolWriter, append_event
from remote_runner.status import CONFIG, atomic_write
from remote_runner.workloads import Workload, build_workload

FAIL_RANK_ENV = "DDPGUI_TEST_FAIL_RANK"
FAIL_STEP_ENV = "DDPGUI_TEST_FAIL_STEP"
#: Benchmark hooks (benchmarks/bench_runner.py measures what the spool costs): skip the
#: metrics writes, and write the steady-state step rate to the named file.
BENCH_NO_SPOOL_ENV = "DDPGUI_BENCH_NO_SPOOL"
BENCH_TIMINGS_ENV = "DDPGUI_BENCH_TIMINGS"


class _NoSpool:
    """Stands in for the metrics SpoolWriter in the no-spool benchmark."""

    def write(self, record: dict) -> int:
        return 0

    def close(self) -> None:
        pass
PIDS_DIR = "pids"
GIB = float(2 ** 30)

OPTIMIZERS = {
    "sgd": lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9),
    "adam": lambda params, lr: torch.optim.Adam(params, lr=lr),
    "adamw": lambda params, lr: torch.optim.AdamW(params, lr=lr),
}


class PrecisionError(RuntimeError):
    """A precision this device cannot run; the message says why in plain words."""


class DeviceError(RuntimeError):
    """A device that this host does not have."""


@dataclass
class Env:
    """Where this process runs: its ranks, device and process-group backend."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str
    gpu_name: Optional[str] = None
    capability: Optional[tuple[int, int]] = None

    @property
    def master(self) -> bool:
        """Global rank 0: the only process that writes metrics and events."""
        return self.rank == 0

    @property
    def kind(self) -> str:
        return self.device.type


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
                train(cfg, run_dir, env)
        finally:
            dist.destroy_process_group()
    except Exception as exc:
        _write_error(run_dir, rank, exc)
        traceback.print_exc()
        return 1
    return 0


def setup(cfg: RunConfig) -> Env:
    """Pick the device and backend, bind this process to its GPU and join the process group."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    present = {
        "cpu": True,
        "cuda": torch.cuda.is_available(),
        "xpu": hasattr(torch, "xpu") and torch.xpu.is_available(),
        "mps": torch.backends.mps.is_available(),
    }
    kind = resolve_device(cfg.device, present["cuda"], present["xpu"], present["mps"])
    if not present[kind]:
        raise DeviceError("device %s was requested but this host's PyTorch sees none" % kind)
    backend = resolve_backend(cfg.backend, cuda=kind == "cuda", xpu=kind == "xpu", nccl=dist.is_nccl_available())
    device, gpu_name, capability = torch.device(kind), None, None
    if kind in ("cuda", "xpu"):
        device = torch.device(kind, local_rank)
        # before init_process_group: NCCL/XCCL bind this process to the GPU that is current now
        getattr(torch, kind).set_device(device)
    if kind == "cuda":
        gpu_name, capability = torch.cuda.get_device_name(device), torch.cuda.get_device_capability(device)
        # cuDNN uses TF32 convolutions by default: fp32 has to switch them off to measure fp32
        torch.backends.cuda.matmul.allow_tf32 = cfg.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = cfg.precision == "tf32"
    # the timeout bounds every collective, so a dead peer cannot hang the others forever
    dist.init_process_group(backend, timeout=timedelta(seconds=cfg.rank_failure_timeout_s))
    return Env(dist.get_rank(), local_rank, dist.get_world_size(), device, backend, gpu_name, capability)


def train(cfg: RunConfig, run_dir: str, env: Env) -> None:
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
    batches = epoch_batches(loader, sampler, steps_per_epoch * cfg.grad_accum)
    log = TrainLog(cfg, run_dir, env, work, steps_per_epoch, total) if env.master else None
    fail_step = injected_failure_step(env.rank)
    step = 0
    losses: list[torch.Tensor] = []
    while total is None or step < total:
        if step + 1 == fail_step:
            raise RuntimeError("injected failure on rank %d at step %d (%s)" % (env.rank, fail_step, FAIL_STEP_ENV))
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
        if log is not None:
            log.step_done(step)
        if step % cfg.log_every == 0 or step == total:
            if log is not None:
                log.interval(step, epoch, losses, optimizer.param_groups[0]["lr"])
            losses.clear()
            if deadline is not None and time_is_up(deadline, env.device):
                break
    if log is not None:
        log.summary(step)


class TrainLog:
    """Global rank 0's metrics and events: one record per log interval, steady-state totals."""

    def __init__(self, cfg: RunConfig, run_dir: str, env: Env, work: Workload, steps_per_epoch: int,
                 total_steps: Optional[int]):
        self.run_dir, self.device, self.compiled = run_dir, env.device, cfg.compile != "off"
        self.warmup_steps = cfg.warmup_steps
        self.global_batch = cfg.batch_size * cfg.grad_accum * env.world_size
        self.world_size = env.world_size
        self.tokens_per_sample, self.flops_per_sample = work.tokens_per_sample, work.flops_per_sample
        peak = peak_tflops(env.gpu_name, cfg.precision)
        self.peak_tflops = peak * env.world_size if peak else None
        self.metrics = _NoSpool() if os.environ.get(BENCH_NO_SPOOL_ENV) else SpoolWriter(os.path.join(run_dir, METRICS))
        self.losses: list[float] = []
        self.steady_samples, self.steady_s = 0, 0.0
        self.event("train_start", world_size=env.world_size, backend=env.backend, device=env.kind,
                   gpu_name=env.gpu_name, precision=cfg.precision, compile=cfg.compile, workload=cfg.workload,
                   params=work.params, global_batch=self.global_batch, tokens_per_sample=work.tokens_per_sample,
                   grad_checkpointing=cfg.grad_checkpointing and cfg.workload == "transformer",
                   steps_per_epoch=steps_per_epoch, total_steps=total_steps)
        if self.compiled:
            self.event("compile_start")  # the first step traces and compiles the model
        self.started = self.last_t = time.perf_counter()
        self.last_step = 0

    def event(self, name: str, **fields: object) -> None:
        append_event(self.run_dir, name, **fields)

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
        self.metrics.write(record)
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
        self.metrics.close()
        if os.environ.get(BENCH_TIMINGS_ENV) and steady:
            with open(os.environ[BENCH_TIMINGS_ENV], "w") as fh:
                json.dump({"steady_steps_per_s": steady / self.global_batch}, fh)


def infer(cfg: RunConfig, run_dir: str, env: Env) -> None:
    """Time the forward pass per precision: warm-up batches, then ``cfg.steps`` timed batches.

    Ranks run independently (no collective per batch); ``samples_per_s`` is global, rank 0's
    rate times the world size.  A precision this device cannot run becomes an
    ``inference_unsupported`` event, never a crash.
    """
    if cfg.steps is None:
        raise ConfigError("steps", "inference mode times a number of batches: give steps, not epochs or minutes")
    torch.manual_seed(cfg.seed)
    work = build_workload(cfg, env.device)
    model = work.model.eval()
    compiled = model if cfg.compile == "off" else torch.compile(model, mode=compile_mode(cfg.compile))
    first = env.rank * cfg.batch_size
    batch = torch.stack([work.dataset[(first + i) % len(work.dataset)][0] for i in range(cfg.batch_size)])
    batch = batch.to(env.device)
    if env.master:
        append_event(run_dir, "inference_start", world_size=env.world_size, backend=env.backend, device=env.kind,
                     gpu_name=env.gpu_name, compile=cfg.compile, workload=cfg.workload, params=work.params,
                     batch_size=cfg.batch_size, precisions=cfg.inference_precisions)
    metrics = SpoolWriter(os.path.join(run_dir, METRICS)) if env.master else None
    for precision in cfg.inference_precisions:
        forward: Optional[Callable[[torch.Tensor], object]] = None
        reason: Optional[str] = None
        try:
            forward = inference_forward(model, compiled, precision, env)
            with torch.inference_mode():
                for _ in range(max(1, cfg.warmup_steps)):  # also compiles, when compile is on
                    forward(batch)
        except Exception as exc:
            if precision == "fp32":
                raise
            forward, reason = None, "%s not supported here: %s" % (precision, exc)
        dist.barrier()  # every rank starts each precision together (and each has tried it)
        if forward is None:
            if env.master:
                append_event(run_dir, "inference_unsupported", precision=precision, reason=reason)
            continue
        latencies: list[float] = []
        with torch.inference_mode():
            for step in range(1, cfg.steps + 1):
                start = time.perf_counter()
                forward(batch)
                synchronize(env.device)  # a latency is only known once the device has finished
                latencies.append(1e3 * (time.perf_counter() - start))
                if metrics is not None:
                    metrics.write({"phase": "inference", "precision": precision, "step": step,
                                   "latency_ms": latencies[-1],
                                   "samples_per_s": 1e3 * cfg.batch_size * env.world_size / latencies[-1]})
        if env.master:
            append_event(run_dir, "inference_summary", precision=precision, batches=len(latencies),
                         latency_p50_ms=percentile(latencies, 50), latency_p99_ms=percentile(latencies, 99),
                         samples_per_s=1e3 * cfg.batch_size * env.world_size * len(latencies) / sum(latencies))
    if metrics is not None:
        metrics.close()


def inference_forward(model: nn.Module, compiled: nn.Module, precision: str,
                      env: Env) -> Callable[[torch.Tensor], object]:
    """The forward pass for one inference precision; raises when the device cannot run it."""
    if precision == "int8":
        return int8_model(model, env.kind)
    check_precision(precision, env)
    amp = autocast(precision, env.kind)

    def forward(x: torch.Tensor) -> object:
        with amp:
            return compiled(x)

    return forward


def int8_model(model: nn.Module, kind: str) -> nn.Module:
    """A copy of ``model`` with int8 dynamically quantized Linear layers (convolutions stay fp32).

    On CPU it uses PyTorch's own ``torch.ao.quantization.quantize_dynamic`` (deprecated in
    favour of torchao, still present in 2.13); elsewhere torchao, when it is installed.
    """
    if kind == "cpu":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the torch.ao deprecation notice, once per rank
            from torch.ao.quantization import quantize_dynamic
            return quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    try:
        import torchao.quantization as tq
    except ImportError:
        raise RuntimeError("PyTorch's built-in int8 quantization runs on CPU only; install torchao for int8 on %s"
                           % kind) from None
    config = getattr(tq, "Int8DynamicActivationInt8WeightConfig", None) or tq.int8_dynamic_activation_int8_weight
    quantized = copy.deepcopy(model)
    tq.quantize_(quantized, config())
    return quantized


def check_precision(precision: str, env: Env) -> None:
    """Raise :class:`PrecisionError` with the plain-words reason when the device cannot run ``precision``."""
    problem = precision_problem(precision, env.kind, env.capability,
                                cpu_fp16_autocast=env.kind != "cpu" or cpu_fp16_autocast())
    if problem:
        raise PrecisionError(problem)


def cpu_fp16_autocast() -> bool:
    """Whether this PyTorch really computes in fp16 under CPU autocast (older builds warn and fall back)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autocast("cpu", dtype=torch.float16):
            return torch.mm(torch.ones(1, 1), torch.ones(1, 1)).dtype == torch.float16


def compile_mode(name: str) -> Optional[str]:
    """torch.compile's ``mode`` for a config value: "default" is torch's None."""
    return None if name == "default" else name


def autocast(precision: str, kind: str) -> contextlib.AbstractContextManager:
    """Mixed precision for fp16/bf16; fp32 and tf32 run without autocast."""
    if precision in ("fp16", "bf16"):
        return torch.autocast(kind, dtype=torch.float16 if precision == "fp16" else torch.bfloat16)
    return contextlib.nullcontext()


def grad_scaler(kind: str, enabled: bool):
    """A GradScaler for ``kind``; disabled, its methods pass through unchanged."""
    if hasattr(torch.amp, "GradScaler"):  # torch >= 2.3, with CPU support
        return torch.amp.GradScaler(kind, enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


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


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work; CPU work is never queued."""
    if device.type != "cpu":
        getattr(torch, device.type).synchronize()


def peak_memory_gib(device: torch.device) -> float:
    """Peak memory of this process: allocated CUDA memory, else the peak resident set size."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / GIB
    # ru_maxrss is in KiB on Linux and in bytes on macOS
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (GIB if sys.platform == "darwin" else GIB / 1024)


def percentile(values: list[float], pct: float) -> float:
    """The nearest-rank percentile of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(len(ordered) * pct / 100) - 1)]


def injected_failure_step(rank: int) -> Optional[int]:
    """The step at which this rank must fail (the test hook), or None."""
    if os.environ.get(FAIL_RANK_ENV) == str(rank) and os.environ.get(FAIL_STEP_ENV):
        return int(os.environ[FAIL_STEP_ENV])
    return None


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
