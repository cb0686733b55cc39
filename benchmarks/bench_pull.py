"""``ddpgui pull`` against ``scp`` of the same file over the same loopback sshd (issue 25: pull ≥ 0.8 × scp).

One 200 MiB file in a run's outputs folder; each repeat copies it with OpenSSH's scp, with ``pull`` over the
exec-channel stream (the default for SSH hosts) and with ``pull --via sftp``, in a rotating order, into fresh
folders.  pull's time includes what scp does not do: the sha256 of the whole file on both sides.
"""
from __future__ import annotations

import getpass
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_ssh import _spread, _start_sshd
from benchmarks.common import Row, median

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

SIZE = 200 * 2**20


def _scp(server, key: Path, known: Path, source: Path, dest: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["scp", "-q", "-P", str(server.port), "-i", str(key), "-o", f"UserKnownHostsFile={known}",
                    "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", f"{getpass.getuser()}@127.0.0.1:{source}",
                    str(dest)], check=True, stdin=subprocess.DEVNULL)
    return time.perf_counter() - started


def run(repeats: int = 5) -> list[Row]:
    from helpers.run_folders import write_random

    from ddpgui.core.hosts import HostProfile, HostStore
    from ddpgui.core.runs.pull import list_outputs, pull, select
    from ddpgui.core.ssh.connection import SSHConnection
    from ddpgui.core.ssh.known_hosts import KnownHosts
    from ddpgui.core.targets.ssh import SSHTarget
    from ddpgui.core.targets.zipapp import build_runner

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        server, key = _start_sshd(root)
        try:
            known = root / "known_hosts"
            known.write_text(server.known_hosts_lines())
            hosts = HostStore(root / "hosts.json")
            hosts.add(HostProfile(name="loop", hostname="127.0.0.1", port=server.port, user=getpass.getuser(),
                                  auth="key", key_file=str(key), python=sys.executable, run_root=str(root / "remote")))
            target = SSHTarget(hosts.get("loop"), SSHConnection(hosts.route("loop"), known_hosts=KnownHosts(
                shared_files=[known], app_file=root / "app_known_hosts")))
            target.deploy(build_runner())
            run_dir = root / "remote" / "runs" / "bench"
            (run_dir / "out").mkdir(parents=True)
            (run_dir / "config.json").write_text('{"outputs_dir": "out"}')
            source = write_random(run_dir / "out" / "model.bin", SIZE)
            listing = list_outputs(target, str(run_dir))
            files = select(listing.files, ["model.bin"])
            seconds: dict[str, list[float]] = {"scp": [], "exec": [], "sftp": []}
            ways = list(seconds)
            for i in range(repeats):
                for way in ways[i % 3:] + ways[:i % 3]:
                    dest = root / f"got-{way}-{i}"
                    dest.mkdir()
                    if way == "scp":
                        seconds[way].append(_scp(server, key, known, source, dest / "model.bin"))
                    else:
                        started = time.perf_counter()
                        pull(target, str(run_dir), files, dest, listing=listing, via=way)
                        seconds[way].append(time.perf_counter() - started)
                    shutil.rmtree(dest)
            target.close()
        finally:
            server.stop()
    rate = {way: [SIZE / 1e6 / s for s in values] for way, values in seconds.items()}
    ratio = {way: [s / p for s, p in zip(seconds["scp"], seconds[way])] for way in ("exec", "sftp")}
    exec_ratio = median(ratio["exec"])
    return [Row("scp of 200 MiB (loopback)", median(rate["scp"]), "MB/s", note=f"median of {repeats}; "
                f"{_spread(rate['scp'])}"),
            Row("pull of 200 MiB, exec-channel stream (default)", median(rate["exec"]), "MB/s",
                note=f"median of {repeats}; {_spread(rate['exec'])}; sha256 on both sides included"),
            Row("pull of 200 MiB over SFTP (--via sftp)", median(rate["sftp"]), "MB/s",
                note=f"median of {repeats}; {_spread(rate['sftp'])}"),
            Row("pull / scp throughput (exec-channel stream)", exec_ratio, "x", ">= 0.8", exec_ratio >= 0.8,
                f"median of {repeats} interleaved repeats; min {min(ratio['exec']):.2f}, max {max(ratio['exec']):.2f}"),
            Row("pull --via sftp / scp throughput", median(ratio["sftp"]), "x",
                note=f"min {min(ratio['sftp']):.2f}, max {max(ratio['sftp']):.2f}")]


if __name__ == "__main__":
    from benchmarks.__main__ import report

    sys.exit(report(run()))
