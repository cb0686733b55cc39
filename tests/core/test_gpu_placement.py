"""Placing a parallel sweep's cells on GPUs of their own (ddpgui.core.gpus.placement), on recorded hosts.

The snapshots are built the way the host monitor builds them, from real captures (tests/fixtures/gpu,
SOURCES.md): 16x V100 (12 idle, 4 busy), 8x GTX TITAN X (1 idle), 8x A40 shared by several users' jobs
(python3.8 on GPU 0, julia on 5-7), 8x A40 with a GPU showing ERR!.  The looks (:class:`HostLooks`) are
taken by the real host monitor on this computer, and replayed from those captures where a GPU host is needed.
"""
import threading
import time

import pytest
from helpers.gpu_snapshots import (
    A40S,
    A40S_ERR,
    TITANS,
    fake_smi_on_path,
    monitor_snapshot,
    query_gpus,
    query_snapshot,
    table_snapshot,
    with_lost,
)

from ddpgui.core.gpus.monitor import MonitorError, snapshot_once
from ddpgui.core.gpus.picker import GpuChoiceError
from ddpgui.core.gpus.placement import (
    GpuRequest,
    HostLooks,
    Look,
    Placement,
    check_request,
    decide,
    gpu_request,
    place,
)
from ddpgui.core.hosts import HostStore
from ddpgui.core.targets.factory import open_target
from ddpgui.core.targets.pool import TargetPool

V100S = "smi_query_v100_sxm3_32gb_x16.txt"  # GPUs 1 (11149 MiB), 4, 7, 12 busy; 8 at 445 MiB; the rest at 5-7 MiB


def test_cells_of_two_processes_fill_sixteen_v100s_each_on_gpus_of_its_own():
    host = query_snapshot(V100S)
    held: set[int] = set()
    picks = []
    for _ in range(6):
        placement = place("gpu1", host, GpuRequest(2), held)
        assert not placement.waiting and not placement.refused and placement.room == 16
        picks.append(placement.gpus)
        held |= set(placement.gpus)
    # free:N's order: least memory (5 MiB before 7 and 445), then the index; never a busy GPU, never one twice
    assert picks == [(0, 3), (5, 6), (9, 10), (11, 13), (14, 15), (2, 8)]
    seventh = place("gpu1", host, GpuRequest(2), held)
    assert seventh.gpus == () and not seventh.refused
    assert seventh.waiting.startswith("waiting for 2 free GPUs on gpu1: 0 free, 12 held by the sweep's running "
                                      "cells, 4 busy (GPU 1: 11149 MiB used, 98% utilised")
    assert seventh.waiting.endswith("; 1 more)") and "GPU 12" not in seventh.waiting  # three named, one counted
    assert seventh.hint == "it starts when GPUs are freed; see who holds them with: ddpgui gpus gpu1"
    # a cell ended: its GPUs are the next one's
    assert place("gpu1", host, GpuRequest(2), held - {5, 6}).gpus == (5, 6)


def test_the_sweeps_own_gpus_are_left_out_though_they_look_free():
    """Just launched, a cell's processes have not taken memory yet: the snapshot shows its GPUs idle."""
    host = query_snapshot(V100S)
    assert place("gpu1", host, GpuRequest(1), held={0}).gpus == (3,)
    assert place("gpu1", host, GpuRequest(1), held={0, 3, 5}).gpus == (6,)


def test_one_idle_titan_x_of_eight_makes_a_two_gpu_cell_wait_naming_whats_busy():
    placement = place("gpu1", query_snapshot(TITANS), GpuRequest(2))
    assert placement.gpus == () and placement.room == 8
    assert placement.waiting.startswith("waiting for 2 free GPUs on gpu1: 1 free (0), 7 busy (GPU 1: 10032 MiB of "
                                        "12206 MiB used, 86% utilised")
    assert "held by" not in placement.waiting and placement.waiting.endswith("; 4 more)")
    assert place("gpu1", query_snapshot(TITANS), GpuRequest(1)).gpus == (0,)


