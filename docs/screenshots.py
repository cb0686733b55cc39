"""The README's pictures, made from real runs on this computer: ``python docs/screenshots.py [--quick]``.

It keeps everything in a temporary data folder (your own runs and hosts are not touched). It runs a sweep of mlp
runs (1 and 2 processes × 3 seeds) with the CLI and exports its comparison with ``ddpgui compare``: the
double-column PNG and PDF figures into docs/figures/, the single-column ones into ``--single`` to be looked at.
Then it opens the real main window, starts a live run and grabs the window (docs/screenshot.png) and the
Compare tab with the sweep (docs/compare.png).  ``--gpus-only`` makes just the GPUs tab's pictures
(docs/gpus.png, docs/fleet.png): This computer sampled for real, beside a host profile "lab-a40" fed the
snapshot of the real 8x A40 capture of tests/fixtures/gpu (a machine shared by several jobs; its owners were not
captured, so they read "?").  ``--script-only`` makes the pictures of a user's own script
(docs/script_run.png, docs/parse_log.png): the Lightning script of tests/fixtures/scriptlogs/scripts run for real
from the launch form in a copy of its folder, its series' sources in the Loss series menu, and its own stdout.log
read by the launch form's Try reading a log….  ``--settings-only`` makes docs/script_settings.png (a Transformers
script's settings in its own words on the launch form).  Run it under a display (Xvfb is enough:
``Xvfb :99 -screen 0 1600x1000x24 & DISPLAY=:99 QT_QPA_PLATFORM=xcb python docs/screenshots.py``).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent


def _cli(args: list[str], timeout: float = 900) -> str:
    proc = subprocess.run([sys.executable, "-m", "ddpgui", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode:
        raise SystemExit(f"ddpgui {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def sweep_and_figures(steps: int, single: Path) -> str:
    """The sweep, its double-column figures into docs/figures and its single-column ones into ``single``."""
    _cli(["sweep", "local", "--workload", "mlp", "--nproc", "1,2", "--steps", str(steps), "--repeats", "3",
          "--name", "mlp processes, 3 seeds"])
    (sweep,) = json.loads(_cli(["sweeps", "--json"]))
    _cli(["compare", "--sweep", sweep["id"], "--out", str(single), "--format", "png,pdf,curves", "--width", "single"])
    out = Path(tempfile.mkdtemp())
    _cli(["compare", "--sweep", sweep["id"], "--out", str(out), "--format", "png,pdf", "--width", "double"])
    for path in out.iterdir():
        if path.suffix in (".png", ".pdf") and (DOCS / "figures" / path.name).exists():
            path.replace(DOCS / "figures" / path.name)
    return sweep["id"]


class Shots:
    """The real main window over the temporary stores (``extra_hosts``: profiles added first), shown at the
    README's size with This computer probed; :meth:`pump` turns its event loop, :meth:`close` ends it."""

    def __init__(self, extra_hosts=()):
        from PySide6.QtCore import QSettings

        from ddpgui.ui.app import create_app, open_stores
        from ddpgui.ui.main_window import MainWindow

        self.app = create_app([])
        settings = QSettings(str(Path(os.environ["DDPGUI_CONFIG_DIR"]) / "shots.ini"), QSettings.Format.IniFormat)
        self.store, hosts = open_stores()
        for profile in extra_hosts:
            hosts.add(profile)
        self.window = MainWindow(store=self.store, hosts=hosts, settings=settings)
        self.window.hosts_panel.reload("local")
        self.window.resize(1500, 950)
        self.window.show()
        self.window.probe_at_start()
        self.each_tick = None

    def pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.app.processEvents()
            time.sleep(0.02)
            if self.each_tick is not None:
                self.each_tick()

    def launch_and_wait(self, timeout: float) -> str:
        """Click Launch, pump until the run it started has ended (or ``timeout``), then a little more for its
        last records; returns its id."""
        window = self.window
        window.launch_panel.launch_button.click()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and window.dashboard.run_id is None:
            self.pump(0.2)
        run_id = window.dashboard.run_id
        while time.monotonic() < deadline and self.store.get_run(run_id).active:
            self.pump(0.5)
        self.pump(3)
        return run_id

    def close(self) -> None:
        from PySide6.QtCore import QTimer
        from PySide6.QtWidgets import QApplication

        QTimer.singleShot(0, self.window.close)
        self.pump(1)
        self.window.manager.close()
        QApplication.quit()


