"""The multi-node preflight of the rendezvous port (docs/PROTOCOL.md, "Multi-node").

``rdzv-listen`` runs on node 0: it binds a port (the kernel picks a free one, or
the one the host profile fixes), prints ``{"ok": true, "port": P, "token": T}``,
and answers every connection with ``T``.  ``rdzv-check ADDR PORT TOKEN`` runs on
each other node: it connects to node 0 as torchrun will and reads the token, so
a firewall, a wrong address or some other program on that port is found before
anything starts.  The listener ends once ``expect`` nodes have checked, after
``timeout`` seconds, or when nobody reads its output any more (it writes a
blank line twice a second: a closed SSH channel ends it with EPIPE).  It lets
the checking side close first, so no TIME_WAIT is left on the port that
torchrun binds next.
"""
import errno
import secrets
import socket
import sys
import time
from typing import Callable

GREETING = b"ddpgui-rdzv "


def listen(emit: Callable[[dict], None], port: int = 0, expect: int = 1, timeout: float = 60.0) -> int:
    """Serve the token on ``port`` (0: a free one) until ``expect`` checks, ``timeout`` or EPIPE.

    ``emit`` prints one JSON line (the runner's command output).
    """
    try:
        sock = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True) \
            if socket.has_dualstack_ipv6() else socket.create_server(("", port))
    except OSError as exc:
        in_use = exc.errno == errno.EADDRINUSE
        emit({"ok": False, "failure": "addr_in_use" if in_use else "listen_failed",
                "error": "cannot listen on port %d: %s" % (port, exc.strerror or exc),
                "hint": "another program holds that port: choose another port in the host profile's rendezvous "
                        "address, or leave the port out so a free one is picked" if in_use else
                        "check that this user may open a listening socket on this host"})
        return 2
    token = secrets.token_hex(8)
    checked = 0
    deadline = time.monotonic() + timeout
    try:
        emit({"ok": True, "port": sock.getsockname()[1], "token": token})
        sock.settimeout(0.5)
        while checked < expect and time.monotonic() < deadline:
            try:
                conn, _ = sock.accept()
            except socket.timeout:
                sys.stdout.write("\n")  # EPIPE once the client stopped reading: we are done
                sys.stdout.flush()
                continue
            with conn:
                conn.settimeout(5.0)
                try:
                    conn.sendall(GREETING + token.encode() + b"\n")
                    while conn.recv(64):  # until the checker closes: the TIME_WAIT stays on its side
                        pass
                except OSError:
                    continue
            checked += 1
        emit({"ok": True, "checked": checked})
    except BrokenPipeError:
        pass
    finally:
        sock.close()
    return 0


def check(address: str, port: int, token: str, timeout: float = 5.0) -> dict:
    """Connect to node 0's listener as torchrun will; ``{"ok": True}`` or an error with a hint."""
    where = "%s:%d" % (address, port)
    hint = ("make sure this node can reach node 0 at %s: set the rendezvous address of node 0's host profile to "
            "an address the other nodes can reach (e.g. its private IP), and open port %d in node 0's firewall"
            % (where, port))
    try:
        conn = socket.create_connection((address.strip("[]"), port), timeout=timeout)
    except socket.timeout:
        return {"ok": False, "failure": "rdzv_unreachable", "hint": hint,
                "error": "no answer from node 0 at %s within %.0f s (a firewall dropping the packets, or a wrong "
                         "address)" % (where, timeout)}
    except OSError as exc:
        return {"ok": False, "failure": "rdzv_unreachable", "hint": hint,
                "error": "cannot connect to node 0 at %s: %s" % (where, exc.strerror or exc)}
    with conn:
        conn.settimeout(timeout)
        data = b""
        try:
            while not data.endswith(b"\n") and len(data) < 256:
                piece = conn.recv(256)
                if not piece:
                    break
                data += piece
        except OSError:
            pass
    if data.strip() != GREETING + token.encode():
        return {"ok": False, "failure": "rdzv_wrong_peer", "hint": hint,
                "error": "something other than node 0's rendezvous answered at %s (another host or program)" % where}
    return {"ok": True, "address": address, "port": port}
