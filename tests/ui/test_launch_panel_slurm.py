"""The launch form on a Slurm cluster: nodes × processes per node, the partition's limits, refusals on their control.

The probe reports are built from the real ``sinfo`` outputs of the local 22.05.8 test cluster
(tests/fixtures/slurm/sinfo_*.txt: partitions ``debug``, no time limit, and ``short``, 5 minutes; two nodes of
2 CPUs), as SlurmTarget.probe reports them.
"""
import socket
from pathlib import Path

from PySide6.QtCore import Qt

from ddpgui.core.hosts import LOCAL, HostProfile
from ddpgui.core.hosts.slurm_options import SlurmOptions
from ddpgui.core.slurm.partitions import parse_sinfo, request_problems
from ddpgui.core.targets.base import TargetError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_probe(sinfo: str = "sinfo_idle.txt", partition: str = "debug") -> dict:
    """A Slurm host's probe report: the login node (16 cores, no GPU) and the cluster's partitions."""
    parts = parse_sinfo((FIXTURES / sinfo).read_text())
    return {"schema": 1, "hostname": "login1", "cpu_count": 16, "best_device": "cpu", "gpus": [],
            "torch": {"version": "2.5.1", "gloo": True}, "precisions": {"fp32": None}, "problems": [],
            "slurm": {"version": "slurm-wlm 22.05.8", "partitions": [p.to_json() for p in parts], "queue": [],
                      "partition": partition}}


def add_cluster(window, name: str = "hpc", sinfo: str | None = "sinfo_idle.txt", **options) -> HostProfile:
    """Add a cluster profile (its login node is never contacted here), select it, and feed its probe."""
    options = {"partition": "debug", "time_limit": "1:00:00", **options}
    profile = HostProfile(name=name, kind="slurm", hostname="127.0.0.1", port=_closed_port(),
                          slurm=SlurmOptions(**options))
    (window.hosts.update if name in window.hosts else window.hosts.add)(profile)
    window.hosts_panel.reload(name)
    if sinfo is not None:
        window.set_probe(name, cluster_probe(sinfo, options["partition"]))
    return profile


def _label(panel, field_row) -> str:
    return panel.form.labelForField(field_row).text()


def test_a_cluster_shows_its_partition_limits_and_bounds_nodes_and_processes(window):
    panel = window.launch_panel
    add_cluster(window)
    assert window.hosts_panel.current() == "hpc" and panel.cluster is not None
    assert panel.title.text() == "Launch on cluster hpc (Slurm)"
    assert panel.limits.isVisible()
    assert panel.limits.text() == ("partition debug: 2 nodes (2 free), 2 CPUs/node, no GPUs, time limit unlimited; "
                                   "this profile asks for 1:00:00")
    assert panel.nnodes.isVisible() and (panel.nnodes.minimum(), panel.nnodes.maximum()) == (1, 2)
    # processes per node come from the partition's nodes (2 CPUs), not from the login node's 16 cores
    assert panel.nproc.maximum() == 2 and _label(panel, panel.nproc_row) == "Processes per node"
    assert panel.nproc_label.text() == "of 2 CPUs per node in partition debug"
    panel.nnodes.setValue(2)
    panel.nproc.setValue(1)
    panel.batch.setValue(8)
    assert panel.world.isVisible() and panel.world.text() == "2 nodes × 1 process per node = world 2"
    assert panel.global_batch.text() == "global batch 16"
    settings = panel.settings()
    assert settings["nnodes"] == 2 and settings["nproc_per_node"] == 1
    assert panel.launch_button.isEnabled(), panel.error.text()
    panel.nnodes.setValue(5)  # bounded by the partition's node count
    assert panel.nnodes.value() == 2

    window.set_probe(LOCAL, {"schema": 1, "cpu_count": 6, "best_device": "cpu", "gpus": [], "torch": {}})
    window.hosts_panel.select(LOCAL)  # an SSH host (here This computer): the existing form, no nnodes
    assert panel.cluster is None and "nnodes" not in panel.settings()
    assert not panel.nnodes.isVisible() and not panel.limits.isVisible() and not panel.world.isVisible()
    assert panel.nproc.maximum() == 6 and _label(panel, panel.nproc_row) == "Processes"
    assert panel.title.text() == "Launch on This computer"
    window.hosts_panel.select("hpc")
    assert panel.settings()["nnodes"] == 2 and panel.nnodes.maximum() == 2


def test_a_time_limit_above_the_partitions_is_refused_on_the_limits_line(window):
    panel = window.launch_panel
    add_cluster(window, partition="short", time_limit="10")  # 10 minutes on the 5-minute partition
    assert panel.limits.text().startswith("partition short: 2 nodes (2 free), 2 CPUs/node, no GPUs, "
                                          "time limit 0:05:00; this profile asks for 0:10:00")
    assert not panel.launch_button.isEnabled()
    assert panel.error.isVisible()
    assert panel.error.text() == ("the time limit 10 is above partition short's 0:05:00: the job would never "
                                  "start")
    assert panel.hint.text() == "Hint: lower the host profile's time limit to 0:05:00 or less"
    assert panel.invalid_field == "time_limit" and panel.limits.property("invalid") is True
    assert panel.error.text() in panel.limits.toolTip()
    assert panel.nnodes.property("invalid") is not True and panel.nproc.property("invalid") is not True

    add_cluster(window, partition="short", time_limit="4:00")  # the profile fixed: 4 minutes (MM:SS)
    assert panel.launch_button.isEnabled(), panel.error.text()
    assert not panel.error.isVisible() and panel.invalid_field is None
    assert panel.limits.property("invalid") is False and panel.limits.toolTip() == panel.limits.text()