def window_shots(sweep_id: str, live_steps: int) -> None:
    shots = Shots()
    window, store, pump = shots.window, shots.store, shots.pump
    pump(8)  # This computer's probe
    panel = window.launch_panel  # launched from the form, as a user does
    panel.workload.setCurrentText("mlp")
    panel.nproc.setValue(2)
    panel.precision.setCurrentText("bf16")
    panel.length_unit.setCurrentText("steps")
    panel.length.setValue(live_steps)
    panel.launch_button.click()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and window.dashboard.run_id is None:
        pump(0.2)
    run_id = window.dashboard.run_id
    while time.monotonic() < deadline:
        pump(0.5)
        run = store.get_run(run_id)
        if run.last_step and run.total_steps and run.last_step >= 0.45 * run.total_steps:
            break
    pump(1.5)
    window.grab().save(str(DOCS / "screenshot.png"))
    window.manager.wait(run_id, timeout=600)

    window.compare_sweep(sweep_id)  # as the status bar's Compare button does
    pump(10)
    window.grab().save(str(DOCS / "compare.png"))
    shots.close()


def gpu_shots() -> None:
    """docs/gpus.png (the GPUs tab on a shared 8-GPU host, the hosts panel's count) and docs/fleet.png."""
    sys.path.insert(0, str(REPO / "tests"))
    from helpers.gpu_snapshots import A40S, table_snapshot

    from ddpgui.core.hosts import HostProfile

    shots = Shots([HostProfile(name="lab-a40", hostname="a40.lab.example.edu", user="ana")])
    window, pump = shots.window, shots.pump
    window.start_gpu_watch()
    shared = table_snapshot(A40S, "a40")  # read once: the shared machine reports it again and again

    def report() -> None:
        if window.gpu_watch.latest("local") is not None:
            window.gpu_watch.snapshot.emit("lab-a40", shared)

    shots.each_tick = report
    pump(10)  # This computer's probe and its first snapshots
    window.hosts_panel.select("lab-a40")
    window.tabs.setCurrentWidget(window.gpus_tab)
    window.gpus_tab.set_mode("host")
    pump(6)
    window.grab().save(str(DOCS / "gpus.png"))
    window.gpus_tab.set_mode("fleet")
    pump(4)
    window.gpus_tab.grab().save(str(DOCS / "fleet.png"))
    shots.close()


