"""The user's script directory uploaded over SSH: skips, progress, and only what changed the next time."""
import posixpath

from ddpgui.core.uploads import MANIFEST, upload_dir


def test_script_dir_upload_over_ssh(ssh_env, tmp_path):
    local = tmp_path / "my project ✓"
    (local / "pkg").mkdir(parents=True)
    (local / "train.py").write_text("print('hi')\n")
    (local / "pkg" / "model.py").write_text("X = 1\n")
    (local / ".git").mkdir()
    (local / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (local / "big.bin").write_bytes(b"\0" * 4096)
    progress = []
    with ssh_env.target(tmp_path) as target:
        first = upload_dir(target, local, size_cap=1024, progress=lambda *p: progress.append(p))
        assert first.remote_dir.startswith(target.run_root() + "/scripts/my project ✓-")
        assert sorted(first.uploaded) == ["pkg/model.py", "train.py"]
        assert dict(first.skipped) == {".git/": "version control", "big.bin": "0.0 MiB is over the 0.000976562 MiB cap"}
        assert progress[0] == (0, 18, 0, 2) and progress[-1] == (18, 18, 2, 2)
        assert target.read_file(posixpath.join(first.remote_dir, "pkg", "model.py")) == b"X = 1\n"
        assert target.exec(["test", "-e", posixpath.join(first.remote_dir, ".git")]).rc == 1

        (local / "pkg" / "model.py").write_text("X = 2\n")
        second = upload_dir(target, local, size_cap=1024)
        assert second.uploaded == ["pkg/model.py"] and second.unchanged == 1 and second.uploaded_bytes == 6
        assert target.read_file(posixpath.join(second.remote_dir, "pkg", "model.py")) == b"X = 2\n"
        third = upload_dir(target, local, size_cap=1024)
        assert third.uploaded == [] and third.uploaded_bytes == 0
        assert MANIFEST in target.exec(["ls", "-A", first.remote_dir]).stdout.decode()
