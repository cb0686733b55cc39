"""Stall detection (ddpgui.core.runs.stalls) on recorded runs.

``tests/fixtures/stalls/updates.jsonl`` is what the RunManager's listeners heard of a real run of
tests/fixtures/scripts/stalling on this computer (``record.py`` there): 15 steps of 0.25 s, 20 s of silent sleep
with its processes alive, 15 steps, "running evaluation on the validation set" and 20 s of silent work, 15
steps.  ``tests/fixtures/compile`` is a real torch.compile run's metrics and events.  GPU records, which a CPU
machine cannot record, are written in the runner's telemetry format.
"""
import json
import os

import pytest

from ddpgui.core.runs.stalls import (
    ENDED,
    OK,
    PHASE,
    UNKNOWN,
    StallDetector,
    StallPolicy,
    StallPolicyError,
    auto_stop_at,
    auto_stop_due,
    format_gpus,
    format_span,
    run_gpus,
)

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
SMALL = StallPolicy(silence_factor=5, min_silence_s=3, gpu_idle_s=60)


def recorded_updates(drop_line=None):
    with open(os.path.join(FIXTURES, "stalls", "updates.jsonl")) as fh:
        updates = [json.loads(line) for line in fh]
    if drop_line:
        for u in updates:
            u["logs"] = {k: v.replace(drop_line + "\n", "") for k, v in u["logs"].items()}
    return updates


def replay(updates, policy=SMALL, tick=0.25):
    """Feed the recorded updates in order, deciding every ``tick`` seconds in between (and after each update);
    returns [(host time, decision)], and the metric records by step."""
    detector = StallDetector(policy)
    decisions, steps = [], {}
    clock = updates[0]["arrived"]
    for u in updates:
        while clock < u["arrived"]:
            decisions.append((detector.host_now(clock), detector.decide(detector.host_now(clock))))
            clock += tick
        detector.add_records(u["records"], u["node"], u["arrived"])
        for spool, text in u["logs"].items():
            detector.add_output(spool, text.encode(), u["node"], u["arrived"])
        if u["state"] in ("finished", "failed", "stopped"):
            detector.ended = u["state"]
        for rec in u["records"].get("metrics.jsonl", ()):
            steps[rec["step"]] = rec
        decisions.append((detector.host_now(u["arrived"]), detector.decide(detector.host_now(u["arrived"]))))
    return decisions, steps, detector


def between(decisions, start, end):
    return [d for t, d in decisions if start <= t < end]


def test_a_recorded_run_that_sleeps_mid_run_is_flagged_while_silent_and_cleared_after():
    decisions, steps, detector = replay(recorded_updates())
    usual = detector.usual_interval_s
    assert 0.2 < usual < 0.35  # the script's own cadence: one line every 0.25 s
    stalls = [d for d in between(decisions, steps[15]["t"], steps[16]["t"]) if d.stalled]
    assert stalls, [d.reason for _, d in decisions]
    first = stalls[0]
    assert first.kind == "silence" and first.since == steps[15]["t"]  # silent since its last metric record
    assert first.flagged_at == pytest.approx(steps[15]["t"] + SMALL.silence_limit_s(usual))
    assert first.reason.startswith("no metrics for ") and "usually every 0." in first.reason, first.reason
    assert first.reason.endswith("; its 3 processes (supervisor, torchrun, ranks) alive"), first.reason
    assert first.label == "stalled?" and first.last_lines[-1] == "step 15 loss 0.89684"
    longest = stalls[-1]
    assert longest.reason.startswith("no metrics for 19 s") or longest.reason.startswith("no metrics for 20 s"), \
        longest.reason
    # the first stretch, before the sleep, is no stall, nor is the start-up before the first metric
    assert not any(d.stalled for d in between(decisions, 0, steps[15]["t"] + 3))
    assert {d.reason for d in between(decisions, 0, steps[1]["t"]) if d.state == OK} >= {"no metrics yet"}
    # the metrics came back: cleared
    after = between(decisions, steps[16]["t"], steps[30]["t"])
    assert after and all(d.state == OK for d in after), [d.reason for d in after]
    assert decisions[-1][1].state == ENDED


