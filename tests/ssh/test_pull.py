"""``ddpgui pull`` for real: a run's folder on a loopback sshd with SFTP and on one without, a 200 MiB file whose
link drops mid-transfer, hostile names and patterns, This computer, and the CLI's words.

The run folders are made by hand on the host (config.json and the files a script would write): listing and
downloading need a run's folder and its record, not a training run (which costs ~10 s each).
"""
import getpass
import json
import os
import sys
from pathlib import Path

import pytest
from helpers.run_folders import NOT_UTF8, ODD_NAMES, make_run_folder, sha256_file, write_random

from ddpgui.cli import main as cli
from ddpgui.core.hosts import HostStore
from ddpgui.core.runs.manager import RunManager
from ddpgui.core.runs.pull import OutputFile, PullCancelled, PullError, destination, list_outputs, pull, select
from ddpgui.core.store import RunStore
from ddpgui.core.targets.base import ConnectionLost

BIG = 200 * 2**20


@pytest.fixture(scope="module")
def big_file(tmp_path_factory) -> Path:
    return write_random(tmp_path_factory.mktemp("big") / "big.bin", BIG)


def _profile(env, root: Path, name: str):
    return env.profile(name, user=getpass.getuser(), python=sys.executable, run_root=str(root))


def _manager(env, tmp_path: Path, name: str) -> tuple[RunManager, str]:
    root = tmp_path / f"{name} root"
    hosts = env.store(tmp_path, _profile(env, root, name))
    store = RunStore(tmp_path / "runs.sqlite3")
    return RunManager(store, hosts, lambda host: env.target(tmp_path, hosts.get(host), store=hosts)), str(root)


def _expected(run_dir: Path) -> dict[str, bytes]:
    """What a pull of everything must give: name → bytes."""
    files = {name: (run_dir / name).read_bytes() for name in [*ODD_NAMES, "config.json", "stdout.log"]}
    files[os.fsdecode(NOT_UTF8)] = b"not utf-8 name"
    files["inside link"] = (run_dir / "stdout.log").read_bytes()
    files["outputs/model.pt"] = (run_dir.parent.parent / "outs ✓" / "model.pt").read_bytes()
    return files


def _check_pulled(run_dir: Path, out: Path) -> None:
    for name, data in _expected(run_dir).items():
        assert (out / name).read_bytes() == data, name
    assert not list(out.rglob("*.part"))
    assert not (out / "to passwd").exists() and not (out / "outside dir").exists() and not (out / "a fifo").exists()


@pytest.mark.parametrize("via", ["auto", "sftp"])
def test_pull_from_a_host_with_sftp(ssh_env, tmp_path, via):
    manager, root = _manager(ssh_env, tmp_path, "box")
    with manager:
        run_dir = make_run_folder(Path(root), "r1")
        target = manager.targets.target("box")
        listing = list_outputs(target, str(run_dir))
        names = {f.name for f in listing.files}
        assert names == set(_expected(run_dir))
        assert {f.name: f.size for f in listing.files}["outputs/model.pt"] == 300_000
        skipped = dict(listing.skipped)
        assert "outside the folder" in skipped["to passwd"] and "not followed" in skipped["outside dir/"]
        assert "not a regular file" in skipped["a fifo"]
        result = pull(target, str(run_dir), listing.files, tmp_path / "out", listing=listing, via=via)
        assert sorted(result.downloaded) == sorted(names) and result.bytes == listing.total
        _check_pulled(run_dir, tmp_path / "out")
        assert target.connection.sftp_offered is (True if via == "sftp" else target.connection.sftp_offered)
        again = pull(target, str(run_dir), listing.files, tmp_path / "out", listing=listing, via=via)
        assert again.downloaded == [] and sorted(again.unchanged) == sorted(names) and again.bytes == 0


def test_pull_from_a_host_without_sftp(no_sftp_env, tmp_path):
    manager, root = _manager(no_sftp_env, tmp_path, "nosftp")
    with manager:
        run_dir = make_run_folder(Path(root), "r2")
        target = manager.targets.target("nosftp")
        listing = list_outputs(target, str(run_dir))
        pull(target, str(run_dir), listing.files, tmp_path / "out", listing=listing)
        _check_pulled(run_dir, tmp_path / "out")
        assert target.connection.sftp_offered is False


