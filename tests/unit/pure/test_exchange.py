"""The socket data plane between task actors (actors/exchange.py), without Ray:
an Inbox and Outboxes in this process, on loopback."""

from __future__ import annotations

import socket
import threading
import time
from typing import Iterator

import pytest

from weir.actors.exchange import DeliveryError, Endpoint, Inbox, Outbox, Route
from weir.runtime.mailbox import Mailbox


@pytest.fixture
def inbox() -> Iterator[Inbox]:
    broken: list[BaseException] = []
    yield Inbox("127.0.0.1", on_broken=broken.append)
    assert broken == []


def _fail_to_start_readers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting an inbox's reader thread fails from now on, as at the process's thread limit."""
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name == "inbox-reader":
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)


def _take_all(mailbox: Mailbox) -> list[tuple[int, bytes]]:
    out = []
    while (letter := mailbox.take(0)) is not None:
        out.append((letter.channel, letter.payload))
    return out


def test_deliveries_reach_the_mailbox_in_order_per_channel(inbox: Inbox) -> None:
    mailbox = Mailbox(2, capacity=100)
    inbox.open("run", 7, mailbox)
    out = Outbox([[Route(inbox.endpoint, 0, 7), Route(inbox.endpoint, 1, 7)]], "run")
    for i in range(20):
        out.send(0, i % 2, f"d{i}".encode())
    out.drain()  # returns once all twenty are in the mailbox
    got = _take_all(mailbox)
    assert sorted(got) == sorted((i % 2, f"d{i}".encode()) for i in range(20))
    assert [p for ch, p in got if ch == 0] == [f"d{i}".encode() for i in range(0, 20, 2)]


def test_a_sender_of_another_attempt_is_refused(inbox: Inbox) -> None:
    mailbox = Mailbox(1, capacity=100)
    inbox.open("run", 8, mailbox)
    stale = Outbox([[Route(inbox.endpoint, 0, 7)]], "run")  # attempt 7 is over
    other_job = Outbox([[Route(inbox.endpoint, 0, 8)]], "another-run")
    for out in (stale, other_job):
        with pytest.raises(DeliveryError):
            out.send(0, 0, b"late")
            out.drain()
    assert _take_all(mailbox) == []


def test_a_sender_without_the_key_is_refused(inbox: Inbox) -> None:
    mailbox = Mailbox(1, capacity=100)
    inbox.open("run", 1, mailbox)
    forged = Endpoint(inbox.endpoint.host, inbox.endpoint.port, b"not the key" * 3)
    with pytest.raises(DeliveryError, match="AuthenticationError|digest"):
        Outbox([[Route(forged, 0, 1)]], "run").send(0, 0, b"sneaky")
    assert _take_all(mailbox) == []
    assert "key" not in repr(inbox.endpoint) and str(inbox.endpoint.port) in repr(inbox.endpoint)


def test_a_full_mailbox_holds_the_sender_back(inbox: Inbox) -> None:
    mailbox = Mailbox(1, capacity=1)
    inbox.open("run", 1, mailbox)
    out = Outbox([[Route(inbox.endpoint, 0, 1)]], "run")
    payload = b"x" * (1 << 20)
    done = threading.Event()

    def send_all() -> None:
        for _ in range(32):  # 32 MiB: far more than the mailbox and both socket buffers hold
            out.send(0, 0, payload)
        done.set()

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    assert not done.wait(1.0), "the sender ran ahead of a receiver that takes nothing"
    taken = 0
    while taken < 32:
        if mailbox.take(5) is not None:
            taken += 1
    assert done.wait(5)
    assert out.blocked_s > 0.5


@pytest.mark.parametrize("drop_connections", [False, True])
def test_the_last_drain_is_answered_after_a_clean_end(inbox: Inbox, drop_connections: bool) -> None:
    """A producer sends its last delivery, then drains; the receiver may take that
    delivery and end first. A clean end keeps the connection to answer the drain
    (dropping it, as after a failure, makes the producer fail)."""
    mailbox = Mailbox(1, capacity=100)
    inbox.open("run", 1, mailbox)
    out = Outbox([[Route(inbox.endpoint, 0, 1)]], "run")
    out.send(0, 0, b"end-of-partition")
    assert mailbox.take(5).payload == b"end-of-partition"
    inbox.close("run", 1, drop_connections=drop_connections)
    if drop_connections:
        with pytest.raises(DeliveryError):
            out.drain()
    else:
        out.drain()


def test_a_failed_receiver_frees_a_blocked_sender(inbox: Inbox) -> None:
    mailbox = Mailbox(1, capacity=1)
    inbox.open("run", 1, mailbox)
    out = Outbox([[Route(inbox.endpoint, 0, 1)]], "run")
    failed: list[BaseException] = []

    def send_all() -> None:
        try:
            for _ in range(64):
                out.send(0, 0, b"x" * (1 << 20))
        except DeliveryError as exc:
            failed.append(exc)

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    sender.join(1.0)
    assert sender.is_alive()  # blocked: nobody takes
    mailbox.close()
    inbox.close("run", 1, drop_connections=True)
    sender.join(10)
    assert not sender.is_alive() and failed and failed[0].route.attempt == 1


def test_a_peer_that_never_answers_the_handshake_fails_the_send_in_time() -> None:
    """A receiver that accepts the TCP connection but never writes (a hung
    process, a port taken by something else) must not hold the sender's loop
    thread: the handshake times out and the send fails as a lost channel does,
    naming the peer."""
    with socket.create_server(("127.0.0.1", 0)) as deaf:
        port = deaf.getsockname()[1]
        out = Outbox([[Route(Endpoint("127.0.0.1", port, b"k" * 32), 0, 1)]], "run", handshake_timeout_s=0.2)
        started = time.monotonic()
        with pytest.raises(DeliveryError) as info:
            out.send(0, 0, b"hello")
        assert time.monotonic() - started < 3
    assert f"127.0.0.1:{port}" in str(info.value), str(info.value)
    assert "handshake" in str(info.value) and "0.2 s" in str(info.value), str(info.value)


@pytest.mark.parametrize("channel", [-1, 2])
def test_a_channel_out_of_range_is_refused(inbox: Inbox, channel: int) -> None:
    """A header naming a channel the receiving task does not have (-1 would land
    in the last channel by Python's negative indexing) is refused, and the
    sender's send fails saying which channel and what the bound is."""
    mailbox = Mailbox(2, capacity=100)
    inbox.open("run", 1, mailbox)
    out = Outbox([[Route(inbox.endpoint, channel, 1)]], "run")
    with pytest.raises(DeliveryError) as info:
        out.send(0, 0, b"astray")
        out.drain()
    assert f"input channel {channel} is out of range: the receiving task has input channels 0 to 1" in str(info.value)
    assert _take_all(mailbox) == []


def test_a_late_sender_is_told_why_it_was_refused(inbox: Inbox) -> None:
    inbox.open("run", 8, mailbox := Mailbox(1, capacity=100))
    with pytest.raises(DeliveryError, match="attempt 7 of run 'run' is not running there"):
        Outbox([[Route(inbox.endpoint, 0, 7)]], "run").send(0, 0, b"late")
    assert _take_all(mailbox) == []


def test_an_inbox_that_cannot_start_a_reader_breaks_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """No thread for a new connection's reader: the inbox must not stay deaf (every
    later sender would wait on it). It closes its listener, so the sender at hand
    and every later one fail at once, and tells its owner why."""
    broken: list[BaseException] = []
    told = threading.Event()
    inbox = Inbox("127.0.0.1", on_broken=lambda cause: (broken.append(cause), told.set()))
    inbox.open("run", 1, mailbox := Mailbox(1, capacity=100))
    _fail_to_start_readers(monkeypatch)
    for expected in ("EOFError", "ConnectionRefusedError"):  # the sender at hand, then a later one
        started = time.monotonic()
        with pytest.raises(DeliveryError, match=expected):
            Outbox([[Route(inbox.endpoint, 0, 1)]], "run").send(0, 0, b"x")
        assert time.monotonic() - started < 3
    assert told.wait(5)  # the owner hears after the listener closed, on the accept thread
    assert [(type(e), str(e)) for e in broken] == [(RuntimeError, "can't start new thread")]
    assert _take_all(mailbox) == []
