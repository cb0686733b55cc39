"""One run on the live dashboard: its numbers and its curves' buffers, filled from the store and from live records."""
from __future__ import annotations

import time

import numpy as np

from ddpgui.core.runs.live import LiveRun
from ddpgui.core.runs.manager import RunUpdate
from ddpgui.core.runs.nodes import NodeState
from ddpgui.core.runs.protocol import LOG_SPOOLS
from ddpgui.core.runs.traces import TraceData
from remote_runner.spools import METRICS, TELEMETRY

from .buffer import SeriesBuffer, SmoothedBuffer

DEVICE_METRICS = {"GPU utilization %": "util_pct", "GPU memory GiB": "mem_used_gib", "GPU power W": "power_w",
                  "GPU temperature °C": "temp_c"}
CPU_METRICS = {"cpu_pct": "host CPU %", "proc_cpu_pct": "run's processes CPU %"}


def alpha_of(slider_value: int) -> float:
    """Slider 0 (no smoothing) .. 99 (heavy) → EMA weight of the newest point: (1 - v/100)², so the middle of the
    slider already averages about a dozen points (per-step throughput is noisy) and its end thousands."""
    return max(1e-4, (1.0 - slider_value / 100.0) ** 2)


class RunTrace:
    """One run on the dashboard: its live numbers and its curves' buffers.

    Loss points are kept with both their step and their time, so the x axis can switch
    between step, elapsed time (since the run's first host timestamp) and wall clock.
    """

    def __init__(self, run_id: str, color: str, alpha: float):
        self.run_id = run_id
        self.color = color
        self.name = run_id
        self.script = False  # the user's own script: it may print no throughput, and its length may be unknown
        #: A script's or an imported run's records each hold some of its series (a bar's frame, an evaluation, a
        #: TensorBoard step): its loss curve has a point where a record holds the loss, no gap where one does not.
        self.sparse = False
        self.live = LiveRun()
        self.t0: float | None = None
        self.loaded = False
        self.pending: list[RunUpdate] = []
        self.alpha = alpha  # one smoothing for every series
        self.loss = SmoothedBuffer(alpha=alpha)
        self.loss_step_t = SeriesBuffer()  # x: step, y: host time of each loss point
        self.throughput = SmoothedBuffer(alpha=alpha)
        self.device: dict[tuple[str, int, int], SmoothedBuffer] = {}  # (metric, gpu or -1 for CPU, node)
        self.gpu_names: dict[tuple[int, int], str] = {}  # (node, gpu) → name
        self.nodes: list[NodeState] = []  # a multi-node run's nodes (empty for one node)
        self.nodes_asked = 0  # node-state reads asked for, so only the newest one is shown
        self.nodes_retries = 0  # re-reads after the run ended while a node's end was not stored yet
        self.log_node = 0  # whose log tail is shown
        self.logs_loading = False  # its stored tail is being read: live lines are in it
        self.logs: list[str] = []

    def set_alpha(self, alpha: float) -> None:
        """The smoothing of every series (loss, throughput, device)."""
        self.alpha = alpha
        for buffer in (self.loss, self.throughput, *self.device.values()):
            buffer.set_alpha(alpha)

    @property
    def multinode(self) -> bool:
        return len(self.nodes) > 1

    def time_x(self, t, x_axis: str):
        """Host time(s) ``t`` (a number or an array) on the time axis: as they are, or since the run's start."""
        return t if x_axis == "wall clock" else t - (self.t0 or 0.0)

    def apply(self, data: TraceData, x_axis: str) -> None:
        """Fill the buffers from the stored series (vectorised: one extend per curve)."""
        run, metrics, telemetry = data.run, data.metrics, data.telemetry
        cfg = run.config or {}
        self.name = run.name or run.id
        self.script = cfg.get("mode") == "script"
        self.sparse = cfg.get("mode") in ("script", "imported")
        self.live = LiveRun.of_run(run)  # its length, state, summary, and start and end (elapsed: run_elapsed_s)
        self.nodes = data.nodes
        if (run.environment or {}).get("gpu"):
            self.gpu_names[0, 0] = run.environment["gpu"]
        starts = [e["t"] for e in data.events if e.get("event") == "started" and e.get("t")]
        for columns in (metrics, *telemetry.values()):
            if len(columns.get("t", ())):
                starts.append(float(columns["t"][0]))
        self.t0 = min(starts) if starts else None
        warm_t = None
        steps = metrics.get("step")
        if steps is not None and len(steps):
            train = np.ones(len(steps), dtype=bool)
            phase = metrics.get("phase")
            if phase is not None and phase.dtype == object:
                train = phase != "inference"
            t = metrics["t"][train]
            loss = metrics.get("loss", np.full(len(train), np.nan))[train]
            given = np.isfinite(loss) if self.sparse else np.ones(len(loss), dtype=bool)
            self.loss_step_t.extend(steps[train][given], t[given])
            self.loss.extend((steps[train] if x_axis == "step" else self.time_x(t, x_axis))[given], loss[given])
            rate = metrics.get("samples_per_s")
            if rate is not None:
                self.throughput.extend(self.time_x(t, x_axis), rate[train])
            self.live.step = int(steps[-1])
            for key in ("loss", "samples_per_s", "mem_peak_gib"):  # the last value given: a script's last
                column = metrics.get(key)  # record may hold an evaluation's values only
                finite = np.flatnonzero(np.isfinite(column)) if column is not None and column.dtype == np.float64 else ()
                if len(finite):
                    setattr(self.live, key, float(column[finite[-1]]))
            self.live.started_t = float(metrics["t"][0])
            self.live.last_t = float(metrics["t"][-1])
            self.live.first_metric = (float(metrics["t"][0]), int(steps[0]))
            self._last_bar(metrics)
            warmup = metrics.get("warmup")
            past = np.ones(len(t), dtype=bool) if warmup is None else np.array(
                [v is False or v == 0 for v in warmup[train].tolist()], dtype=bool)
            if past.any():
                self.live.warm, warm_t = True, float(t[past][0])
            self._recent_rates(metrics, train)
        for event in data.events:
            self.live.add_event(event)
        self.live.state, self.live.message, self.live.hint = run.state, run.message, run.hint
        for node, columns in telemetry.items():
            if len(columns.get("t", ())):
                self._load_telemetry(columns, x_axis, warm_t, node)
        self.set_logs(data.logs)
        self.loaded = True

    def _last_bar(self, metrics: dict[str, np.ndarray]) -> None:
        """A script's progress bar as its last stored frame drew it (position, total, ETA), as live records set it."""
        totals = metrics.get("bar_total")
        drawn = np.flatnonzero(np.isfinite(totals)) if totals is not None and totals.dtype == np.float64 else ()
        if not len(drawn):
            return
        i = int(drawn[-1])

        def value(key: str) -> float | None:
            column = metrics.get(key)
            ok = column is not None and column.dtype == np.float64 and np.isfinite(column[i])
            return float(column[i]) if ok else None

        n = value("printed_step")
        self.live.bar = (n if n is not None else int(metrics["step"][i]), float(totals[i]), value("eta_s"))

    def _recent_rates(self, metrics: dict[str, np.ndarray], train: np.ndarray) -> None:
        """The header's windowed throughput of a run re-selected while live: its last stored records, replayed."""
        warm_up = metrics.get("warmup")

        def value(key: str, i: int) -> float | None:
            column = metrics.get(key)
            ok = column is not None and column.dtype == np.float64 and column[i] == column[i]
            return float(column[i]) if ok else None

        for i in np.flatnonzero(train)[-256:].tolist():
            flag = warm_up[i] if warm_up is not None else False
            warm = flag is not None and flag == flag and bool(flag)  # None or NaN: not recorded, not warm-up
            self.live.add_interval(float(metrics["t"][i]), int(metrics["step"][i]), value("global_batch", i),
                                   value("samples_per_s", i), warm)

    def set_logs(self, logs: dict[str, str]) -> None:
        self.logs = [logs[s].rstrip("\n") for s in LOG_SPOOLS if logs.get(s)]

    def _load_telemetry(self, telemetry: dict[str, np.ndarray], x_axis: str, warm_t: float | None,
                        node: int = 0) -> None:
        t = self.time_x(telemetry["t"], x_axis)
        kinds = telemetry.get("kind")
        is_gpu = kinds == "gpu" if kinds is not None else np.zeros(len(t), dtype=bool)
        groups = [(-1, ~is_gpu, CPU_METRICS)]
        if is_gpu.any():
            gpu_ids = np.nan_to_num(telemetry.get("gpu", np.zeros(len(t))), nan=0.0).astype(int)
            names = telemetry.get("name")
            for gpu in np.unique(gpu_ids[is_gpu]).tolist():
                rows = is_gpu & (gpu_ids == gpu)
                named = [n for n in names[rows] if n] if names is not None else []
                if named:
                    self.gpu_names[node, gpu] = named[-1]
                groups.append((gpu, rows, DEVICE_METRICS.values()))
            util = telemetry.get("util_pct")
            if util is not None and util.dtype == np.float64 and warm_t is not None:
                after = is_gpu & ~np.isnan(util) & (telemetry["t"] >= warm_t)
                self.live.util_sum += float(util[after].sum())  # over every node's GPUs
                self.live.util_n += int(after.sum())
        for gpu, rows, metrics in groups:
            for metric in metrics:
                values = telemetry.get(metric)
                if values is None or values.dtype != np.float64:
                    continue
                keep = rows & ~np.isnan(values)
                if keep.any():
                    self.device.setdefault((metric, gpu, node), SmoothedBuffer(alpha=self.alpha)).extend(
                        t[keep], values[keep])

    def add_records(self, spool: str, records: list[dict], x_axis: str, node: int = 0) -> tuple[bool, bool, bool]:
        """Live records (of ``node``) into the buffers; returns (metrics changed, device changed, new device curve)."""
        metrics_changed = device_changed = new_curve = False
        for rec in records:
            self.live.add(spool, rec)
            t = rec.get("t")
            if self.t0 is None and t is not None:
                self.t0 = t
            if spool == METRICS and rec.get("step") is not None and rec.get("phase") != "inference":
                t = time.time() if t is None else t
                loss = rec.get("loss")
                if not self.sparse or (loss is not None and np.isfinite(loss)):
                    self.loss_step_t.append(rec["step"], t)
                    self.loss.append(rec["step"] if x_axis == "step" else self.time_x(t, x_axis),
                                     np.nan if loss is None else loss)
                if rec.get("samples_per_s") is not None:
                    self.throughput.append(self.time_x(t, x_axis), rec["samples_per_s"])
                metrics_changed = True
            elif spool == TELEMETRY:
                device_changed = True
                new_curve |= self._add_telemetry(rec, x_axis, node)
        return metrics_changed, device_changed, new_curve

    def _add_telemetry(self, rec: dict, x_axis: str, node: int = 0) -> bool:
        t = self.time_x(float(rec.get("t", time.time())), x_axis)
        if rec.get("kind") == "gpu":
            gpu = int(rec.get("gpu", 0) or 0)
            if rec.get("name"):
                self.gpu_names[node, gpu] = rec["name"]
            metrics = DEVICE_METRICS.values()
        else:
            gpu, metrics = -1, CPU_METRICS
        new = False
        for metric in metrics:
            value = rec.get(metric)
            if value is None or (isinstance(value, float) and value != value):
                continue
            key = (metric, gpu, node)
            if key not in self.device:
                self.device[key] = SmoothedBuffer(alpha=self.alpha)
                new = True
            self.device[key].append(t, value)
        return new

    def set_x_axis(self, old: str, new: str) -> None:
        """Move every buffer to another x axis (vectorised)."""
        if old == new:
            return
        shift = (self.t0 or 0.0) * ((new == "wall clock") - (old == "wall clock"))
        if new == "step":
            self.loss.set_x(self.loss_step_t.x)
        else:
            self.loss.set_x(self.time_x(self.loss_step_t.y, new))
        if shift:
            for buffer in (self.throughput, *self.device.values()):
                buffer.set_x(buffer.x + shift)