def test_a_dropped_link_resumes_a_200_mib_file_and_its_sha256_matches(ssh_env, tmp_path, big_file):
    manager, root = _manager(ssh_env, tmp_path, "box")
    with manager:
        run_dir = make_run_folder(Path(root), "r3", big_file)
        target = manager.targets.target("box")
        listing = list_outputs(target, str(run_dir))
        [big] = select(listing.files, ["big.bin"])
        out = tmp_path / "out"
        part = out / "outputs" / "big.bin.part"
        drops = []

        def drop_at(fraction):
            def progress(done, total, name, index, count):
                if not drops and done >= fraction * total:
                    drops.append(done)
                    assert ssh_env.server.drop_connections() >= 1
            return progress

        # No retries: the link drops at a third, the error says so and what arrived stays in big.bin.part.
        with pytest.raises(ConnectionLost, match=r"^the link to box dropped while outputs/big.bin was downloading \("):
            pull(target, str(run_dir), [big], out, progress=drop_at(1 / 3), retries=0)
        kept = part.stat().st_size
        assert BIG // 4 < kept < BIG and not (out / "outputs" / "big.bin").exists()
        # The next pull continues from the .part; the link drops again at two thirds and is reconnected by itself.
        drops.clear()
        result = pull(target, str(run_dir), [big], out, progress=drop_at(2 / 3))
        assert result.reconnects == 1 and result.downloaded == ["outputs/big.bin"]
        assert result.resumed_bytes > kept  # the second resume started after the second drop
        assert result.bytes < BIG - kept + BIG // 2  # not sent again from the start
        assert sha256_file(out / "outputs" / "big.bin") == sha256_file(big_file) and not part.exists()


def test_cancel_keeps_the_part_and_a_longer_part_starts_over(ssh_env, tmp_path, big_file):
    manager, root = _manager(ssh_env, tmp_path, "box")
    with manager:
        run_dir = make_run_folder(Path(root), "r4", big_file)
        target = manager.targets.target("box")
        [big] = select(list_outputs(target, str(run_dir)).files, ["big.bin"])
        seen = []
        with pytest.raises(PullCancelled):
            pull(target, str(run_dir), [big], tmp_path / "out", progress=lambda d, *a: seen.append(d),
                 cancelled=lambda: bool(seen) and seen[-1] > 10 * 2**20)
        part = tmp_path / "out" / "outputs" / "big.bin.part"
        assert 10 * 2**20 < part.stat().st_size < BIG
        # A .part longer than the file (the file was replaced by a shorter one): downloaded again from byte 0.
        [model] = select(list_outputs(target, str(run_dir)).files, ["model.pt"])
        (tmp_path / "out" / "outputs" / "model.pt.part").write_bytes(b"x" * 400_000)
        result = pull(target, str(run_dir), [model], tmp_path / "out")
        assert result.resumed_bytes == 0
        assert (tmp_path / "out" / "outputs" / "model.pt").read_bytes() == (Path(root) / "outs ✓" / "model.pt").read_bytes()


def test_a_changed_part_fails_its_sha256_and_is_removed(ssh_env, tmp_path):
    manager, root = _manager(ssh_env, tmp_path, "box")
    with manager:
        run_dir = make_run_folder(Path(root), "r5")
        target = manager.targets.target("box")
        [model] = select(list_outputs(target, str(run_dir)).files, ["model.pt"])
        part = tmp_path / "out" / "outputs" / "model.pt.part"
        part.parent.mkdir(parents=True)
        part.write_bytes(b"\0" * 1000)  # not the file's first bytes
        with pytest.raises(Exception, match="does not match|but the file on the host has"):
            pull(target, str(run_dir), [model], tmp_path / "out")
        assert not part.exists() and not (tmp_path / "out" / "outputs" / "model.pt").exists()
        pull(target, str(run_dir), [model], tmp_path / "out")  # the next pull starts afresh and succeeds
        assert (tmp_path / "out" / "outputs" / "model.pt").stat().st_size == 300_000


