"""The import dialog over a config with Include chains: what it read, what it offers (a SkyPilot cluster said so),
what it did not import and why; importing stores the cluster on the profile."""
from helpers.ssh_include_home import make_home
from PySide6.QtCore import Qt


def test_the_dialog_names_files_clusters_and_reasons(window, qtbot, tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    make_home(home)
    dialog = window.hosts_panel.import_ssh()
    qtbot.waitUntil(dialog.isVisible)
    assert dialog.summary.text() == "Read ~/.ssh/config and 7 files it includes: 9 hosts to add."
    items = {dialog.list.item(r).data(Qt.ItemDataRole.UserRole): dialog.list.item(r)
             for r in range(dialog.list.count())}
    assert items["mycluster"].text() == "mycluster   (ubuntu@34.1.2.3)  — SkyPilot cluster mycluster"
    assert items["gw"].text() == "gw   (ops@gw.example.org:2201)" and "SkyPilot" not in items["deep3"].text()
    assert items["mycluster"].toolTip() == "SkyPilot cluster mycluster, imported from ~/.sky/generated/ssh/mycluster"
    details = dialog.details.toPlainText()
    assert "Files read, in the order ssh reads them:\n  ~/.ssh/config\n  ~/.sky/generated/ssh/dock\n" in details
    assert "  Include ~/.ssh/missing.conf (~/.ssh/config line 5) matches no file; ssh passes over it too" in details
    assert "  *: Host * is the default block for every host, not a host itself" in details
    assert "  Match user nobody-at-all: a Match block (~/.ssh/config line 17)" in details
    dialog.import_button.click()
    qtbot.waitUntil(lambda: "mycluster" in window.hosts.names())
    profile = window.hosts.get("mycluster")
    assert (profile.provider, profile.cluster, profile.key_file) == ("skypilot", "mycluster",
                                                                     str(home / ".ssh" / "sky-key"))
