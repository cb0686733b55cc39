"""Can Qt open a window here?  The X11 (xcb) platform plugin's missing system libraries, found with ``ldd``.

PySide6's wheels bring Qt but not the X11 libraries its xcb plugin links (a fresh Debian or Ubuntu lacks
libxcb-cursor0 and friends); without them Qt prints several lines ending in "Reinstalling the application
may fix this problem" and aborts.  This module finds the libraries ``ldd`` reports "not found" for the
plugin, names the Debian/Ubuntu packages that provide them and the command that installs them.

Used twice: by the app before it creates the QApplication (one clear line instead of Qt's text), and by
``make run`` (``python -m ddpgui.ui.platform_check --install``), which installs what is missing when it
may (root, or passwordless sudo, with apt-get) and otherwise prints the command.  It never imports Qt.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

#: Packages whose names do not follow Debian's rule for library packages (see :func:`debian_package`).
_PACKAGES = {"libglib-2.0.so.0": "libglib2.0-0", "libgthread-2.0.so.0": "libglib2.0-0"}
_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$")
_SONAME = re.compile(r"^(lib.+)\.so\.(\d+)")


def pyside_dir() -> Path | None:
    spec = importlib.util.find_spec("PySide6")
    return Path(list(spec.submodule_search_locations)[0]) if spec and spec.submodule_search_locations else None


def xcb_libraries() -> list[Path]:
    """PySide6's xcb platform plugin and its xcb integration library (those present)."""
    root = pyside_dir()
    if root is None:
        return []
    candidates = [root / "Qt" / "plugins" / "platforms" / "libqxcb.so", root / "Qt" / "lib" / "libQt6XcbQpa.so.6"]
    return [p for p in candidates if p.is_file()]


def missing_libraries(paths: list[Path]) -> list[str]:
    """The sonames ``ldd`` reports "not found" for these shared objects, each once, in ldd's order."""
    missing: list[str] = []
    for path in paths:
        try:
            done = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue  # no ldd (not glibc Linux): nothing we can say; Qt will say it
        for line in done.stdout.splitlines():
            m = _NOT_FOUND.match(line)
            if m and m[1] not in missing:
                missing.append(m[1])
    return missing


def debian_package(soname: str) -> str:
    """The Debian/Ubuntu package of a library: ``libxcb-cursor.so.0`` → ``libxcb-cursor0``.

    Debian names a library package after the soname: the name, then the version, with a hyphen
    between when the name ends in a digit (``libxkbcommon-x11.so.0`` → ``libxkbcommon-x11-0``).
    """
    if soname in _PACKAGES:
        return _PACKAGES[soname]
    m = _SONAME.match(soname)
    if not m:
        return soname
    name, version = m[1].lower(), m[2]
    return f"{name}-{version}" if name[-1].isdigit() else f"{name}{version}"


def install_argv(packages: list[str], as_root: bool) -> list[str]:
    prefix = [] if as_root else ["sudo"]
    return [*prefix, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]


def install_command(packages: list[str]) -> str:
    """What the user types (``sudo`` unless they are root)."""
    return " ".join([*([] if os.geteuid() == 0 else ["sudo"]), "apt-get", "install", *packages])


def uses_xcb(env: Mapping[str, str]) -> bool:
    """Whether Qt will try the xcb plugin: QT_QPA_PLATFORM says xcb (first), or it is unset and this is
    not a Wayland session (Qt 6 takes its Wayland plugin when WAYLAND_DISPLAY is set)."""
    if not sys.platform.startswith("linux"):
        return False
    platform = env.get("QT_QPA_PLATFORM", "").strip()
    if platform:
        return platform.split(";")[0].split(":")[0].strip() == "xcb"
    return not env.get("WAYLAND_DISPLAY")


def problem(env: Mapping[str, str] | None = None, paths: list[Path] | None = None) -> str | None:
    """One line saying why no window can open here and what to do, or None (the app can start)."""
    env = os.environ if env is None else env
    if not uses_xcb(env):
        return None
    missing = missing_libraries(xcb_libraries() if paths is None else paths)
    if missing:
        packages = list(dict.fromkeys(debian_package(s) for s in missing))
        how = (f"install them: {install_command(packages)}" if shutil.which("apt-get")
               else "install the packages of your system that provide them")
        return (f"ddpgui cannot open its window: Qt's X11 (xcb) plugin needs system libraries this computer "
                f"lacks ({', '.join(missing)}); {how}")
    if not env.get("DISPLAY") and not env.get("QT_QPA_PLATFORM"):
        return ("ddpgui cannot open its window: there is no display (DISPLAY and WAYLAND_DISPLAY are not set); "
                "start it from a desktop session (or ssh -X), or use the command line: ddpgui --help")
    return None


def ensure(paths: list[Path] | None = None, env: Mapping[str, str] | None = None) -> int:
    """``make run``'s step: install the missing packages when allowed, else print the command; always 0
    (the app starts next either way and says the same if it still cannot open its window)."""
    env = os.environ if env is None else env
    if not uses_xcb(env):
        return 0
    missing = missing_libraries(xcb_libraries() if paths is None else paths)
    if not missing:
        return 0
    packages = list(dict.fromkeys(debian_package(s) for s in missing))
    print(f"ddpgui: Qt's X11 (xcb) plugin needs {', '.join(missing)} (packages {' '.join(packages)})")
    if not shutil.which("apt-get"):
        print("ddpgui: install the packages of your system that provide them, then run make run again")
        return 0
    as_root = os.geteuid() == 0
    may = as_root or (shutil.which("sudo") is not None
                      and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0)
    if not may:
        print(f"ddpgui: to install them, run: {install_command(packages)}")
        return 0
    print(f"ddpgui: installing them: {' '.join(install_argv(packages, as_root))}")
    apt_env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    prefix = [] if as_root else ["sudo", "-n"]
    if subprocess.run([*prefix, *install_argv(packages, True)], env=apt_env).returncode != 0:
        # a fresh machine may have no package lists yet
        subprocess.run([*prefix, "apt-get", "update", "-q"], env=apt_env)
        if subprocess.run([*prefix, *install_argv(packages, True)], env=apt_env).returncode != 0:
            print(f"ddpgui: the installation failed; run: {install_command(packages)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddpgui.ui.platform_check", description=__doc__.split("\n")[0])
    parser.add_argument("--install", action="store_true", help="install what is missing (root or sudo -n)")
    parser.add_argument("library", nargs="*", type=Path,
                        help="shared objects to check (default: PySide6's xcb plugin and its integration library)")
    args = parser.parse_args(argv)
    paths = args.library or None
    if args.install:
        return ensure(paths)
    message = problem(paths=paths)
    print(message or "ok: Qt can load its platform plugin here")
    return 1 if message else 0


if __name__ == "__main__":
    sys.exit(main())