def test_hostile_patterns_names_and_reads_are_refused(ssh_env, tmp_path):
    for pattern in ("../*", "/etc/passwd", "a/../../b", ""):
        with pytest.raises(PullError, match="refused"):
            select([], [pattern])
    for name in ("../escape", "/abs", "a/../../b", "a//b"):
        with pytest.raises(PullError, match="not a name inside"):
            destination(tmp_path, OutputFile("run", name, 1))
    manager, root = _manager(ssh_env, tmp_path, "box")
    with manager:
        run_dir = make_run_folder(Path(root), "r6")
        target = manager.targets.target("box")
        for entry, words in ((["run", "../../etc/passwd"], "not a path inside"), (["run", "to passwd"], "outside"),
                             (["run", "/etc/passwd"], "not a path inside"), (["elsewhere", "x"], "no folder")):
            with pytest.raises(Exception, match=words):
                target._runner_json("outputs", str(run_dir), "--sha256", json.dumps(entry))
        for via in ("auto", "sftp"):  # over SFTP the link is read, then the runner's refusal drops what came
            with pytest.raises(PullError, match="outside"):
                pull(target, str(run_dir), [OutputFile("run", "to passwd", 10)], tmp_path / "out", via=via)
        assert not (tmp_path / "out" / "to passwd").exists() and not (tmp_path / "out" / "to passwd.part").exists()


def _stored_run(store: RunStore, run_id: str, host: str, run_dir: Path) -> None:
    store.create_run(run_id, name=f"pull test {run_id}", hosts=[host], config={"run_id": run_id}, environment={},
                     run_dirs={0: str(run_dir)}, state="finished")


def test_cli_pull_from_this_computer(tmp_path, capsys):
    run_dir = make_run_folder(tmp_path / "local root", "20991231-000000-pull01")
    with RunStore() as store:
        _stored_run(store, "20991231-000000-pull01", "local", run_dir)
    assert cli(["pull", "20991231-000000-pull01", "--list"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith("run 20991231-000000-pull01 on local: 10 files, ")
    assert "   *" not in out and any(line.endswith("  outputs/model.pt") for line in lines)
    assert r"new\nline.txt" in out and r"caf\xe9.bin" in out  # escaped, never printed raw
    assert "skipped to passwd: a symbolic link to /etc/passwd, outside the folder (not followed)" in err
    assert cli(["pull", "20991231-000000-pull01", "*.pt", "--out", str(tmp_path / "got")]) == 0
    out, err = capsys.readouterr()
    assert "10 files" in out and "2 chosen" in out
    assert out.count(" * ") == 2 and "downloaded 2 file(s), 293.9 KiB in " in out
    assert "each checked against its sha256 on the host" in out
    assert "of 293.9 KiB" in err  # the progress line
    assert sorted(p.relative_to(tmp_path / "got").as_posix() for p in (tmp_path / "got").rglob("*.pt")) == \
        ["outputs/model.pt", "sub dir/deeper/ckpt-1.pt"]
    assert cli(["pull", "20991231-000000-pull01", "*.pt", "--out", str(tmp_path / "got")]) == 0
    assert "2 file(s) already there with the same sha256" in capsys.readouterr()[0]


def test_cli_refusals_are_in_words(tmp_path, capsys):
    run_dir = make_run_folder(tmp_path / "local root", "20991231-000000-pull02")
    with RunStore() as store:
        _stored_run(store, "20991231-000000-pull02", "local", run_dir)
    assert cli(["pull", "20991231-000000-pull02", "../*", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr()[1]
    assert "ddpgui: the pattern '../*' is refused" in err and "hint: give a glob such as" in err
    assert cli(["pull", "20991231-000000-pull02", "*.nothing", "--out", str(tmp_path / "x")]) == 2
    assert "no file of run 20991231-000000-pull02 matches '*.nothing'" in capsys.readouterr()[1]
    assert cli(["pull", "20991231-000000-pull02"]) == 2
    assert "give --out DIR" in capsys.readouterr()[1]
    assert not (tmp_path / "x").exists()


def test_cli_pull_over_ssh(ssh_env, tmp_path, capsys):
    hosts = HostStore()
    profile = _profile(ssh_env, tmp_path / "cli root", "pullbox")
    (hosts.update if "pullbox" in hosts else hosts.add)(profile)
    run_dir = make_run_folder(tmp_path / "cli root", "20991231-000000-pull03")
    with RunStore() as store:
        _stored_run(store, "20991231-000000-pull03", "pullbox", run_dir)
    code = cli(["pull", "20991231-000000-pull03", "model.pt", "--out", str(tmp_path / "got"),
                "--accept-new-host-key"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "downloaded 1 file(s), 293.0 KiB" in out
    assert (tmp_path / "got" / "outputs" / "model.pt").read_bytes() == \
        (tmp_path / "cli root" / "outs ✓" / "model.pt").read_bytes()
