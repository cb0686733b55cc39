"""Idle priced hosts: reminded only when priced, unused for N minutes, and nothing runs there."""
import pytest

from ddpgui.core.hosts import HostProfile
from ddpgui.core.runs.reminders import idle_priced_hosts
from ddpgui.core.store import RunStore

NOW = 1_764_500_000.0


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.db") as s:
        yield s


def _profiles():
    return [HostProfile("rented", hostname="gpu.cloud", price_per_hour=3.0),
            HostProfile("lab", hostname="lab.uni"),  # no price: never reminded
            HostProfile("busy", hostname="b.cloud", price_per_hour=1.0),
            HostProfile("fresh", hostname="f.cloud", price_per_hour=2.0),
            HostProfile("never", hostname="n.cloud", price_per_hour=2.0)]


def test_only_priced_idle_hosts_past_the_limit_are_reported(store):
    store.create_run("r1", hosts=["rented"], state="finished")
    store.update_run("r1", ended_at=NOW - 40 * 60)
    store.create_run("r2", hosts=["lab"], state="finished")
    store.update_run("r2", ended_at=NOW - 99 * 60)
    store.create_run("r3", hosts=["busy"], state="finished")
    store.update_run("r3", ended_at=NOW - 99 * 60)
    store.create_run("r4", hosts=["busy"], state="running")  # a run still going: not idle
    store.create_run("r5", hosts=["fresh"], state="failed")
    store.update_run("r5", ended_at=NOW - 5 * 60)  # ended 5 min ago: under the limit
    idle = idle_priced_hosts(store, _profiles(), idle_minutes=15, now=NOW)
    assert [h.host for h in idle] == ["rented"]
    rented = idle[0]
    assert rented.idle_s == 40 * 60 and rented.idle_cost == pytest.approx(2.0)  # 3/h for 40 min
    assert "rented" in rented.message() and "3/h" in rented.message() and "2.00" in rented.message()


def test_a_recent_connection_counts_as_use_and_zero_minutes_disables(store):
    store.create_run("r1", hosts=["rented"], state="finished")
    store.update_run("r1", ended_at=NOW - 40 * 60)
    assert idle_priced_hosts(store, _profiles(), 15, last_contact={"rented": NOW - 60}, now=NOW) == []
    assert [h.host for h in idle_priced_hosts(store, _profiles(), 15, last_contact={"never": NOW - 20 * 60},
                                              now=NOW)] == ["rented", "never"]
    assert idle_priced_hosts(store, _profiles(), 0, now=NOW) == []


def test_a_multi_node_run_keeps_every_node_busy(store):
    store.create_run("r1", hosts=["fresh", "rented"], state="running")
    store.create_run("r0", hosts=["rented"], state="finished")
    store.update_run("r0", ended_at=NOW - 60 * 60)
    assert idle_priced_hosts(store, _profiles(), 15, now=NOW) == []