def script_shots() -> None:
    """docs/script_run.png (a real Lightning run of your own, its Loss series menu open: each series and where it
    came from) and docs/parse_log.png (Try reading a log… on that run's stdout.log)."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QScrollArea

    from ddpgui.ui.dialogs.parse_log import ParseLogDialog
    from ddpgui.ui.widgets.launch_panel import SCRIPT

    folder = Path(tempfile.mkdtemp()) / "lightning"  # it writes logs/ where it runs: not into the repository
    shutil.copytree(REPO / "tests" / "fixtures" / "scriptlogs" / "scripts", folder)
    shots = Shots()
    window, store, pump = shots.window, shots.store, shots.pump
    pump(8)  # This computer's probe
    panel = window.launch_panel
    panel.workload.setCurrentText(SCRIPT)
    panel.script_dir.setText(str(folder))
    panel.script_entry.setText("lightning_bar.py")
    panel.script_args.setText("--bar tqdm")
    panel.nproc.setValue(2)
    run_id = shots.launch_and_wait(600)
    board = window.dashboard

    def grab_menu() -> None:  # the window and the open menu over it, as the screen shows them
        shots.app.primaryScreen().grabWindow(0, *window.frameGeometry().getRect()).save(str(DOCS / "script_run.png"))
        board.series.menu.close()

    QTimer.singleShot(1500, grab_menu)
    board.series.button.showMenu()  # returns once the menu is closed
    pump(1)
    panel.advanced.setChecked(True)
    window.findChild(QScrollArea, "launch_scroll").ensureWidgetVisible(panel.reading.button)
    window.try_reading_log(str(Path(store.get_run(run_id).run_dirs[0]) / "stdout.log"))
    pump(4)
    window.findChild(ParseLogDialog).grab().save(str(DOCS / "parse_log.png"))
    shots.close()


def settings_shots(look: Path | None) -> None:
    """docs/script_settings.png: the launch form for a Transformers script of your own, bf16 and a batch of 8
    shown as the --bf16 True and --per_device_train_batch_size 8 they become.  With ``look``, the pictures to look
    at too, each at 1024x700 and 1920x1080: that form, a plain script's greyed values and Map a setting…, the
    sweep dialog's argument axes, and the header of a real run whose script reported another precision than it
    was given."""
    from ddpgui.ui.widgets.launch_panel import SCRIPT

    base = Path(tempfile.mkdtemp())
    hf = base / "hf_project"
    shutil.copytree(REPO / "tests" / "fixtures" / "scripts" / "frameworks" / "hf_args", hf)
    gpt = base / "gpt_project"
    shutil.copytree(REPO / "tests" / "fixtures" / "scripts" / "gptlike", gpt)
    # a mapping with a slip: bf16 is passed as float32, and the script says so
    (gpt / "ddpgui.toml").write_text('[settings.precision]\nbf16 = "--dtype=float32"\n')
    shots = Shots()
    window, pump = shots.window, shots.pump
    pump(8)  # This computer's probe
    panel = window.launch_panel
    panel.workload.setCurrentText(SCRIPT)
    panel.script_dir.setText(str(hf))
    panel.script_entry.setText("train.py")  # the whole set's window remembers the script shots' entry file
    panel.advanced.setChecked(False)
    window.dashboard.set_run(None)
    panel.script_args.setText("--output_dir out --max_steps 40")
    panel.nproc.setValue(2)
    panel.precision.setCurrentText("bf16")
    panel.batch.setValue(8)
    pump(1)
    window.grab().save(str(DOCS / "script_settings.png"))
    if look is None:
        shots.close()
        return
    look.mkdir(parents=True, exist_ok=True)

    def both(name: str, widget=None) -> None:
        for width, height in ((1024, 700), (1920, 1080)):
            window.resize(width, height)
            pump(0.7)
            (widget or window).grab().save(str(look / f"{name}-{width}.png"))
        window.resize(1500, 950)

    both("form-hf")
    panel.script_dir.setText(str(gpt))
    panel.precision.setCurrentIndex(0)
    (gpt / "plain.py").write_text("print('step 1: loss 0.5')\n")
    panel.script_entry.setText("plain.py")
    pump(0.5)
    both("form-plain")
    dialog = panel._map_setting("precision", "bf16")
    pump(0.5)
    dialog.grab().save(str(look / "mapping-dialog.png"))
    dialog.reject()
    panel.script_entry.setText("train.py")
    panel.script_dir.setText(str(hf))
    sweep = window.new_sweep()
    sweep.args.setText("--learning_rate=1e-4,3e-4 --seed=3")
    sweep.env.setText("OMP_NUM_THREADS=1,4")
    pump(0.5)
    sweep.grab().save(str(look / "sweep-dialog.png"))
    sweep.reject()
    panel.script_dir.setText(str(gpt))
    panel.script_args.setText("--max_iters=30")
    panel.precision.setCurrentText("bf16")
    panel.batch.setValue(0)
    shots.launch_and_wait(300)
    both("run-warning")
    shots.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs (to try the script)")
    parser.add_argument("--single", default=os.path.join(tempfile.gettempdir(), "ddpgui-single-column"),
                        help="where the single-column figures go, to look at (default: a temporary folder)")
    parser.add_argument("--gpus-only", action="store_true", help="only the GPUs tab's pictures")
    parser.add_argument("--script-only", action="store_true", help="only the pictures of a script of your own")
    parser.add_argument("--settings-only", action="store_true",
                        help="only the pictures of a script's settings (docs/script_settings.png)")
    parser.add_argument("--look", default=None, help="with --settings-only: where to put pictures to look at too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddpgui-shots-") as tmp:
        os.environ.update(DDPGUI_DATA_DIR=os.path.join(tmp, "data"), DDPGUI_CONFIG_DIR=os.path.join(tmp, "config"),
                          DDPGUI_CACHE_DIR=os.path.join(tmp, "cache"))
        if args.gpus_only:
            gpu_shots()
            print("wrote", DOCS / "gpus.png", DOCS / "fleet.png")
            return 0
        if args.settings_only:
            settings_shots(Path(args.look) if args.look else None)
            print("wrote", DOCS / "script_settings.png")
            return 0
        if args.script_only:
            script_shots()
            print("wrote", DOCS / "script_run.png", DOCS / "parse_log.png")
            return 0
        sweep_id = sweep_and_figures(60 if args.quick else 400, Path(args.single))
        window_shots(sweep_id, 300 if args.quick else 3000)
        gpu_shots()
        script_shots()
        settings_shots(None)
    print("wrote", DOCS / "screenshot.png", DOCS / "compare.png", DOCS / "figures", "and", args.single)
    return 0


if __name__ == "__main__":
    sys.exit(main())