def test_an_evaluation_the_script_announced_is_no_stall():
    decisions, steps, _ = replay(recorded_updates())
    evaluation = between(decisions, steps[30]["t"] + 0.5, steps[31]["t"])
    assert len(evaluation) > 60  # 20 s of it, judged every 0.25 s
    assert all(d.state == PHASE and d.label == "in evaluation" for d in evaluation), \
        {d.reason for d in evaluation if d.state != PHASE}
    assert evaluation[-1].reason.startswith("in evaluation (no metrics expected), 19 s so far") or \
        evaluation[-1].reason.startswith("in evaluation (no metrics expected), 20 s so far"), evaluation[-1].reason
    assert all(d.state == OK for d in between(decisions, steps[31]["t"], steps[45]["t"]))


def test_the_same_silence_without_the_announcement_is_flagged():
    decisions, steps, _ = replay(recorded_updates(drop_line="running evaluation on the validation set"))
    silent = between(decisions, steps[30]["t"], steps[31]["t"])
    assert any(d.stalled and d.since == steps[30]["t"] for d in silent)


def test_a_progress_line_of_the_script_is_a_sign_of_life():
    detector = StallDetector(SMALL)
    t = 1000.0
    for step in range(1, 11):
        detector.add("metrics.jsonl", {"t": t + step, "step": step, "loss": 1.0})
        detector.add("telemetry.jsonl", {"t": t + step, "kind": "cpu", "nprocs": 2})
    detector.add("telemetry.jsonl", {"t": t + 30, "kind": "cpu", "nprocs": 2})
    assert detector.decide(t + 30).stalled  # 20 s silent, usually every 1 s
    detector.add_output("stdout.log", b"tokenizing shard 3 of 10", arrived=t + 29)
    assert detector.decide(t + 30).stalled  # a partial line is not a line yet
    detector.add_output("stdout.log", b"\n", arrived=t + 29)
    decision = detector.decide(t + 30)
    assert decision.state == OK and decision.last_lines[-1] == "tokenizing shard 3 of 10"
    detector.add_output("stdout.log", b"step 11 loss 0.5\n", arrived=t + 30)  # a metric line: the metric counts
    detector.add("telemetry.jsonl", {"t": t + 40, "kind": "cpu", "nprocs": 2})
    stalled = detector.decide(t + 40)
    assert stalled.stalled and stalled.since == t + 29 and ", last output 11 s ago;" in stalled.reason, stalled.reason
    detector.add_output("stderr.log", b"W1201 NCCL watchdog still waiting\n", arrived=t + 40)  # stderr: no progress
    assert detector.decide(t + 40).stalled


def test_phase_events_open_and_close_a_phase():
    detector = StallDetector(SMALL)
    for step in range(1, 11):
        detector.add("metrics.jsonl", {"t": 100.0 + step, "step": step})
    detector.add("events.jsonl", {"t": 110.5, "event": "phase_start", "phase": "checkpoint"})
    detector.add("telemetry.jsonl", {"t": 200.0, "kind": "cpu", "nprocs": 3})
    decision = detector.decide(200.0)
    assert (decision.state, decision.label, decision.phase) == (PHASE, "in checkpoint", "checkpoint")
    detector.add("events.jsonl", {"t": 201.0, "event": "phase_end", "phase": "checkpoint"})
    detector.add("telemetry.jsonl", {"t": 210.0, "kind": "cpu", "nprocs": 3})
    assert detector.decide(203.0).state == OK
    assert detector.decide(210.0).stalled and detector.decide(210.0).since == 201.0
    detector.add("events.jsonl", {"t": 210.5, "event": "eval_start"})
    assert detector.decide(210.5).label == "in evaluation"


def compile_run(stretch_compile_s=0.0):
    """The recorded torch.compile run, its compile made ``stretch_compile_s`` longer, with CPU records every
    0.5 s (the fixture was recorded without a supervisor)."""
    def load(name):
        with open(os.path.join(FIXTURES, "compile", name)) as fh:
            return [json.loads(line) for line in fh]
    events, metrics = load("events.jsonl"), load("metrics.jsonl")
    compile_start = next(e["t"] for e in events if e["event"] == "compile_start")
    for rec in events + metrics:
        if rec["t"] > compile_start:
            rec["t"] += stretch_compile_s
    return events, metrics, compile_start


