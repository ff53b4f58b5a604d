from __future__ import annotations

import threading

import pytest

from weir.runtime.mailbox import DataLetter, Mailbox, MailboxClosedError


def test_deliveries_come_out_in_sequence_whatever_the_arrival_order():
    m = Mailbox(1, capacity=8)
    for seq in (2, 0, 3, 1):
        m.put_data(0, seq, f"d{seq}")
    assert [m.take(0).payload for _ in range(4)] == ["d0", "d1", "d2", "d3"]
    assert m.take(0) is None


def test_a_gap_holds_back_later_deliveries():
    m = Mailbox(1)
    m.put_data(0, 1, "d1")
    assert m.take(0) is None
    m.put_data(0, 0, "d0")
    assert m.take(0).payload == "d0"


def test_control_letters_overtake_data():
    m = Mailbox(1)
    m.put_data(0, 0, "data")
    m.put_control("stop")
    assert m.take(0) == "stop"
    assert isinstance(m.take(0), DataLetter)


def test_blocked_channels_are_skipped():
    m = Mailbox(2)
    m.put_data(0, 0, "a")
    m.put_data(1, 0, "b")
    letter = m.take(0, blocked={0})
    assert (letter.channel, letter.payload) == (1, "b")
    assert m.take(0, blocked={0}) is None
    assert m.take(0).payload == "a"


def test_duplicate_delivery_is_refused():
    m = Mailbox(1)
    m.put_data(0, 0, "a")
    with pytest.raises(ValueError, match="twice"):
        m.put_data(0, 0, "a")


def test_a_full_channel_blocks_its_producer_until_the_loop_takes_one():
    m = Mailbox(1, capacity=1)
    m.put_data(0, 0, "a")
    entered, done = threading.Event(), threading.Event()

    def producer():
        entered.set()
        m.put_data(0, 1, "b")
        done.set()

    t = threading.Thread(target=producer)
    t.start()
    entered.wait()
    assert not done.wait(0.2), "put into a full channel must wait"
    assert m.take(0).payload == "a"
    assert done.wait(5)
    assert m.take(0).payload == "b"


def test_close_wakes_a_blocked_producer_with_an_error():
    m = Mailbox(1, capacity=1)
    m.put_data(0, 0, "a")
    errors = []

    def producer():
        try:
            m.put_data(0, 1, "b")
        except MailboxClosedError as exc:
            errors.append(exc)

    t = threading.Thread(target=producer)
    t.start()
    m.close()
    t.join(5)
    assert len(errors) == 1
