"""``make gpu-check``: the paths CPU tests cannot prove, on a machine with an NVIDIA GPU, in one call.

It drives the runner the client uploads (``python -m remote_runner _supervise RUN_DIR``: the supervisor,
torchrun, the ranks, the spools, the telemetry sampler), with the Python that holds torch and nothing of
ddpgui's client installed, so it runs on a bare GPU image.  Sections, in order, each within what is left of
the time budget (``--budget``, 450 s by default; a section that would not fit is recorded as skipped):

- ``probe``: what the runner's probe sees (GPUs, driver, CUDA, NCCL, bf16, compile support, problems);
- ``nvml``: NVML through nvidia-ml-py, as the telemetry sampler opens it (device count, names);
- ``ddp_nccl``: DDP over NCCL, world size = the GPUs present, transformer bf16; its GPU telemetry (util,
  memory, power from NVML or nvidia-smi) and, run beside it, the host monitor (``remote_runner monitor``)
  seeing the run's processes on the GPUs;
- ``precisions``: fp32, tf32, fp16, bf16 on the transformer (eager): steady tokens/s, TFLOP/s, MFU against
  the peak table (``remote_runner/capabilities.py``), peak memory;
- ``compile``: ``torch.compile`` default and max-autotune on the transformer in bf16: compile seconds and
  steady speedup over eager bf16;
- ``inference``: forward-only fp32/fp16/bf16/int8: latency p50/p99 and samples/s per precision.

One JSON file holds it all: ``$OUT/gpu_check.json`` when OUT is set, else ``.bench/gpu_check.json``; a
table is printed.  Exit 0 when every section that ran passed, 1 when one failed, 2 with no NVIDIA GPU
(nothing to check; ``--cpu-smoke`` then runs every section small on the CPU with gloo, which is how the
test suite checks this script itself).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # the nvml section imports the runner here; a bare GPU image has no ddpgui installed
    sys.path.insert(0, str(REPO))
VERSION = 2  # 2: the GPU runs use the large model size (the small one measured kernel launches on an H200)


class Budget:
    """Seconds left of the whole check; each section asks for its cap and gets at most what is left."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                PYTHONUNBUFFERED="1")


def _jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a torn last line of a killed run
    return out


def run_runner(config: dict, timeout: float, root: Path) -> dict:
    """One run through the real supervisor, in the foreground; what its spools and status say."""
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=root))
    config = {"run_id": run_dir.name, "name": run_dir.name, "telemetry_interval_s": 0.5, **config}
    (run_dir / "config.json").write_text(json.dumps(config))
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "remote_runner", "_supervise", str(run_dir)], env=_env(),
                              capture_output=True, text=True, timeout=max(5.0, timeout))
        rc, timed_out, said = proc.returncode, False, proc.stderr[-1000:]
    except subprocess.TimeoutExpired:
        rc, timed_out, said = None, True, ""
    status = json.loads((run_dir / "status.json").read_text()) if (run_dir / "status.json").exists() else {}
    events = _jsonl(run_dir / "events.jsonl")
    metrics = _jsonl(run_dir / "metrics.jsonl")
    telemetry = _jsonl(run_dir / "telemetry.jsonl")
    by_name = {}
    for e in events:
        by_name.setdefault(e.get("event"), []).append(e)
    steady = [m for m in metrics if m.get("phase") == "train" and not m.get("warmup")]
    result = {"state": status.get("state", "timed out" if timed_out else "no status"), "rc": rc,
              "seconds": round(time.monotonic() - started, 1), "message": status.get("message", ""),
              "hint": status.get("hint", ""), "metrics": len(metrics), "run_dir": str(run_dir)}
    start = (by_name.get("train_start") or by_name.get("inference_start") or [{}])[0]
    result.update({k: start.get(k) for k in ("backend", "device", "gpu_name", "world_size", "model_size", "params")})
    summary = (by_name.get("summary") or [{}])[-1]
    result.update({k: summary.get(k) for k in ("steady_samples_per_s", "steady_tokens_per_s", "mem_peak_gib")})
    for key in ("tflops", "mfu"):
        values = [m[key] for m in steady if isinstance(m.get(key), (int, float))]
        result[key] = statistics.median(values) if values else None
    compile_end = by_name.get("compile_end")
    result["compile_s"] = compile_end[0].get("duration_s") if compile_end else None
    result["inference"] = {e["precision"]: {k: e.get(k) for k in ("latency_p50_ms", "latency_p99_ms",
                                                                   "samples_per_s")}
                           for e in by_name.get("inference_summary", [])}
    result["unsupported"] = {e["precision"]: e.get("reason") for e in by_name.get("inference_unsupported", [])}
    gpu = [t for t in telemetry if t.get("kind") == "gpu"]
    result["telemetry"] = {"gpu_samples": len(gpu), "cpu_samples": sum(t.get("kind") == "cpu" for t in telemetry),
                           "max_util_pct": max((t["util_pct"] for t in gpu if t.get("util_pct") is not None),
                                               default=None),
                           "max_mem_used_gib": max((t["mem_used_gib"] for t in gpu
                                                    if t.get("mem_used_gib") is not None), default=None),
                           "max_power_w": max((t["power_w"] for t in gpu if t.get("power_w") is not None),
                                              default=None)}
    if result["state"] != "finished":
        tail = (run_dir / "stderr.log").read_text(errors="replace")[-2000:] if (run_dir / "stderr.log").exists() else ""
        result["stderr_tail"] = tail or said
    return result


