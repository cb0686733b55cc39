"""A multi-node run's state is the worst of its nodes'; the node that failed first is named, not its echo."""
from ddpgui.core.hosts import HostProfile, local_profile
from ddpgui.core.runs.multinode import endpoint, rendezvous_address
from ddpgui.core.runs.nodes import NodeState, first_failure, outcome

KILLED = dict(state="failed", failure="killed", message="Rank 2 was killed with SIGKILL.", hint="check dmesg",
              failed_rank=2, exit_code=1)
ECHO = dict(state="failed", failure="peer_lost", message="Rank 0 lost its connection to another rank.",
            hint="look at the other nodes", failed_rank=0, exit_code=1)


def node(i: int, t: float = 0.0, **fields) -> NodeState:
    return NodeState(i, f"h{i}", f"/runs/r/{i}", t=t, **fields)


def test_no_outcome_while_a_node_runs():
    assert outcome([node(0, state="running"), node(1, 5.0, **KILLED)]) is None


def test_the_failed_node_is_named_even_when_its_echo_ended_first():
    states = [node(0, 10.0, **ECHO), node(1, 11.0, **KILLED)]
    assert first_failure(states).node == 1
    final = outcome(states)
    assert final["state"] == "failed" and final["message"] == "node 1 (h1) failed: Rank 2 was killed with SIGKILL."
    assert final["hint"] == "check dmesg" and final["failed_rank"] == 2 and final["ended_at"] == 11.0


def test_nodes_stopped_by_the_client_after_a_failure_leave_the_run_failed():
    final = outcome([node(0, 12.0, state="stopped", message="stopped on request"), node(1, 11.0, **KILLED)])
    assert final["state"] == "failed" and final["message"].startswith("node 1 (h1) failed: ")


def test_a_stop_on_request_is_not_a_failure_when_the_others_only_lost_their_peers():
    final = outcome([node(0, 3.0, state="stopped", message="stopped on request"), node(1, 2.0, **ECHO)])
    assert final["state"] == "stopped" and final["failure"] is None


def test_only_echoes_still_fail_the_run_naming_the_first():
    final = outcome([node(0, 7.0, **ECHO), node(1, 6.0, **ECHO)])
    assert final["state"] == "failed" and final["message"].startswith("node 1 (h1) failed: ")


def test_all_finished_is_finished():
    final = outcome([node(0, 1.0, state="finished"), node(1, 2.0, state="finished")])
    assert final["state"] == "finished" and final["message"] == "" and final["ended_at"] == 2.0


def test_rendezvous_address_of_node_0():
    assert rendezvous_address(local_profile()) == ("127.0.0.1", 0)
    gpu = HostProfile(name="gpu", hostname="gpu-1.example.org")
    assert rendezvous_address(gpu) == ("gpu-1.example.org", 0)
    assert rendezvous_address(HostProfile(name="gpu", hostname="x", rdzv_address="10.0.0.2")) == ("10.0.0.2", 0)
    assert rendezvous_address(HostProfile(name="gpu", hostname="x", rdzv_address="10.0.0.2:29400")) == \
        ("10.0.0.2", 29400)
    assert rendezvous_address(HostProfile(name="gpu", hostname="x", rdzv_address="[fd00::2]:29400")) == \
        ("fd00::2", 29400)
    assert endpoint("fd00::2", 29400) == "[fd00::2]:29400" and endpoint("10.0.0.2", 1) == "10.0.0.2:1"
