"""This computer is "This computer" wherever a user reads it (its id stays "local"): one display-name function used
by the hosts' labels, the comparison's setting labels and the figures' shared-settings line."""
from helpers.stored_runs import constant_run

from ddpgui.core import analysis
from ddpgui.core.hosts import LOCAL, host_display_name, local_profile
from ddpgui.core.outputs.style import shared_settings
from ddpgui.core.runs.loglines import host_text
from ddpgui.core.store import RunStore


def test_one_display_name_for_this_computer_and_the_profile_s_name_for_the_rest():
    assert host_display_name(LOCAL) == "This computer"
    assert host_display_name("gpu-box") == "gpu-box"
    assert host_display_name("Local") == "Local"  # only the built-in id is renamed
    assert local_profile().display_name == "This computer" and local_profile().name == LOCAL


def _compare(tmp_path, hosts_of_runs):
    store = RunStore(tmp_path / "runs.db")
    base = {"workload": "mlp", "compile": "off", "precision": "fp32", "nproc_per_node": 1, "steps": 10}
    for i, hosts in enumerate(hosts_of_runs):
        run = constant_run(store, f"r{i}", 100.0 + i, dict(base, seed=i))
        store.update_run(run.id, hosts=list(hosts))
    return store, analysis.compare([analysis.run_stats(store, f"r{i}") for i in range(len(hosts_of_runs))])


def test_the_figures_shared_settings_say_this_computer(tmp_path):
    store, comparison = _compare(tmp_path, [[LOCAL], [LOCAL]])
    try:
        line = shared_settings(comparison)
        assert line.endswith("@This computer") and "@local" not in line, line
        assert host_text(store.get_run("r0")) == "This computer"
    finally:
        store.close()


def test_setting_labels_that_differ_by_host_name_this_computer(tmp_path):
    store, comparison = _compare(tmp_path, [[LOCAL], ["gpu-box"], [LOCAL, "gpu-box"]])
    try:
        labels = sorted(g.label for g in comparison.groups)
        assert labels == ["@This computer", "@This computer,gpu-box", "@gpu-box"], labels
        run = store.get_run("r0")
        assert analysis.settings_of(run.config, run.hosts)["hosts"] == [LOCAL]  # the settings keep the id
    finally:
        store.close()
