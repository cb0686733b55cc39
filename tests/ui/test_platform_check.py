"""The xcb plugin check against real ``ldd`` output: a shared object linked to libraries deleted afterwards."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddpgui.ui import platform_check

X11 = {"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":77"}
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ldd and xcb are Linux things")


@pytest.fixture(scope="module")
def broken_plugin(tmp_path_factory) -> Path:
    """``libplugin.so`` needs ``libnot-there-x11.so.0`` and ``libxcb-notthere.so.1``, which are then deleted,
    so ``ldd`` really reports them "not found" (as it does for libqxcb.so on a fresh Debian)."""
    folder = tmp_path_factory.mktemp("so")
    (folder / "stub.c").write_text("int stub(void) { return 0; }\n")
    (folder / "plugin.c").write_text("int stub(void);\nint plugin(void) { return stub(); }\n")
    for lib, soname in (("not_there", "libnot-there-x11.so.0"), ("xcb_notthere", "libxcb-notthere.so.1")):
        subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", folder / f"lib{lib}.so",
                        folder / "stub.c"], check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", folder / "libplugin.so", folder / "plugin.c",
                    "-Wl,--no-as-needed", f"-L{folder}", "-lnot_there", "-lxcb_notthere"], check=True)
    (folder / "libnot_there.so").unlink()
    (folder / "libxcb_notthere.so").unlink()
    return folder / "libplugin.so"


def test_missing_sonames_from_real_ldd_and_their_debian_packages(broken_plugin):
    assert platform_check.missing_libraries([broken_plugin]) == ["libnot-there-x11.so.0", "libxcb-notthere.so.1"]
    assert platform_check.missing_libraries([Path("/bin/sh")]) == []
    names = {"libxcb-cursor.so.0": "libxcb-cursor0", "libxcb-icccm.so.4": "libxcb-icccm4",
             "libxcb-keysyms.so.1": "libxcb-keysyms1", "libxcb-image.so.0": "libxcb-image0",
             "libxcb-render-util.so.0": "libxcb-render-util0", "libxcb-shape.so.0": "libxcb-shape0",
             "libxcb-xkb.so.1": "libxcb-xkb1", "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
             "libX11-xcb.so.1": "libx11-xcb1", "libglib-2.0.so.0": "libglib2.0-0"}
    assert {s: platform_check.debian_package(s) for s in names} == names


def test_one_line_with_the_install_command_only_where_xcb_is_used(broken_plugin):
    sudo = "" if os.geteuid() == 0 else "sudo "
    message = platform_check.problem(X11, [broken_plugin])
    assert message == ("ddpgui cannot open its window: Qt's X11 (xcb) plugin needs system libraries this computer "
                       "lacks (libnot-there-x11.so.0, libxcb-notthere.so.1); install them: "
                       f"{sudo}apt-get install libnot-there-x11-0 libxcb-notthere1")
    assert platform_check.problem({"DISPLAY": ":77"}, [broken_plugin]) == message  # X11 is Qt's default
    for env in ({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}, {"QT_QPA_PLATFORM": "wayland"},
                {"QT_QPA_PLATFORM": "offscreen"}, {"QT_QPA_PLATFORM": "wayland;xcb", "DISPLAY": ":0"}):
        assert platform_check.problem(env, [broken_plugin]) is None, env
    assert platform_check.problem(X11, [Path("/bin/sh")]) is None
    assert "there is no display" in platform_check.problem({}, [Path("/bin/sh")])


def test_the_real_pyside_plugin_is_found():
    names = [p.name for p in platform_check.xcb_libraries()]
    assert names == ["libqxcb.so", "libQt6XcbQpa.so.6"]


def _fake_apt(tmp_path: Path) -> tuple[dict, Path]:
    """apt-get replaced by a script that logs its arguments (the test suite installs nothing)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt.log"
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (bin_dir / "apt-get").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env.update(X11, PATH=f"{bin_dir}:{os.environ['PATH']}")
    return env, log


def test_make_run_step_installs_what_is_missing_or_prints_the_command(broken_plugin, tmp_path):
    env, log = _fake_apt(tmp_path)
    done = subprocess.run([sys.executable, "-m", "ddpgui.ui.platform_check", "--install", str(broken_plugin)],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr  # make run goes on to start the app
    assert "needs libnot-there-x11.so.0, libxcb-notthere.so.1 (packages libnot-there-x11-0 libxcb-notthere1)" \
        in done.stdout
    if os.geteuid() == 0:
        assert log.read_text() == "install -y -qq --no-install-recommends libnot-there-x11-0 libxcb-notthere1\n"
    else:
        assert "sudo apt-get install libnot-there-x11-0 libxcb-notthere1" in done.stdout or log.exists()


def test_make_run_step_does_nothing_on_wayland_or_offscreen(broken_plugin, tmp_path):
    env, log = _fake_apt(tmp_path)
    for extra in ({"WAYLAND_DISPLAY": "wayland-0", "QT_QPA_PLATFORM": ""}, {"QT_QPA_PLATFORM": "offscreen"}):
        done = subprocess.run([sys.executable, "-m", "ddpgui.ui.platform_check", "--install", str(broken_plugin)],
                              env=dict(env, **extra), capture_output=True, text=True)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert not log.exists()


_APP_WITH_BROKEN_PLUGIN = """
import sys
from pathlib import Path
from ddpgui.ui import app, platform_check
platform_check.xcb_libraries = lambda: [Path(sys.argv[1])]
sys.exit(app.main())
"""


def test_the_app_says_one_line_and_exits_before_qt_aborts(broken_plugin, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env.update(X11, DDPGUI_CONFIG_DIR=str(tmp_path / "c"), DDPGUI_DATA_DIR=str(tmp_path / "d"))
    done = subprocess.run([sys.executable, "-c", _APP_WITH_BROKEN_PLUGIN, str(broken_plugin)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [platform_check.problem(X11, [broken_plugin])]