def test_on_a_shared_a40_machine_the_waiting_cell_names_the_other_users_processes():
    host = table_snapshot(A40S)
    assert place("gpu1", host, GpuRequest(4)).gpus == (1, 2, 3, 4)  # only Xorg on them
    placement = place("gpu1", host, GpuRequest(5))
    assert placement.waiting.startswith("waiting for 5 free GPUs on gpu1: 4 free (1,2,3,4), 4 busy (GPU 0: an "
                                        "unknown user's python3.8 (pid 1807667, 29117 MiB); GPU 5: an unknown "
                                        "user's julia (pid 2970647, 42633 MiB)")


def test_a_pool_of_named_gpus_is_all_the_cells_get():
    host = query_snapshot(V100S)
    pool = GpuRequest(2, (0, 1, 2, 3))
    assert place("gpu1", host, pool).gpus == (0, 3)
    waiting = place("gpu1", host, pool, held={0, 3})
    assert waiting.room == 4
    assert waiting.waiting == ("waiting for 2 free GPUs on gpu1 (among GPUs 0,1,2,3): 1 free (2), 2 held by the "
                               "sweep's running cells, 1 busy (GPU 1: 11149 MiB used, 98% utilised (its processes "
                               "are not visible))")


@pytest.mark.parametrize("snapshot, request_, says, hint", [
    (lambda: query_snapshot(V100S), GpuRequest(17), "not launched: it needs 17 GPUs, but gpu1 has 16 that can run it",
     "give the cells fewer processes (--nproc), or sweep on a host with more GPUs"),
    (lambda: query_snapshot(V100S), GpuRequest(3, (0, 1)),
     "not launched: it needs 3 GPUs, but gpu1 has 2 (among GPUs 0,1) that can run it",
     "name more GPUs with --gpus, or give the cells fewer processes (--nproc)"),
    (lambda: monitor_snapshot(with_lost(query_gpus(TITANS), 3), "titans"), GpuRequest(8),
     "not launched: it needs 8 GPUs, but gpu1 has 7 that can run it; a GPU without an index (bus 0000:0B:00.0): "
     "it is lost: Unknown Error", "give the cells fewer processes"),
    (lambda: table_snapshot(A40S_ERR), GpuRequest(8), "not launched: it needs 8 GPUs, but gpu1 has 7 that can run "
     "it; GPU 4: it reports errors: nvidia-smi shows ERR! for temperature, power, utilization", "(--nproc)"),
], ids=["more than the host has", "more than the pool", "a lost gpu", "a gpu showing ERR!"])
def test_a_cell_the_host_could_never_hold_is_refused_not_kept_waiting(snapshot, request_, says, hint):
    placement = place("gpu1", snapshot(), request_)
    assert placement.refused == says and hint in placement.hint
    assert placement.gpus == () and placement.waiting == ""


def test_a_gpu_in_error_is_neither_placed_on_nor_counted_free():
    placement = place("gpu1", table_snapshot(A40S_ERR), GpuRequest(7))
    assert placement.waiting.startswith("waiting for 7 free GPUs on gpu1: 6 free (0,1,3,5,6,7), 1 busy (GPU 2: ")
    assert placement.waiting.endswith(", 1 lost or in error")
    assert place("gpu1", table_snapshot(A40S_ERR), GpuRequest(6)).gpus == (0, 1, 3, 5, 6, 7)


def test_a_cell_that_names_its_gpus_waits_only_for_the_sweeps_own_cells():
    host = query_snapshot(V100S)
    fixed = gpu_request({"gpus": [0, 1], "nproc_per_node": 2})
    assert fixed == GpuRequest(2, (0, 1), fixed=True)
    assert place("gpu1", host, fixed).gpus == (0, 1)  # GPU 1 is busy: warned about when the sweep started
    waiting = place("gpu1", host, fixed, held={1, 5})
    assert waiting.waiting == "waiting for GPUs 0,1 on gpu1: GPU 1 held by the sweep's running cells"
    assert waiting.gpus == ()


