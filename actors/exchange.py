"""The data plane between task actors: one authenticated TCP connection per channel.

Why not Ray calls: a delivery as an actor call costs about a millisecond of CPU
on each side (``python3 -m bench.exchange`` measures both), and a keyed shuffle
at parallelism p has p² channels, each sending at least every buffer timeout. On
a socket a delivery costs tens of microseconds. So task actors send records to
each other directly, as Flink's TaskManagers do over Netty, and Ray carries the
control plane only: deployment, letters, results, failure detection.

Trust: each slot listens on its node's address with a key of its own
(``multiprocessing.connection``'s HMAC challenge, both ways), and that key
reaches senders only through Ray at deployment. What arrives on a connection was
pickled by weir's own tasks, as on Ray's own channels; source input never
travels here unparsed.

A connection carries one channel of one attempt of a task. The sender opens it
at its first delivery and names the receiving task's run, attempt and channel in
a header; the receiver answers it, refusing with the reason a header for
another attempt (a late sender of a cancelled attempt never reaches the next
one) or for a channel the task does not have. Opening, the challenges and that
answer included, must finish within ``HANDSHAKE_TIMEOUT_S``. The receiver's reader thread
puts each delivery into the task's mailbox in order. A full mailbox stops the
reader, the socket buffers fill, and the sender's send blocks: that is
backpressure, with at most the mailbox's capacity plus ``SOCKET_BUFFER_BYTES``
on each side in flight per channel. An empty message asks for a drain; the
reply comes once every delivery before it is in the mailbox.

Threading: :class:`Inbox` runs an accept thread and a reader thread per
connection; :class:`Outbox` belongs to the task's loop thread. An inbox that
cannot start a reader breaks: its listener closes and its owner hears why.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, Listener, answer_challenge, deliver_challenge  # type: ignore[attr-defined]
from typing import Any, Callable, Iterator

from weir.runtime.mailbox import Mailbox

SOCKET_BUFFER_BYTES = 64 * 1024  # the kernel doubles it
# How long each side waits for the other's part of opening a connection (the
# challenges and the header). A live peer answers in milliseconds even when its
# node is loaded; one that accepts and never answers (a hung process, a port
# taken over) must free the sender's loop thread well before the checkpoint
# timeout (60 s by default) would, so the task fails over as for a lost channel.
HANDSHAKE_TIMEOUT_S = 10.0
_DRAIN = b""  # a delivery is never empty: it is a pickled list
_ACCEPTED = b""  # the answer to a header; a refusal says why
_BROKEN = (OSError, EOFError, ValueError, AuthenticationError)  # what a connection fails with


@dataclass(frozen=True)
class Endpoint:
    """Where a slot takes deliveries, and the key that lets a sender in."""

    host: str
    port: int
    key: bytes

    def __repr__(self) -> str:  # the key stays out of logs and error texts
        return f"Endpoint({self.host}:{self.port})"


@dataclass(frozen=True)
class Route:
    """One output channel of a task: the receiving slot, its input channel, and
    the attempt of the task it must be running."""

    endpoint: Endpoint
    channel: int
    attempt: int


@contextlib.contextmanager
def _socket_of(conn: Connection) -> Iterator[socket.socket]:
    """The connection's socket, for options and shutdown (a duplicate of its fd:
    both act on the one socket)."""
    s = socket.socket(fileno=os.dup(conn.fileno()))
    try:
        yield s
    finally:
        s.close()


def _tune(conn: Connection, timeout_s: float = 0) -> None:
    """No Nagle delay (a batch's last segment would wait for an ACK), bounded
    buffers, and a receive timeout (0: none; a read that times out raises
    BlockingIOError)."""
    with _socket_of(conn) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
        timeval = struct.pack("ll", int(timeout_s), int(timeout_s % 1 * 1e6))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)


def _shutdown(conn: Connection) -> None:
    """Wake a thread blocked on the connection (closing the fd would not)."""
    try:
        with _socket_of(conn) as s:
            s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # closed already


class Inbox:
    """The receiving side of one slot: a listener, and the current task's mailbox."""

    def __init__(self, host: str, on_broken: Callable[[BaseException], None]) -> None:
        """``on_broken`` hears, on the accept thread, why the inbox stopped taking
        connections (see :meth:`_accept_loop`); the slot cannot receive any more."""
        self._on_broken = on_broken
        key = os.urandom(32)
        # Authentication happens on each connection's own thread (below), so a
        # peer that never answers the challenge holds up nobody else.
        self._listener = Listener((host, 0), backlog=256)
        self.endpoint = Endpoint(host, self._listener.address[1], key)
        self._lock = threading.Lock()
        self._task: tuple[str, int, Mailbox] | None = None  # (run id, attempt, mailbox)
        self._conns: dict[Connection, tuple[str, int]] = {}
        threading.Thread(target=self._accept_loop, name="inbox-accept", daemon=True).start()

    def open(self, run_id: str, attempt: int, mailbox: Mailbox) -> None:
        """From now on deliveries for this attempt go into ``mailbox``."""
        with self._lock:
            self._task = (run_id, attempt, mailbox)

    def close(self, run_id: str, attempt: int, drop_connections: bool) -> None:
        """The attempt's task ended: refuse new connections for it. After a failure
        or a cancel its connections are dropped too (a sender still blocked on one
        fails at once); after a clean end every producer has sent its last
        delivery, and its connection stays to answer the producer's last drain."""
        with self._lock:
            if self._task is not None and self._task[:2] == (run_id, attempt):
                self._task = None
            conns = [c for c, owner in self._conns.items() if owner == (run_id, attempt)] if drop_connections else []
        for c in conns:
            _shutdown(c)

    def _accept_loop(self) -> None:
        """Accept connections, each served on a reader thread of its own. When
        the loop cannot go on (a reader thread cannot be started: the process's
        thread limit), the inbox breaks rather than stay deaf: it closes its
        listener, so every sender fails at once instead of waiting on it, and
        tells its owner."""
        pending: Connection | None = None  # accepted, without a reader yet
        try:
            while True:
                try:
                    pending = self._listener.accept()
                except OSError:
                    continue
                threading.Thread(target=self._serve, args=(pending,), name="inbox-reader", daemon=True).start()
                pending = None
        except BaseException as exc:
            # The listener first: once the sender whose connection is dropped
            # sees it end, no later sender can get in.
            self._listener.close()
            if pending is not None:
                pending.close()
            self._on_broken(exc)

    def _admit(self, conn: Connection, owner: tuple[str, int], channel: int) -> Mailbox:
        """The mailbox that a connection of ``owner`` (run id, attempt) delivers
        into on input ``channel``, with the connection noted as the attempt's;
        raises :class:`ChannelRefusedError` saying why not."""
        with self._lock:
            if self._task is None or self._task[:2] != owner:  # a late sender of an attempt that is over
                raise ChannelRefusedError(f"task attempt {owner[1]} of run '{owner[0]}' is not running there")
            mailbox = self._task[2]
            if not 0 <= channel < mailbox.channels:  # -1 would reach the last channel's queue
                raise ChannelRefusedError(
                    f"input channel {channel} is out of range: the receiving task "
                    f"has input channels 0 to {mailbox.channels - 1}"
                )
            self._conns[conn] = owner
            return mailbox

    def _serve(self, conn: Connection) -> None:
        try:
            _tune(conn, HANDSHAKE_TIMEOUT_S)
            deliver_challenge(conn, self.endpoint.key)
            answer_challenge(conn, self.endpoint.key)
            run_id, attempt_s, channel_s = conn.recv_bytes(512).decode().split("\n")
            channel = int(channel_s)
            try:
                mailbox = self._admit(conn, (run_id, int(attempt_s)), channel)
            except ChannelRefusedError as refused:
                conn.send_bytes(str(refused).encode())
                return
            conn.send_bytes(_ACCEPTED)
            _tune(conn)
            seq = 0
            while True:
                payload = conn.recv_bytes()
                if payload == _DRAIN:
                    conn.send_bytes(_DRAIN)
                    continue
                mailbox.put_data(channel, seq, payload)
                seq += 1
        except Exception:  # EOF, a reset, a failed challenge, a closed mailbox
            pass  # the connection is over; a sender still sending sees it fail
        finally:
            with self._lock:
                self._conns.pop(conn, None)
            conn.close()


class ChannelRefusedError(ConnectionError):
    """The receiving slot refused a connection's header; the text says why."""


class DeliveryError(Exception):
    """A delivery could not be sent; ``output`` and ``channel`` say where to, the
    text names the receiving slot's address."""

    def __init__(self, output: int, channel: int, route: Route, cause: BaseException) -> None:
        why = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
        super().__init__(f"to {route.endpoint.host}:{route.endpoint.port}: {why}")
        self.output, self.channel, self.route = output, channel, route


class Outbox:
    """The sending side of one task: a connection per output channel, opened at
    the channel's first delivery. Used by the task's loop thread only."""

    def __init__(
        self, routes: list[list[Route]], run_id: str, handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S
    ) -> None:
        self._routes = routes
        self._run_id = run_id
        self._handshake_timeout_s = handshake_timeout_s
        self._conns: dict[tuple[int, int], Connection] = {}
        self.blocked_s = 0.0  # time spent in sends: mostly waiting for a full receiver

    def send(self, output: int, channel: int, payload: bytes) -> None:
        conn = self._conns.get((output, channel))
        try:
            if conn is None:
                conn = self._connect(output, channel)
            started = time.perf_counter()
            conn.send_bytes(payload)
            self.blocked_s += time.perf_counter() - started
        except _BROKEN as exc:
            raise DeliveryError(output, channel, self._routes[output][channel], exc) from None

    def _connect(self, output: int, channel: int) -> Connection:
        """Connect, authenticate and have the channel accepted, all within the
        handshake timeout: a peer that accepts and then says nothing raises
        TimeoutError, one that refuses the channel :class:`ChannelRefusedError`."""
        route = self._routes[output][channel]
        timeout_s = self._handshake_timeout_s
        sock = socket.create_connection((route.endpoint.host, route.endpoint.port), timeout=timeout_s)
        # Connection reads the fd directly, so it needs a blocking socket: the
        # timeout from here on is the socket's receive timeout (_tune).
        sock.setblocking(True)
        conn = Connection(sock.detach())
        try:
            _tune(conn, timeout_s)
            answer_challenge(conn, route.endpoint.key)
            deliver_challenge(conn, route.endpoint.key)
            conn.send_bytes(f"{self._run_id}\n{route.attempt}\n{route.channel}".encode())
            if (answer := conn.recv_bytes()) != _ACCEPTED:
                raise ChannelRefusedError(answer.decode())
            _tune(conn)
        except BlockingIOError:
            conn.close()
            raise TimeoutError(
                f"the receiving slot accepted the connection but did not answer the handshake within {timeout_s} s"
            ) from None
        except BaseException:
            conn.close()
            raise
        self._conns[(output, channel)] = conn
        return conn

    def drain(self) -> None:
        """Return once every delivery sent so far is in its receiver's mailbox."""
        pending = list(self._conns.items())
        for (output, channel), conn in pending:
            self._exchange(output, channel, conn.send_bytes, _DRAIN)
        for (output, channel), conn in pending:
            self._exchange(output, channel, conn.recv_bytes)

    def _exchange(self, output: int, channel: int, call: Any, *args: Any) -> None:
        try:
            call(*args)
        except _BROKEN as exc:
            raise DeliveryError(output, channel, self._routes[output][channel], exc) from None

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
