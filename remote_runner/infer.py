"""Inference mode: the forward pass timed per precision (int8 included), on every rank independently."""
import copy
import math
import time
import warnings
from typing import Callable, Optional

import torch
import torch.distributed as dist
from torch import nn

from remote_runner.config import ConfigError, RunConfig
from remote_runner.devices import Env, autocast, check_precision, compile_mode, synchronize
from remote_runner.ranklog import NullLog, RunLog
from remote_runner.workloads import build_workload


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
    log = RunLog(run_dir) if env.master else NullLog()
    log.event("inference_start", world_size=env.world_size, backend=env.backend, device=env.kind,
              gpu_name=env.gpu_name, compile=cfg.compile, workload=cfg.workload, model_size=work.size, params=work.params,
              batch_size=cfg.batch_size, precisions=cfg.inference_precisions)
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
            log.event("inference_unsupported", precision=precision, reason=reason)
            continue
        latencies: list[float] = []
        with torch.inference_mode():
            for step in range(1, cfg.steps + 1):
                start = time.perf_counter()
                forward(batch)
                synchronize(env.device)  # a latency is only known once the device has finished
                latencies.append(1e3 * (time.perf_counter() - start))
                log.metric({"phase": "inference", "precision": precision, "step": step,
                            "latency_ms": latencies[-1],
                            "samples_per_s": 1e3 * cfg.batch_size * env.world_size / latencies[-1]})
        log.event("inference_summary", precision=precision, batches=len(latencies),
                  latency_p50_ms=percentile(latencies, 50), latency_p99_ms=percentile(latencies, 99),
                  samples_per_s=1e3 * cfg.batch_size * env.world_size * len(latencies) / sum(latencies))
    log.close()


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


def percentile(values: list[float], pct: float) -> float:
    """The nearest-rank percentile of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(len(ordered) * pct / 100) - 1)]