@pytest.mark.parametrize("settings, request_", [
    ({}, GpuRequest(1)),
    ({"nproc_per_node": 4}, GpuRequest(4)),
    ({"nproc_per_node": 2, "env": {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}},
     GpuRequest(2, (4, 5, 6, 7))),
    ({"env": {"CUDA_VISIBLE_DEVICES": "GPU-ad466f2f-575d-d949-35e0-9a7d912d974e"}}, None),
    ({"env": {"CUDA_VISIBLE_DEVICES": "MIG-1a2b"}}, None),
    ({"env": {"CUDA_VISIBLE_DEVICES": ""}}, None),
    ({"gpus": "free:2"}, GpuRequest(2)),
    ({"gpus": "0,3"}, GpuRequest(2, (0, 3), fixed=True)),
], ids=["default", "nproc", "a pool", "a uuid", "a mig device", "no gpu", "free text", "indices text"])
def test_what_a_cell_asks_for(settings, request_):
    assert gpu_request(settings) == request_


def test_decisions_before_and_without_a_snapshot():
    cpu = snapshot_once("local", _local_target())
    assert cpu.gpus == ()
    assert decide("local", Look(snapshot=cpu), GpuRequest(1)) is None  # no GPUs: the runner does as without
    assert decide("gpu1", Look(snapshot=query_snapshot(V100S)), None) is None  # the cell places itself
    assert decide("gpu1", Look(), GpuRequest(1)) == Placement()  # the first look is on its way: wait, quietly
    error = decide("gpu1", Look(error=("the host monitor on gpu1 stopped: connection lost", "check the link")),
                   GpuRequest(1))
    assert error.waiting == "waiting to see which GPUs of gpu1 are free: the host monitor on gpu1 stopped: " \
                            "connection lost"
    assert error.hint == "check the link" and error.gpus == ()
    assert decide("gpu1", Look(snapshot=query_snapshot(V100S)), GpuRequest(1), held={0}).gpus == (3,)


@pytest.mark.parametrize("snapshot, request_, says", [
    (lambda: snapshot_once("local", _local_target()), GpuRequest(1), "local has no GPUs"),
    (lambda: query_snapshot(V100S), GpuRequest(1, (0, 16)), "local has no GPU 16 (its GPUs: 0, 1, 2,"),
    (lambda: table_snapshot(A40S_ERR), GpuRequest(1, (3, 4)), "GPU 4 of local cannot run anything: it reports"),
    (lambda: query_snapshot(V100S), GpuRequest(4, (0, 1, 2)), "a cell of 4 processes needs 4 GPUs, but local has "
                                                               "3 (among GPUs 0,1,2) that can run it"),
    (lambda: query_snapshot(TITANS), GpuRequest(9), "a cell of 9 processes needs 9 GPUs, but local has 8 that can"),
], ids=["a cpu host", "a gpu it lacks", "a gpu in error", "more than the pool", "more than the host"])
def test_a_sweep_the_host_can_never_run_is_refused_before_it_starts(snapshot, request_, says):
    with pytest.raises(GpuChoiceError) as caught:
        check_request("local", snapshot(), request_)
    assert says in str(caught.value) and caught.value.hint


def test_a_busy_pool_is_accepted_before_the_start_its_cells_wait():
    check_request("gpu1", query_snapshot(TITANS), GpuRequest(2, (1, 2, 3)))  # all busy: no error


_POOL = []


def _local_target():
    """This computer's target with the runner deployed (the real host monitor runs on it)."""
    if not _POOL:
        hosts = HostStore(None)
        _POOL.append(TargetPool(lambda name: open_target(name, hosts)))
    return lambda: _POOL[0].target("local")


class _Replay:
    """take(host) for HostLooks: recorded snapshots, one per call (the last again), each call counted."""

    def __init__(self, *snapshots):
        self.snapshots, self.calls = list(snapshots), 0

    def __call__(self, host):
        self.calls += 1
        snapshot = self.snapshots[min(self.calls, len(self.snapshots)) - 1]
        if isinstance(snapshot, Exception):
            raise snapshot
        return snapshot


