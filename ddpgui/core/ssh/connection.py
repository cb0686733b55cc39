"""The SSH connection: one paramiko Transport per host, Fabric-like, through jump hosts, with exec channels and SFTP.

:class:`SSHConnection` is Fabric-like: opened lazily, a context manager, one
Transport reused for every exec channel and for SFTP, keepalives every few
seconds, reopened with backoff when it drops.  Jump hosts are chained through
``direct-tcpip`` channels, each hop with its own host-key check and login.

Every remote command is ``shlex.join(argv)`` (user text is data, never shell), run by ``/bin/sh`` whatever
the user's login shell is (:func:`~.shell.remote_command`), after a marker line on stdout and stderr: what the login
shell's start-up files print before it (a banner in ~/.bashrc, config.fish or ~/.cshrc) is kept apart as
:attr:`SSHConnection.login_noise`, never read as the command's output.
"""
from __future__ import annotations

import getpass
import logging
import secrets
import select
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Callable

import paramiko

from ..hosts import Hop
from ..targets.base import CommandResult, ConnectionLost, Stream, TargetError
from .auth import AskSecret, HopAuth, SecretCache
from .known_hosts import ConfirmHostKey, ConfirmHostKeyPolicy, KnownHosts
from .shell import AfterMarker, remote_command

CONNECT_TIMEOUT_S = 10.0
#: Seconds of silence after which a keepalive is sent; with TCP_USER_TIMEOUT a dead link errors out.
KEEPALIVE_S = 5.0
#: Unacknowledged data older than this breaks the TCP connection (Linux ``TCP_USER_TIMEOUT``).
TCP_USER_TIMEOUT_S = 15.0
log = logging.getLogger(__name__)

RECONNECT_ATTEMPTS = 4
BACKOFF_S = 0.5

class HostUnreachable(TargetError):
    """No SSH connection could be made (refused, timed out, unreachable); worth retrying later."""


class SFTPUnavailable(TargetError):
    """The host refused the SFTP subsystem while the connection stayed up (the file primitives fall back)."""


class CommandTimeout(TargetError, subprocess.TimeoutExpired):
    """A command did not finish in time (also a ``subprocess.TimeoutExpired``, as for local targets)."""

    def __init__(self, message: str, hint: str, argv: list[str], timeout: float):
        TargetError.__init__(self, message, hint)
        self.cmd, self.timeout, self.output, self.stderr = argv, timeout, None, None

    def __str__(self) -> str:
        return f"{self.args[0]} — {self.hint}"


