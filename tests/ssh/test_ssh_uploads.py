"""The user's script directory uploaded over SSH: skips, progress, and only what changed the next time."""
import posixpath

from ddpgui.core.targets.uploads import MANIFEST, upload_dir


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


def test_links_out_of_the_folder_and_permissions_over_ssh(ssh_env, tmp_path):
    import os
    import stat

    secret = tmp_path / "outside" / "shadow"
    secret.parent.mkdir()
    secret.write_text("root:$6$hash:19000::::::\n")
    secret.chmod(0o600)
    local = tmp_path / "project"
    local.mkdir()
    (local / "train.py").write_text("print('hi')\n")
    (local / "private.cfg").write_text("token = 1\n")
    (local / "private.cfg").chmod(0o600)
    (local / "shadow").symlink_to(secret)
    (local / "inside.py").symlink_to("train.py")
    with ssh_env.target(tmp_path) as target:
        result = upload_dir(target, local)
        assert sorted(result.uploaded) == ["inside.py", "private.cfg", "train.py"]
        assert dict(result.skipped) == {"shadow": f"a symbolic link to {secret}, outside the folder"}
        assert target.exec(["test", "-e", posixpath.join(result.remote_dir, "shadow")]).rc == 1
        modes = target.exec(["stat", "-c", "%n %a", *(posixpath.join(result.remote_dir, n) for n in
                                                       ("private.cfg", "train.py"))]).stdout.decode().splitlines()
        assert [m.rsplit(" ", 1)[1] for m in modes] == ["600", oct(stat.S_IMODE(os.stat(local / "train.py").st_mode))[2:]]
        assert target.read_file(posixpath.join(result.remote_dir, "inside.py")) == b"print('hi')\n"
