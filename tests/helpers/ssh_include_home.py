"""A home folder whose ~/.ssh/config follows Include chains as users and SkyPilot write them (the import's tests)."""
import subprocess
import textwrap


def keygen(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def write(path, text, mode=0o644):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    path.chmod(mode)


def skypilot_entry(cluster, nodes, user, key, proxy=""):
    """What SkyPilot's SSHConfigHelper.add_cluster writes to ~/.sky/generated/ssh/CLUSTER (sky/utils/cluster_utils.py):
    per node its comment and Host block, the key path already expanded, a blank line after each."""
    text = ""
    for i, (ip, port) in enumerate(nodes):
        name = cluster if i == 0 else f"{cluster}-worker{i}"
        text += (f"# Added by sky (use `sky stop/down {cluster}` to remove)\n"
                 f"Host {name}\n  HostName {ip}\n  User {user}\n  IdentityFile {key}\n  IdentitiesOnly yes\n"
                 "  StrictHostKeyChecking no\n  UserKnownHostsFile=/dev/null\n  GlobalKnownHostsFile=/dev/null\n"
                 f"  Port {port}\n" + (f"  ProxyCommand {proxy}\n" if proxy else "") + "\n")
    return text


def make_home(home):
    """Fill ``home`` (to be $HOME) with a ~/.ssh/config whose Includes are globbed, relative, ~-based, nested 3 deep,
    missing, inside a Host block, and SkyPilot's line with two clusters' generated files."""
    ssh = home / ".ssh"
    for key in ("sky-key", "id_gw", "id_default"):
        keygen(ssh / key)
    write(ssh / "config", """\
        # Added by SkyPilot for ssh config of all clusters
        Include ~/.sky/generated/ssh/*

        Include config.d/*
        Include ~/.ssh/missing.conf nothing-here/*

        Host work
          Include work.inc
          Port 1111

        Host gpu1
          User late

        Host *.internal
          User nobody

        Match user nobody-at-all
          Port 9

        Host !never

        Host *
          ServerAliveInterval 30
          IdentityFile ~/.ssh/id_default
        """)
    write(ssh / "config.d" / "10-lab", """\
        Include nested/level2
        Host lab1 lab2
          HostName %h.lab.example
          User ana
        """)
    write(ssh / "config.d" / "02-gw", """\
        Host gw
          HostName gw.example.org
          Port 2201
          User ops
          IdentityFile ~/.ssh/id_gw
        """)
    (ssh / "config.d" / "old").mkdir()  # a folder a glob matches: ssh reads nothing from it
    write(ssh / "nested" / "level2", """\
        Include ~/.ssh/nested/level3
        Host deep2
          HostName deep2.example
        """)
    write(ssh / "nested" / "level3", """\
        Host deep3
          HostName 10.0.0.3
          User d3
          ProxyJump gw
        """)
    write(ssh / "work.inc", """\
        HostName work.example
        User worker
        Host gpu1
          HostName gpu1.example
        Host work
          ProxyJump gw
        """)
    generated = home / ".sky" / "generated" / "ssh"
    write(generated / "mycluster", skypilot_entry("mycluster", [("34.1.2.3", 22), ("34.1.2.4", 22)], "ubuntu",
                                                  f"{ssh}/sky-key"))
    write(generated / "dock", skypilot_entry("dock", [("localhost", 10022)], "sky", f"{ssh}/sky-key",
                                             proxy=f"ssh -T -i {ssh}/sky-key -W %h:%p ubuntu@35.9.9.9"))
    return home