class SSHConnection:
    """One authenticated SSH connection to the last hop of ``route`` (jump hosts first)."""

    def __init__(self, route: list[Hop], *, known_hosts: KnownHosts | None = None,
                 confirm_host_key: ConfirmHostKey | None = None, ask_secret: AskSecret | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT_S, keepalive_s: float = KEEPALIVE_S,
                 reconnect_attempts: int = RECONNECT_ATTEMPTS, backoff_s: float = BACKOFF_S):
        if not route:
            raise ValueError("a connection needs at least one hop")
        self.route = route
        self.known_hosts = known_hosts or KnownHosts()
        self.confirm_host_key = confirm_host_key
        self.connect_timeout = connect_timeout
        self.keepalive_s = keepalive_s
        self.reconnect_attempts = reconnect_attempts
        self.backoff_s = backoff_s
        #: how the last hop logged in, e.g. "key file ~/.ssh/id_ed25519" (set once connected)
        self.auth_used = ""
        self._clients: list[paramiko.SSHClient] = []
        self._sftp: paramiko.SFTPClient | None = None
        self._lock = threading.RLock()
        self._sftp_lock = threading.Lock()
        #: whether the host offers SFTP: None until the first file primitive (or check_sftp) asks
        self.sftp_offered: bool | None = None
        self._opened = False
        #: the passwords and passphrases the logins used: the keyring first, then ask_secret; kept per connection
        self.secrets = SecretCache(ask_secret)
        #: the line every command prints before it starts (:func:`remote_command`)
        self.marker = "ddpgui-start-" + secrets.token_hex(8)
        #: what the host's login shell printed before the first command (its start-up files' banner; "" when
        #: nothing); None until a command has run
        self.login_noise: str | None = None

    @property
    def label(self) -> str:
        return self.route[-1].label

    def __enter__(self) -> SSHConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- opening ---------------------------------------------------------------------------
    def transport(self) -> paramiko.Transport:
        """The live transport, opened (or reopened with backoff after a drop) when needed."""
        with self._lock:
            if self._clients:
                transport = self._clients[-1].get_transport()
                if transport is not None and transport.is_active():
                    return transport
                self._close_clients()
            attempts = self.reconnect_attempts if self._opened else 1
            for attempt in range(attempts):
                try:
                    self._clients = self._connect()
                    break
                except HostUnreachable:
                    if attempt == attempts - 1:
                        raise
                    time.sleep(self.backoff_s * 2 ** attempt)
            self._opened = True
            return self._clients[-1].get_transport()

    def _connect(self) -> list[paramiko.SSHClient]:
        clients: list[paramiko.SSHClient] = []
        hops = self.route
        try:
            for i, hop in enumerate(hops):
                try:
                    sock = self._tcp(hop) if i == 0 else self._tunnel(clients[-1], hops[i - 1], hop)
                    client, used = self._login(hop, sock)
                except TargetError as exc:
                    if i == len(hops) - 1:
                        raise
                    raise type(exc)(f"jump host {hop.label} (hop {i + 1} of {len(hops) - 1} on the way to "
                                    f"{hops[-1].label}) failed: {exc.args[0]}", exc.hint, "proxy_jump") from exc
                clients.append(client)
                if i == len(hops) - 1:
                    self.auth_used = used
        except BaseException:
            for client in reversed(clients):
                client.close()
            raise
        return clients

    def _tcp(self, hop: Hop) -> socket.socket:
        where = f"{hop.hostname}:{hop.port}"
        try:
            socket.getaddrinfo(hop.hostname, hop.port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise TargetError(f"cannot resolve the host name {hop.hostname!r} ({exc.strerror})",
                              "check the spelling of the host name, your network connection and VPN",
                              field="hostname") from None
        try:
            sock = socket.create_connection((hop.hostname, hop.port), timeout=self.connect_timeout)
        except ConnectionRefusedError:
            raise HostUnreachable(f"{where} refused the connection",
                                  "check that sshd runs there and listens on this port (the profile's port)",
                                  field="port") from None
        except TimeoutError:
            raise HostUnreachable(f"no answer from {where} within {self.connect_timeout:g} s",
                                  "the host may be down or a firewall may drop SSH; check the host name, port and VPN",
                                  field="hostname") from None
        except OSError as exc:
            raise HostUnreachable(f"cannot reach {where}: {exc.strerror or exc}",
                                  "check the host name, your network connection and VPN", field="hostname") from None
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_USER_TIMEOUT"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(TCP_USER_TIMEOUT_S * 1000))
        return sock

    def _tunnel(self, jump: paramiko.SSHClient, jump_hop: Hop, hop: Hop) -> paramiko.Channel:
        try:
            return jump.get_transport().open_channel("direct-tcpip", (hop.hostname, hop.port), ("127.0.0.1", 0),
                                                     timeout=self.connect_timeout)
        except paramiko.ChannelException as exc:
            raise HostUnreachable(f"jump host {jump_hop.label} could not reach {hop.hostname}:{hop.port} "
                                  f"({exc.text})", "check the host name and port as seen from the jump host, and "
                                  "that the jump host allows TCP forwarding", field="hostname") from None
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise HostUnreachable(f"jump host {jump_hop.label} dropped the tunnel to {hop.hostname}:{hop.port} "
                                  f"({exc})", "try again", field="proxy_jump") from None

    def _login(self, hop: Hop, sock: socket.socket | paramiko.Channel) -> tuple[paramiko.SSHClient, str]:
        user = hop.user or getpass.getuser()
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(ConfirmHostKeyPolicy(self.known_hosts, hop.hostname, hop.port,
                                                                self.confirm_host_key))
        auth = HopAuth(self.secrets, hop, user)

        def transport_factory(sock: object, disabled_algorithms: dict | None = None) -> paramiko.Transport:
            transport = paramiko.Transport(sock, disabled_algorithms=disabled_algorithms)
            # Offer the host-key types on record first, so a known host is not asked about another type.
            options = transport.get_security_options()
            known = [a for a in self.known_hosts.preferred_algorithms(hop.hostname, hop.port) if a in options.key_types]
            if known:
                options.key_types = known + [a for a in options.key_types if a not in known]
            # AES-GCM first (paramiko lists it last): one AEAD pass instead of AES-CTR plus HMAC-SHA256, about twice
            # the bytes per second through paramiko (bench_pull); a server without it negotiates the next one.
            options.ciphers = tuple(sorted(options.ciphers, key=lambda name: "-gcm@" not in name))
            return transport

        try:
            client.connect(hop.hostname, hop.port, username=user, sock=sock, timeout=self.connect_timeout,
                           banner_timeout=self.connect_timeout, auth_timeout=self.connect_timeout,
                           channel_timeout=self.connect_timeout, auth_strategy=auth,
                           transport_factory=transport_factory)
        except TargetError:
            client.close()
            raise
        except (paramiko.SSHException, EOFError, OSError) as exc:
            transport = client.get_transport()
            silent = transport is not None and not transport.remote_version
            client.close()
            if silent:  # paramiko's own words ("No existing session") would hide what happened
                raise HostUnreachable(f"{hop.hostname}:{hop.port} accepted the connection but sent no SSH banner "
                                      f"within {self.connect_timeout:.0f} s",
                                      "this port does not answer as an SSH server: check the port (ssh -p PORT "
                                      "HOST works?), or the server is overloaded; try again later",
                                      field="port") from None
            raise HostUnreachable(f"the SSH handshake with {hop.hostname}:{hop.port} failed ({exc or type(exc).__name__})",
                                  "check that this port is an SSH server; try again later", field="port") from None
        client.get_transport().set_keepalive(max(1, int(self.keepalive_s)))
        return client, auth.used

    # ---- channels --------------------------------------------------------------------------
    def _session(self) -> paramiko.Channel:
        """A new session channel; a stale transport is replaced once (the command has not started yet)."""
        try:
            return self.transport().open_session(timeout=self.connect_timeout)
        except (paramiko.SSHException, EOFError, OSError):
            with self._lock:
                self._close_clients()
        try:
            return self.transport().open_session(timeout=self.connect_timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise self._lost(f"while opening a channel ({exc})") from None

    def alive(self) -> bool:
        """Whether the connection answers (opens and closes a channel within the connect timeout)."""
        with self._lock:
            transport = self._clients[-1].get_transport() if self._clients else None
        if transport is None or not transport.is_active():
            return False
        try:
            transport.open_session(timeout=self.connect_timeout).close()
        except (paramiko.SSHException, EOFError, OSError):
            return False
        return True

    def _lost(self, what: str) -> ConnectionLost:
        with self._lock:
            self._close_clients()
        return ConnectionLost(f"the connection to {self.label} dropped {what}",
                              "it is reopened on the next command; a run on the host goes on")

    def _note_noise(self, out: AfterMarker, err: AfterMarker) -> None:
        if self.login_noise is None and out.found:
            self.login_noise = b"\n".join(n.strip() for n in (out.noise, err.noise) if n.strip()).decode(
                "utf-8", "replace")

    def run(self, argv: list[str], stdin: bytes | None = None, timeout: float | None = 60.0) -> CommandResult:
        """Run ``argv`` through ``/bin/sh`` (:func:`remote_command`) and collect its output, the login's
        noise left out."""
        command = shlex.join(argv)
        chan = self._session()
        deadline = None if timeout is None else time.monotonic() + timeout
        out, err = bytearray(), bytearray()
        try:
            chan.exec_command(remote_command(argv, self.marker))
            if stdin:
                feeder = threading.Thread(target=_feed, args=(chan, stdin), daemon=True)
                feeder.start()
            else:
                chan.shutdown_write()
            while True:
                _drain(chan, out, err)
                if chan.closed:
                    _drain(chan, out, err)
                    break
                wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
                if wait <= 0:
                    chan.close()
                    if not self.alive():
                        raise self._lost(f"while running {argv[0]}")
                    raise CommandTimeout(f"{command[:200]} did not finish within {timeout:g} s on {self.label}",
                                         "the command was abandoned; it may still be running on the host",
                                         argv, timeout)
                select.select([chan], [], [], wait)
            status = chan.recv_exit_status()
            if status == -1 and not chan.get_transport().is_active():
                raise self._lost(f"while running {argv[0]}")
        except (paramiko.SSHException, EOFError) as exc:
            raise self._lost(f"while running {argv[0]} ({exc})") from None
        finally:
            chan.close()
        outs = AfterMarker(self.marker), AfterMarker(self.marker)
        stdout, stderr = (o.feed(bytes(data)) + o.end() for o, data in zip(outs, (out, err), strict=True))
        self._note_noise(*outs)
        return CommandResult(status, stdout, stderr)

    def start(self, argv: list[str], keep_stdin: bool = False) -> paramiko.Channel:
        """Start ``argv`` through ``/bin/sh`` (:func:`remote_command`) and return its channel (stdin closed, unless
        ``keep_stdin``: a command that runs until its stdin ends, as the host monitor does).  Read it through a
        :class:`ChannelStream`, which leaves out the login's noise."""
        chan = self._session()
        try:
            chan.exec_command(remote_command(argv, self.marker))
            if not keep_stdin:
                chan.shutdown_write()
        except (paramiko.SSHException, EOFError) as exc:
            chan.close()
            raise self._lost(f"while starting {argv[0]} ({exc})") from None
        return chan

    # ---- SFTP ------------------------------------------------------------------------------
    def _open_sftp(self, transport: paramiko.Transport) -> paramiko.SFTPClient:
        """The SFTP session; :class:`SFTPUnavailable` when the host refuses the subsystem but stays connected."""
        try:
            chan = transport.open_session(timeout=self.connect_timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise self._lost(f"while opening a channel ({exc})") from None
        try:
            chan.invoke_subsystem("sftp")
            return paramiko.SFTPClient(chan)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            chan.close()
            # A refused subsystem closes only its channel ("Channel closed."); a dropped link closes them all.
            if not (transport.is_active() and self.alive()):
                raise self._lost(f"while opening SFTP ({exc or type(exc).__name__})") from None
            log.info("%s offers no SFTP (%s): using exec-channel transfers", self.label, exc or type(exc).__name__)
            self.sftp_offered = False
            raise self._no_sftp() from None

    def _no_sftp(self) -> SFTPUnavailable:
        return SFTPUnavailable(f"{self.label} offers no SFTP subsystem", "file transfers go over exec channels instead")

    def check_sftp(self) -> bool:
        """Whether the host offers SFTP (asked once per connection, by opening the session)."""
        if self.sftp_offered is None:
            try:
                self.sftp_call("checking for SFTP", lambda sftp: None)
            except SFTPUnavailable:
                pass
        return bool(self.sftp_offered)

    def sftp_call(self, what: str, func: Callable[[paramiko.SFTPClient], object]) -> object:
        """Run ``func(sftp)`` on the connection's one SFTP session.

        A dropped link raises ConnectionLost; a host that offers no SFTP raises
        :class:`SFTPUnavailable` (and ``sftp_offered`` becomes False: not asked again).
        """
        with self._sftp_lock:
            if self.sftp_offered is False:
                raise self._no_sftp()
            transport = self.transport()
            if self._sftp is None or self._sftp.get_channel().get_transport() is not transport:
                self._sftp = self._open_sftp(transport)
                self.sftp_offered = True
            try:
                return func(self._sftp)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                if not transport.is_active() or isinstance(exc, (paramiko.SSHException, EOFError)):
                    self._sftp = None
                    raise self._lost(f"during {what}") from None
                raise

    # ---- closing ---------------------------------------------------------------------------
    def _close_clients(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except (paramiko.SSHException, EOFError, OSError):
                pass  # its channel's close message cannot leave a dead transport: it is gone either way
            self._sftp = None
        for client in reversed(self._clients):
            client.close()
        self._clients = []

    def close(self) -> None:
        """Close SFTP and every hop's connection; runs on the host go on."""
        with self._lock:
            self._close_clients()


def _feed(chan: paramiko.Channel, data: bytes) -> None:
    try:
        view = memoryview(data)
        for start in range(0, len(data), 1 << 16):  # paramiko's sendall copies what is left after every packet
            chan.sendall(bytes(view[start:start + (1 << 16)]))
        chan.shutdown_write()
    except (OSError, EOFError, paramiko.SSHException):
        pass  # the command ended or the link dropped: the reader reports it


def _drain(chan: paramiko.Channel, out: bytearray, err: bytearray) -> None:
    while chan.recv_ready():
        out += chan.recv(1 << 16)
    while chan.recv_stderr_ready():
        err += chan.recv_stderr(1 << 16)


class ChannelStream(Stream):
    """stdout of a remote command started by :meth:`SSHConnection.start`, from its marker line on; stderr is
    discarded, as for local targets, or handed to ``on_stderr``."""

    def __init__(self, chan: paramiko.Channel, conn: SSHConnection, on_stderr=None, doing: str = "streaming"):
        self._chan = chan
        self._conn = conn
        self._on_stderr = on_stderr or (lambda data: None)
        self._doing = doing  # what a dropped link interrupted, for its message
        self._out, self._err = AfterMarker(conn.marker), AfterMarker(conn.marker)

    def _drain_stderr(self) -> None:
        while self._chan.recv_stderr_ready():
            data = self._err.feed(self._recv(self._chan.recv_stderr, 1 << 16))
            if data:
                self._on_stderr(data)

    def _recv(self, recv, size: int) -> bytes:
        """``recv(size)``; ConnectionLost when its window adjust meets a dead transport (paramiko's bare EOFError)."""
        try:
            return recv(size)
        except (paramiko.SSHException, EOFError, OSError):
            raise self._conn._lost(f"while {self._doing}") from None

    def read(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        chan = self._chan
        while True:
            self._drain_stderr()
            if chan.recv_ready():
                data = self._out.feed(self._recv(chan.recv, 1 << 20))
                if self._out.found:
                    self._conn._note_noise(self._out, self._err)
                if data:
                    return data
                continue
            if chan.eof_received or chan.closed:
                transport = chan.get_transport()
                if transport is None or not transport.is_active():
                    raise self._conn._lost(f"while {self._doing}")
                self._drain_stderr()
                rest = self._err.end()  # no marker came: the login shell's own error
                if rest:
                    self._on_stderr(rest)
                return self._out.end()  # b"" once all is read
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            select.select([chan], [], [], min(left, 1.0))

    def fileno(self) -> int:
        return self._chan.fileno()

    def close(self) -> None:
        """Close the channel; the remote command gets EOF/SIGPIPE, a detached run goes on."""
        try:
            self._chan.close()
        except (paramiko.SSHException, EOFError, OSError):
            pass  # the link is gone, and the channel with it
