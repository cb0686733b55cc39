"""Download outputs… over a real loopback sshd: the link drops in the middle of a 200 MiB file, the dialog says so
in words and offers Retry, which continues from the .part and ends with the file's sha256 matching."""
import getpass
import sys

from helpers.run_folders import make_run_folder, sha256_file, write_random
from PySide6.QtCore import QSettings, Qt

from ddpgui.core.runs.manager import RunManager
from ddpgui.core.store import RunStore
from ddpgui.ui.dialogs.download_outputs import DownloadOutputsDialog
from ddpgui.ui.workers import WorkerPool

BIG = 200 * 2**20


def test_a_dropped_link_is_said_and_retry_resumes(ssh_env, qtbot, tmp_path):
    root = tmp_path / "box root"
    profile = ssh_env.profile("box", user=getpass.getuser(), python=sys.executable, run_root=str(root))
    hosts = ssh_env.store(tmp_path, profile)
    store = RunStore(tmp_path / "runs.sqlite3")
    manager = RunManager(store, hosts, lambda host: ssh_env.target(tmp_path, hosts.get(host), store=hosts))
    workers = WorkerPool()
    run_dir = make_run_folder(root, "r1", write_random(tmp_path / "big.bin", BIG))
    store.create_run("20991231-000000-gui001", name="big one", hosts=["box"], config={}, environment={},
                     run_dirs={0: str(run_dir)}, state="finished")
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    try:
        dialog = DownloadOutputsDialog(manager, workers, settings, "20991231-000000-gui001")
        qtbot.addWidget(dialog)
        dialog.retries = 0  # the error is shown at the first drop (the app reconnects 3 times first)
        dialog.show()
        qtbot.waitUntil(lambda: dialog.listing is not None, timeout=60000)
        assert "on box" in dialog.summary.text() and "outputs folder" in dialog.summary.text()
        dialog.none_button.click()
        names = [dialog.tree.topLevelItem(i).text(0) for i in range(dialog.tree.topLevelItemCount())]
        dialog.tree.topLevelItem(names.index("outputs/big.bin")).setCheckState(0, Qt.CheckState.Checked)
        dialog.folder.setText(str(tmp_path / "saved"))
        dialog.download_button.click()
        qtbot.waitUntil(lambda: dialog.bar.value() >= 100, timeout=60000)  # a tenth has arrived
        assert dialog.cancel_button.isEnabled() and "MiB of 200.0 MiB" in dialog.status.text()
        assert ssh_env.server.drop_connections() >= 1
        qtbot.waitUntil(lambda: dialog.error.isVisible(), timeout=60000)
        assert dialog.error.text().startswith("the link to box dropped while outputs/big.bin was downloading (")
        assert "kept in big.bin.part" in dialog.error.text() and "Retry, or pull again" in dialog.error.text()
        assert dialog.download_button.text() == "Retry" and dialog.download_button.isEnabled()
        part = tmp_path / "saved" / "20991231-000000-gui001" / "outputs" / "big.bin.part"
        kept = part.stat().st_size
        assert 0 < kept < BIG
        dialog.download_button.click()
        qtbot.waitUntil(lambda: dialog.result is not None, timeout=120000)
        assert dialog.result.resumed_bytes == kept and not dialog.error.isVisible()
        assert "continued from an earlier try" in dialog.status.text()
        got = tmp_path / "saved" / "20991231-000000-gui001" / "outputs" / "big.bin"
        assert sha256_file(got) == sha256_file(tmp_path / "big.bin") and not part.exists()
    finally:
        workers.shutdown(10000)
        manager.close()
        store.close()