def cpu_records(start, end, nprocs=3):
    t = start
    while t <= end + 1e-9:
        yield {"t": t, "kind": "cpu", "nprocs": nprocs, "proc_cpu_pct": 99.0}
        t += 0.5


def test_a_35_s_compile_and_the_warm_up_are_not_part_of_the_usual_interval():
    events, metrics, compile_start = compile_run(stretch_compile_s=33.0)  # 2 s recorded + 33: CPU's 35 s
    detector = StallDetector(SMALL)
    timeline = sorted([("events.jsonl", e) for e in events] + [("metrics.jsonl", m) for m in metrics]
                      + [("telemetry.jsonl", c) for c in cpu_records(events[0]["t"], metrics[-1]["t"] + 60)],
                      key=lambda item: item[1]["t"])
    compiling = []
    for spool, rec in timeline:
        detector.add(spool, rec)
        if spool == "telemetry.jsonl" and compile_start < rec["t"] < compile_start + 35:
            compiling.append(detector.decide(rec["t"]))
    assert len(compiling) > 60 and all(d.state == PHASE and d.label == "compiling" for d in compiling)
    steady = [m["t"] for m in metrics if not m["warmup"]]
    gaps = sorted(b - a for a, b in zip(steady, steady[1:]))
    assert len(detector.intervals) == len(gaps)  # the compile step and the warm-up intervals left out
    assert detector.usual_interval_s == pytest.approx(gaps[len(gaps) // 2] if len(gaps) % 2
                                                      else (gaps[len(gaps) // 2 - 1] + gaps[len(gaps) // 2]) / 2)
    # the run ends with its summary, then nothing: 3 s later (min_silence_s) it is silent far past its cadence
    assert not detector.decide(metrics[-1]["t"] + 2.9).stalled
    assert detector.decide(metrics[-1]["t"] + 3.1).stalled
    detector.add("events.jsonl", {"t": metrics[-1]["t"] + 4, "event": "finished"})
    assert detector.decide(metrics[-1]["t"] + 5).state == ENDED


def gpu(t, index, util):
    return {"t": t, "kind": "gpu", "gpu": index, "name": "NVIDIA A100-SXM4-80GB", "util_pct": util,
            "mem_used_gib": 30.0, "mem_total_gib": 80.0, "power_w": 80.0, "temp_c": 40, "sm_clock_mhz": 1410}


def gpu_run(detector, until, util, metrics_until, gpus=(0, 1), start=0.0, busy=()):
    """One record per second: metrics until ``metrics_until`` (warm-up for the first 5), CPU, and ``util(t)`` on
    each GPU in ``gpus`` (GPUs in ``busy`` at 97%)."""
    t = start
    while t <= until:
        if t <= metrics_until:
            detector.add("metrics.jsonl", {"t": t, "step": int(t) + 1, "warmup": t < 5})
        detector.add("telemetry.jsonl", {"t": t, "kind": "cpu", "nprocs": 9})
        for index in gpus:
            detector.add("telemetry.jsonl", gpu(t, index, 97 if index in busy else util(t)))
        t += 1.0


def test_gpus_near_zero_for_minutes_after_warm_up_are_flagged():
    policy = StallPolicy(min_silence_s=3600, gpu_idle_s=120)  # the silence rule out of the way
    detector = StallDetector(policy)
    gpu_run(detector, until=400, util=lambda t: 95 if t < 100 else 0, metrics_until=100)
    decision = detector.decide(400.0)
    assert decision.stalled and decision.kind == "gpu_idle" and decision.since == 100.0
    assert decision.flagged_at == 220.0
    assert decision.reason == "GPUs 0-1 near 0% (below 5%) for 5 min after warm-up; processes alive"
    assert not detector.decide(219.0).stalled


def test_idle_gpus_while_metrics_still_arrive_or_before_warm_up_are_no_stall():
    policy = StallPolicy(min_silence_s=3600, gpu_idle_s=120)
    flowing = StallDetector(policy)
    gpu_run(flowing, until=400, util=lambda t: 0, metrics_until=400)  # a run on the CPU by mistake: progress
    assert flowing.decide(400.0).state == OK
    warming = StallDetector(policy)
    gpu_run(warming, until=400, util=lambda t: 0, metrics_until=0)  # never past warm-up (step 1 is warm-up)
    assert warming.decide(400.0).state == OK
    one_busy = StallDetector(policy)
    gpu_run(one_busy, until=400, util=lambda t: 95 if t < 100 else 0, metrics_until=100, busy=(1,))
    assert one_busy.decide(400.0).state == OK


def test_only_the_runs_own_gpus_count():
    config = {"nproc_per_node": 2, "env": {"CUDA_VISIBLE_DEVICES": "2,3,5"}}
    assert run_gpus(config) == [2, 3]
    assert run_gpus({"nproc_per_node": 2}) is None
    assert run_gpus({"env": {"CUDA_VISIBLE_DEVICES": "GPU-5e1b2c3d"}}) is None
    detector = StallDetector.for_config(config, StallPolicy(min_silence_s=3600, gpu_idle_s=120))
    # another user's job keeps GPUs 0-1 busy; the run's GPUs 2-3 went idle
    gpu_run(detector, until=400, util=lambda t: 95 if t < 100 else 0, metrics_until=100, gpus=(0, 1, 2, 3),
            busy=(0, 1))
    decision = detector.decide(400.0)
    assert decision.stalled and decision.reason.startswith("GPUs 2-3 near 0%"), decision.reason


def test_no_news_from_the_host_is_not_judged_a_stall():
    detector = StallDetector(SMALL)
    assert detector.decide(0.0).state == UNKNOWN  # nothing yet
    for step in range(1, 11):
        detector.add("metrics.jsonl", {"t": float(step), "step": step})
        detector.add("telemetry.jsonl", {"t": float(step), "kind": "cpu", "nprocs": 2})
    decision = detector.decide(300.0)  # the link dropped at t=10: telemetry stopped too
    assert decision.state == UNKNOWN and decision.reason.startswith("nothing from the host for 4 min 50 s")
    detector.add("telemetry.jsonl", {"t": 300.0, "kind": "cpu", "nprocs": 0})
    assert detector.decide(300.0).reason == "its processes have ended; waiting for the run's final state"


def test_the_host_clock_is_read_from_when_records_arrive():
    detector = StallDetector(SMALL, clock=lambda: 5000.0)  # this computer is 4000 s ahead of the host
    for step in range(1, 11):
        detector.add("metrics.jsonl", {"t": 1000.0 + step, "step": step}, arrived=4000.0 + step + 0.2)
        detector.add("telemetry.jsonl", {"t": 1000.0 + step, "kind": "cpu", "nprocs": 2},
                     arrived=4000.0 + step + 0.1)
    assert detector.host_now(4011.1) == pytest.approx(1011.0)
    assert detector.decide(detector.host_now(4012.1)).state == OK
    assert detector.decide().state == UNKNOWN  # the clock says 5000: nothing from the host for 989 s


def test_policy_settings_round_trip_and_refusals():
    policy = StallPolicy(silence_factor=4, min_silence_s=60, auto_stop_after_s=900)
    assert StallPolicy.from_dict(policy.to_dict()) == policy
    # QSettings hands values back as text
    assert StallPolicy.from_dict({"enabled": "false", "silence_factor": "4", "min_silence_s": "60.5",
                                  "auto_stop_after_s": "", "unknown": "x"}) == \
        StallPolicy(enabled=False, silence_factor=4.0, min_silence_s=60.5)
    assert StallPolicy().auto_stop_after_s is None and StallPolicy().enabled
    for data, field in (({"silence_factor": "0.5"}, "silence_factor"), ({"gpu_idle_pct": 150}, "gpu_idle_pct"),
                        ({"gpu_idle_s": "soon"}, "gpu_idle_s"), ({"enabled": "perhaps"}, "enabled"),
                        ({"auto_stop_after_s": -1}, "auto_stop_after_s"), ({"min_silence_s": "nan"}, "min_silence_s")):
        with pytest.raises(StallPolicyError) as info:
            StallPolicy.from_dict(data)
        assert info.value.field == field and info.value.hint.startswith("give "), (field, info.value.hint)
    assert StallDetector(StallPolicy(enabled=False)).decide(0.0).state == "off"


def test_automatic_stop_after_the_grace_period_only_when_asked():
    detector = StallDetector(SMALL)
    for step in range(1, 11):
        detector.add("metrics.jsonl", {"t": float(step), "step": step})
    detector.add("telemetry.jsonl", {"t": 100.0, "kind": "cpu", "nprocs": 2})
    decision = detector.decide(100.0)
    assert decision.stalled and decision.flagged_at == 15.0  # 5 × its 1 s interval after the last
    assert auto_stop_at(decision, SMALL) is None  # off by default
    policy = StallPolicy(silence_factor=5, min_silence_s=3, auto_stop_after_s=60)
    assert auto_stop_at(decision, policy) == 75.0
    assert not auto_stop_due(decision, policy, 74.9) and auto_stop_due(decision, policy, 75.0)
    assert auto_stop_at(detector.decide(11.0), policy) is None  # not stalled: nothing to stop


def test_words():
    assert [format_span(s) for s in (0.8, 9.94, 12.4, 60, 250, 3600, 7500)] == \
        ["0.8 s", "9.9 s", "12 s", "1 min", "4 min 10 s", "1 h", "2 h 5 min"]
    assert [format_gpus(g) for g in ([3], [0, 1], [5, 0, 1, 2], [0, 2])] == \
        ["GPU 3", "GPUs 0-1", "GPUs 0-2, 5", "GPUs 0, 2"]


def test_a_phase_is_not_part_of_the_usual_interval():
    _, _, announced = replay(recorded_updates())
    # 45 records, 44 intervals: the silent sleep counts (nothing said it was a phase), the evaluation does not
    assert len(announced.intervals) == 43 and sum(i > 10 for i in announced.intervals) == 1
    _, _, silent = replay(recorded_updates(drop_line="running evaluation on the validation set"))
    assert len(silent.intervals) == 44 and sum(i > 10 for i in silent.intervals) == 2


def test_an_inference_run_warming_up_its_next_precision_is_a_phase():
    detector = StallDetector(SMALL)
    detector.add("events.jsonl", {"t": 0.0, "event": "inference_start"})
    for batch in range(20):
        detector.add("metrics.jsonl", {"t": 10.0 + 0.1 * batch, "phase": "inference", "precision": "fp32",
                                       "step": batch + 1})
    detector.add("events.jsonl", {"t": 12.0, "event": "inference_summary", "precision": "fp32"})
    detector.add("telemetry.jsonl", {"t": 47.0, "kind": "cpu", "nprocs": 3})
    decision = detector.decide(47.0)  # 35 s compiling fp16, no records
    assert (decision.state, decision.label) == (PHASE, "warming up"), decision.reason
    detector.add("metrics.jsonl", {"t": 47.5, "phase": "inference", "precision": "fp16", "step": 1})
    assert detector.decide(47.5).state == OK and max(detector.intervals) < 0.2


def test_a_multi_node_run_is_judged_on_every_node():
    detector = StallDetector(SMALL)
    for step in range(1, 11):
        detector.add("metrics.jsonl", {"t": float(step), "step": step})
        for node in (0, 1):
            detector.add("telemetry.jsonl", {"t": float(step), "kind": "cpu", "nprocs": 3}, node=node)
    detector.add("telemetry.jsonl", {"t": 40.0, "kind": "cpu", "nprocs": 3}, node=0)
    decision = detector.decide(40.0)  # node 1 has said nothing for 30 s: its link, not a stall
    assert decision.state == UNKNOWN and decision.reason.startswith("nothing from node 1 for 30 s"), decision.reason
    detector.add("telemetry.jsonl", {"t": 40.0, "kind": "cpu", "nprocs": 3}, node=1)
    assert detector.decide(40.0).reason.endswith("its 6 processes (supervisor, torchrun, ranks) alive")