def test_more_nodes_than_are_up_are_refused_on_the_nodes_control(window):
    panel = window.launch_panel
    add_cluster(window, sinfo="sinfo_node_down.txt")  # n2 down: 2 nodes, 1 usable
    assert panel.limits.text().startswith("partition debug: 2 nodes (1 free, 1 down), 2 CPUs/node")
    assert panel.nnodes.maximum() == 2
    panel.nnodes.setValue(2)
    assert not panel.launch_button.isEnabled()
    assert panel.error.text() == ("partition debug has 1 usable node now (1 down or drained), the run asks for 2")
    assert panel.invalid_field == "nnodes" and panel.nnodes.property("invalid") is True
    assert panel.error.text() in panel.nnodes.toolTip()
    assert panel.form.labelForField(panel.nnodes_row).styleSheet() != ""  # its label is marked
    panel.nnodes.setValue(1)
    assert panel.launch_button.isEnabled() and panel.invalid_field is None
    assert panel.nnodes.property("invalid") is False and panel.form.labelForField(panel.nnodes_row).styleSheet() == ""
    assert "sbatch --nodes" in panel.nnodes.toolTip()


def test_three_nodes_refused_by_the_cluster_at_submit_are_shown_on_the_nodes_control(window):
    """The cluster can shrink between the probe and the submit: sbatch's own check (the core's request_problems,
    raised as a TargetError naming the field) is shown on the nodes control."""
    panel = window.launch_panel
    profile = add_cluster(window)
    parts = parse_sinfo((FIXTURES / "sinfo_idle.txt").read_text())
    field, message, hint = request_problems(parts, profile.slurm, 3, 1, False)[0]
    assert field == "nnodes"
    panel.show_error(TargetError(f"hpc: {message}", hint, field=field))
    assert panel.error.text() == "Launch failed: hpc: partition debug has 2 nodes, the run asks for 3"
    assert panel.hint.text() == "Hint: ask for at most 2 nodes"
    assert panel.nnodes.property("invalid") is True and "has 2 nodes, the run asks for 3" in panel.nnodes.toolTip()
    panel.nproc.setValue(1)  # any change validates again: the mark goes
    assert panel.nnodes.property("invalid") is False


def test_gpus_per_node_bound_processes_and_are_checked_against_the_partition(window):
    panel = window.launch_panel
    add_cluster(window, gpus_per_node=2)  # the test partition has no GPUs
    assert panel.nproc.maximum() == 2 and panel.nproc_label.text() == "of 2 GPUs per node in partition debug"
    assert panel.limits.text().endswith("this profile asks for 1:00:00 and 2 GPUs per node")
    assert not panel.launch_button.isEnabled()
    assert panel.error.text() == "partition debug has 0 GPUs per node, the profile asks for 2"
    assert panel.invalid_field == "gpus_per_node" and panel.limits.property("invalid") is True
    # the compute nodes have the GPUs: the login node's CPU does not rule out tf32
    tf32 = panel.precision.model().item(panel.precision.findText("tf32"))
    assert tf32.isEnabled()


def test_a_cluster_not_probed_yet_is_left_to_slurm_and_a_missing_partition_is_named(window):
    panel = window.launch_panel
    add_cluster(window, sinfo=None)
    assert panel.limits.text() == "partition debug: limits not known yet (test the host: sinfo tells them)"
    assert panel.nnodes.maximum() == 512 and panel.launch_button.isEnabled()
    add_cluster(window, partition="gpu")
    assert panel.limits.text() == "partition gpu: not on this cluster (it has debug, short)"
    assert panel.error.text() == "the cluster has no partition 'gpu' (it has debug, short)"
    assert panel.limits.property("invalid") is True and not panel.launch_button.isEnabled()


def test_a_cluster_is_never_a_node_of_a_run_across_hosts(window, qtbot):
    panel = window.launch_panel
    add_cluster(window)
    window.hosts.add(HostProfile("box-b", hostname="127.0.0.1", port=_closed_port()))
    window.hosts_panel.reload("hpc")
    list_ = window.hosts_panel.list
    rect = list_.visualItemRect(window.hosts_panel.item("box-b"))
    qtbot.mouseClick(list_.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ControlModifier, rect.center())
    assert set(window.hosts_panel.selected_nodes()) == {"hpc", "box-b"}
    assert panel.nodes in (["hpc"], ["box-b"])
    assert panel.warning.isVisible() and "left out of this run" in panel.warning.text()
    assert (panel.cluster is not None) == (panel.nodes == ["hpc"])


def test_long_names_never_widen_the_window(window):
    panel = window.launch_panel
    width = window.width()
    add_cluster(window, name="hpc")
    short = panel.minimumSizeHint().width()
    assert short <= panel.width() and window.width() == width
    name = "a" * 64  # the longest profile name, and a partition name far longer than the panel
    add_cluster(window, name=name, partition="p" + "x" * 150)
    assert panel.title.text() == f"Launch on cluster {name} (Slurm)"
    assert "p" + "x" * 150 in panel.error.text() and "p" + "x" * 150 in panel.limits.text()
    assert panel.minimumSizeHint().width() == short and window.width() == width
    assert panel.title.toolTip() == panel.title.text()  # elided: the whole text is its tooltip
    add_cluster(window, name="hpc")
    assert panel.title.toolTip() == ""