def _settled(looks, host, held=()):
    """(what look() gave, the look it has once the snapshot it started taking has come)."""
    event = threading.Event()
    looks._on_look = event.set
    first = looks.look(host, held)
    if host in looks._taking or event.is_set():
        assert event.wait(60), "no snapshot came"
    return first, looks._looks[host]  # read, not looked at again: with ttl_s=0 that would take another


def test_looks_are_taken_aside_and_reused_until_they_are_old():
    v100s = query_snapshot(V100S)
    replay = _Replay(v100s)
    looks = HostLooks(replay, ttl_s=3600)
    before, after = _settled(looks, "gpu1")
    assert before == Look() and after.snapshot is v100s and replay.calls == 1
    for _ in range(5):
        assert looks.look("gpu1", held={0, 3}).snapshot is v100s  # more held than when it was taken: still good
    assert replay.calls == 1
    old = HostLooks(_Replay(v100s, query_snapshot(TITANS)), ttl_s=0)
    _settled(old, "gpu1")
    _, again = _settled(old, "gpu1")
    assert again.snapshot.gpus[0].name == "GeForce GTX TITAN X"  # older than ttl_s: taken again


def test_gpus_the_sweep_let_go_since_the_look_make_it_taken_again():
    """The look saw the ended cell's processes on its GPUs: a new one shows whether they are free now."""
    replay = _Replay(query_snapshot(V100S), query_snapshot(TITANS))
    looks = HostLooks(replay, ttl_s=3600)
    _settled(looks, "gpu1", held={0, 3})
    assert looks.look("gpu1", held={0, 3, 5}).snapshot.gpus[0].name.startswith("Tesla")
    _, fresh = _settled(looks, "gpu1", held={5})
    assert replay.calls == 2 and fresh.snapshot.gpus[0].name == "GeForce GTX TITAN X"


def test_a_host_without_gpus_is_looked_at_once():
    take_count = []

    def take(host):
        take_count.append(host)
        return snapshot_once(host, _local_target())

    looks = HostLooks(take, ttl_s=0)
    _, look = _settled(looks, "local")
    assert look.snapshot.gpus == () and look.snapshot.cpu.cpu_count
    for _ in range(3):
        assert looks.look("local", held={1}).snapshot is look.snapshot
    assert take_count == ["local"]
    looks.close()


def test_a_look_that_fails_is_said_and_tried_again():
    replay = _Replay(MonitorError("the host monitor on gpu1 stopped: the connection dropped",
                                  "it starts again when the host is looked at again"), query_snapshot(V100S))
    looks = HostLooks(replay, ttl_s=0)
    _, failed = _settled(looks, "gpu1")
    assert failed.snapshot is None and failed.error == ("the host monitor on gpu1 stopped: the connection dropped",
                                                        "it starts again when the host is looked at again")
    assert decide("gpu1", failed, GpuRequest(1)).waiting.startswith("waiting to see which GPUs of gpu1 are free")
    _, good = _settled(looks, "gpu1")
    assert good.snapshot is not None and good.error is None and replay.calls == 2
    looks.close()


def test_a_failed_look_on_a_host_whose_probe_found_no_gpus_is_a_cpu_host():
    failed = Look(error=("the host monitor on box stopped: it printed nothing for 60 s", "it starts again"))
    assert decide("box", failed, GpuRequest(1), probed_gpus=0) is None  # the runner's CPU-capacity path
    for probed in (None, 4):  # the probe cannot say, or found GPUs: the cell waits, saying why
        waiting = decide("box", failed, GpuRequest(1), probed_gpus=probed)
        assert waiting.waiting.startswith("waiting to see which GPUs of box are free: the host monitor on box")
    assert decide("box", Look(), GpuRequest(1), probed_gpus=0) == Placement()  # no error: its snapshot comes
    assert decide("box", Look(snapshot=query_snapshot(V100S)), GpuRequest(1), probed_gpus=0).gpus == (0,)