def _round(value, digits: int = 4):
    return round(value, digits) if isinstance(value, float) else value


class Check:
    def __init__(self, smoke: bool, budget: Budget, root: Path):
        self.smoke, self.budget, self.root = smoke, budget, root
        self.gpus = 0
        self.sections: dict[str, dict] = {}

    # the runs' common settings: the small model on the CPU smoke; on a GPU the large one (43 M parameters, 8,192
    # tokens a step: the small one left an H200 at 11-15 % utilisation, launch-bound), a step tens of ms
    def _train(self, **over) -> dict:
        cfg = {"workload": "transformer", "model_size": "small" if self.smoke else "large",
               "steps": 12 if self.smoke else 120, "warmup_steps": 4 if self.smoke else 20,
               "batch_size": 4 if self.smoke else 32, "log_every": 1, "precision": "bf16", "compile": "off",
               "nproc_per_node": 1, "backend": "gloo" if self.smoke else "nccl"}
        cfg.update(over)
        return cfg

    def section(self, name: str, cap_s: float, fn) -> None:
        left = self.budget.left()
        if left < min(cap_s, 20):
            self.sections[name] = {"ok": None, "skipped": f"time budget: {left:.0f} s left, needs up to {cap_s:.0f} s"}
            print(f"{name:<11} skipped (time budget)", flush=True)
            return
        started = time.monotonic()
        print(f"{name:<11} ...", end=" ", flush=True)
        try:
            result = fn(min(cap_s, left))
        except Exception as exc:  # a section's own bug must not lose the others' results
            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        result["seconds"] = round(time.monotonic() - started, 1)
        self.sections[name] = result
        print({True: "ok", False: "FAILED", None: "skipped"}[result.get("ok")], f"({result['seconds']} s)",
              result.get("error", ""), flush=True)

    def probe(self, cap: float) -> dict:
        out = subprocess.run([sys.executable, "-m", "remote_runner", "probe"], env=_env(), capture_output=True,
                             text=True, timeout=cap)
        report = json.loads(out.stdout)
        torch_facts = report.get("torch") or {}
        self.gpus = len(report.get("gpus") or [])
        errors = [p for p in report.get("problems", []) if p.get("severity", "error") == "error"]
        return {"ok": bool(torch_facts) and (self.smoke or self.gpus > 0), "gpus": report.get("gpus"),
                "driver": report.get("driver_version"), "driver_cuda": report.get("driver_cuda_version"),
                "torch": torch_facts.get("version"), "cuda_build": torch_facts.get("cuda_build"),
                "nccl": torch_facts.get("nccl"), "best_device": report.get("best_device"),
                "precisions": report.get("precisions"), "compile": report.get("compile"),
                "problems": report.get("problems"), "errors": len(errors)}

    def nvml(self, cap: float) -> dict:
        from remote_runner.telemetry import Nvml

        nv = Nvml.open()
        if nv is None:
            return {"ok": None if self.smoke else False, "error": "" if self.smoke else
                    "NVML did not open (nvidia-ml-py missing or no driver): telemetry falls back to nvidia-smi"}
        try:
            count = nv.device_count()
            return {"ok": count > 0, "count": count, "driver": nv.driver_version(),
                    "names": [nv.name(i) for i in range(count)]}
        finally:
            nv.close()

    def ddp_nccl(self, cap: float) -> dict:
        world = max(1, self.gpus) if not self.smoke else 2
        monitor = self._start_monitor()
        try:
            run = run_runner(self._train(nproc_per_node=world, steps=12 if self.smoke else 200), cap - 5, self.root)
        finally:
            seen = self._stop_monitor(monitor)
        ok = run["state"] == "finished" and seen.get("ok") is not False and (
            self.smoke or (run["backend"] == "nccl" and run["telemetry"]["gpu_samples"] > 0))
        return {"ok": ok, "world_size": world, "run": run, "monitor": seen}

    def _start_monitor(self):
        try:
            return subprocess.Popen([sys.executable, "-m", "remote_runner", "monitor", "--interval", "1"], env=_env(),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        except OSError:
            return None

    def _stop_monitor(self, proc) -> dict:
        """Close the monitor's stdin (the client going away) and read what it sampled during the run."""
        if proc is None:
            return {"ok": False, "error": "could not start"}
        try:
            out, err = proc.communicate(timeout=10)  # closes its stdin: the EOF it must exit on
            exited = True
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            exited = False
        lines = []
        for line in out.splitlines():
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
        if proc.returncode == 2 and "invalid choice" in err:
            return {"ok": None, "error": "this runner has no monitor subcommand"}
        last = lines[-1] if lines else {}
        procs = [p for g in last.get("gpus", []) or [] for p in g.get("processes", []) or []]
        busiest = max((s for s in lines), key=lambda s: sum(len(g.get("processes") or []) for g in s.get("gpus") or []),
                      default={})
        return {"ok": bool(lines) and exited, "samples": len(lines), "exited_on_eof": exited, "rc": proc.returncode,
                "source": last.get("source"), "last_processes": len(procs),
                "max_processes_seen": sum(len(g.get("processes") or []) for g in busiest.get("gpus") or []),
                "sample": busiest or last, "stderr_tail": err[-800:]}

    def precisions(self, cap: float) -> dict:
        runs, per = {}, cap / 4
        for precision in ("fp32", "tf32", "fp16", "bf16"):
            if self.smoke and precision in ("tf32", "fp16"):
                continue  # CPU: tf32 is CUDA's, fp16 autocast on CPU is refused by the probe on old torch
            runs[precision] = run_runner(self._train(precision=precision), per, self.root)
        ok = all(r["state"] == "finished" for r in runs.values())
        rows = {p: {**{k: _round(r.get(k)) for k in ("steady_tokens_per_s", "tflops", "mfu", "mem_peak_gib", "state")},
                    "gpu_util_max_pct": r["telemetry"]["max_util_pct"]} for p, r in runs.items()}
        return {"ok": ok, "rows": rows, "runs": runs}

    def compile(self, cap: float) -> dict:
        runs = {}
        modes = ("off", "default") if self.smoke else ("off", "default", "max-autotune")
        for mode in modes:
            left = self.budget.left()
            if left < 30:
                runs[mode] = {"state": "skipped", "message": f"time budget: {left:.0f} s left"}
                continue
            given = min(cap, left)
            runs[mode] = run_runner(self._train(compile=mode, steps=20 if self.smoke else 200), given, self.root)
            if mode != "off" and runs[mode]["state"] == "timed out":  # a slow autotune is no failed path
                runs[mode].update(state="skipped", message=f"not finished in the {given:.0f} s the check could give "
                                  "it (max-autotune compiled for 209 s on an H200): a larger --budget gives it more")
        eager = runs["off"].get("steady_tokens_per_s")
        rows = {m: {"state": r["state"], "compile_s": _round(r.get("compile_s"), 1),
                    "steady_tokens_per_s": _round(r.get("steady_tokens_per_s"), 1), "mfu": _round(r.get("mfu")),
                    "speedup_vs_eager": _round(r["steady_tokens_per_s"] / eager, 3)
                    if eager and r.get("steady_tokens_per_s") else None} for m, r in runs.items()}
        ok = all(r["state"] in ("finished", "skipped") for r in runs.values())
        return {"ok": ok, "rows": rows, "runs": runs}

    def inference(self, cap: float) -> dict:
        precisions = ["fp32", "bf16", "int8"] if self.smoke else ["fp32", "fp16", "bf16", "int8"]
        run = run_runner(self._train(mode="inference", steps=10 if self.smoke else 200, compile="off",
                                     inference_precisions=precisions), cap, self.root)
        ok = run["state"] == "finished" and set(run["inference"]) | set(run["unsupported"]) == set(precisions)
        return {"ok": ok, "rows": run["inference"], "unsupported": run["unsupported"], "run": run}


def table(sections: dict) -> list[str]:
    """The numbers a README row quotes, one line each."""
    lines = []
    ddp = sections.get("ddp_nccl", {}).get("run")
    if ddp:
        t = ddp["telemetry"]
        lines.append(f"DDP {ddp.get('backend')} x{ddp.get('world_size')}: {ddp['state']}, "
                     f"{_fmt(ddp.get('steady_tokens_per_s'))} tokens/s, GPU util max {_fmt(t['max_util_pct'])} %, "
                     f"power max {_fmt(t['max_power_w'])} W, {t['gpu_samples']} GPU samples")
    for name in ("precisions", "compile"):
        for key, row in sections.get(name, {}).get("rows", {}).items():
            lines.append(f"{name} {key}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in row.items()))
    for key, row in sections.get("inference", {}).get("rows", {}).items():
        lines.append(f"inference {key}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in row.items()))
    return lines


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=float, default=450, help="seconds for the whole check (default 450)")
    parser.add_argument("--cpu-smoke", action="store_true", help="run every section small on the CPU (gloo)")
    parser.add_argument("--only", default="", help="comma list of sections")
    parser.add_argument("--out", default="", help="the JSON file (default $OUT/gpu_check.json or .bench/)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else (Path(os.environ["OUT"]) if os.environ.get("OUT") else REPO / ".bench")
    if out.suffix != ".json":
        out.mkdir(parents=True, exist_ok=True)
        out = out / "gpu_check.json"
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        check = Check(args.cpu_smoke, Budget(args.budget), Path(tmp))
        plan = [("nvml", 20, check.nvml), ("ddp_nccl", 120, check.ddp_nccl), ("precisions", 160, check.precisions),
                ("inference", 60, check.inference), ("compile", 240, check.compile)]  # after the probe, which decides
        only = {s for s in args.only.split(",") if s}
        check.section("probe", 60, check.probe)
        if not check.gpus and not args.cpu_smoke:
            report = {"version": VERSION, "ok": None, "reason": "no NVIDIA GPU here: nothing to check "
                      "(--cpu-smoke runs the sections on the CPU)", "sections": check.sections}
            out.write_text(json.dumps(report, indent=1))
            print(report["reason"], f"\nwrote {out}")
            return 2
        for name, cap, fn in plan:
            if not only or name in only:
                check.section(name, cap, fn)
        ran = [s for s in check.sections.values() if s.get("ok") is not None]
        report = {"version": VERSION, "ok": all(s["ok"] for s in ran), "smoke": args.cpu_smoke,
                  "host": platform.node(), "python": platform.python_version(), "when": time.time(),
                  "budget_s": args.budget, "sections": check.sections}
        out.write_text(json.dumps(report, indent=1, default=str))
    print("\n".join(table(check.sections)))
    failed = [name for name, section in check.sections.items() if section.get("ok") is False]
    print(f"wrote {out}: {'FAILED: ' + ', '.join(failed) if failed else 'all passed'}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