def _next_look(looks, host, held=(), count=1):
    """The look once ``count`` more snapshots have come from the host's monitor."""
    watch = looks._watches.get(host)
    seen = watch.count if watch is not None else 0
    event = threading.Event()
    looks._on_look = event.set
    look = looks.look(host, held)
    watch = looks._watches[host]
    while watch.count < seen + count:
        assert event.wait(90), "no snapshot came"
        event.clear()
    return look, looks.look(host, held)


def test_one_long_lived_monitor_serves_every_look_and_ends_with_the_looks(tmp_path, monkeypatch):
    """This computer with the fake nvidia-smi (the TITAN X capture): the looks of a long wait come from one
    sampler (its two nvidia-smi), not one per look; a look after GPUs were let go waits for a newer snapshot."""
    smi_log = fake_smi_on_path(tmp_path, monkeypatch)
    looks = HostLooks(open_target=lambda host: _local_target()(), ttl_s=0)
    try:
        first, look = _next_look(looks, "local", held={0})
        assert first == Look() and look.snapshot.gpus[0].name == "GeForce GTX TITAN X"
        assert decide("local", look, GpuRequest(1), held={0}).waiting.startswith("waiting for 1 free GPU on local")
        for _ in range(3):  # several snapshots, each served to the looks
            _, look = _next_look(looks, "local", held={0})
        served = look
        assert looks.look("local", held=()).snapshot is served.snapshot  # GPU 0 let go: not this one again...
        _, newer = _next_look(looks, "local", held=())
        assert newer.snapshot is not served.snapshot and newer.snapshot.seq > served.snapshot.seq  # ...a newer one
        assert decide("local", newer, GpuRequest(1)).gpus == (0,)
        assert looks._watches["local"].monitor.running
    finally:
        looks.close()
    starts = smi_log.read_text().splitlines()
    assert len(starts) == 2, starts  # one sampler: --query-gpu and --query-compute-apps, each started once
    assert not looks._watches["local"].monitor.running
    assert looks.look("local") == newer  # closed: no monitor starts again


def test_a_host_without_gpus_is_looked_at_once_by_its_monitor():
    looks = HostLooks(open_target=lambda host: _local_target()(), ttl_s=0, grace_s=0.1)
    try:
        _, look = _next_look(looks, "local")
        assert look.snapshot.gpus == () and look.snapshot.cpu.cpu_count
        assert looks.look("local", held={1}) is look and not looks._watches["local"].acquired  # let go
        assert decide("local", look, GpuRequest(1)) is None
    finally:
        looks.close()
    assert not looks._watches["local"].monitor.running


def test_a_monitor_that_cannot_start_is_said_started_again_and_a_cpu_host_by_its_probe():
    """The host's target cannot be opened: the look says why, its monitor starts again after ttl_s (a new
    acquire), and a host whose probe found no GPUs is placed as a CPU host (decide gives None)."""
    opened = []

    def unreachable(host):
        opened.append(host)
        raise MonitorError(f"cannot reach {host}", "check its connection")

    looks = HostLooks(open_target=unreachable, ttl_s=0)
    try:
        event = threading.Event()
        looks._on_look = event.set
        assert looks.look("box") == Look()
        assert event.wait(60), "the problem was not reported"
        failed = looks.look("box")
        assert failed.error == ("cannot reach box", "check its connection") and failed.snapshot is None
        assert decide("box", failed, GpuRequest(1), probed_gpus=2).waiting == \
            "waiting to see which GPUs of box are free: cannot reach box"
        assert decide("box", failed, GpuRequest(1), probed_gpus=0) is None
        deadline = time.monotonic() + 60
        while len(opened) < 2:  # ttl_s=0: the failed monitor is started again (once its worker has ended)
            assert time.monotonic() < deadline, "the monitor was not started again"
            looks.look("box")
            time.sleep(0.1)
    finally:
        looks.close()
    assert not looks._watches["box"].monitor.running
