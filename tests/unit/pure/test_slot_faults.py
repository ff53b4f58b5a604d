"""Faults that leave a slot (task actor) unable to work: it must end, so the job
fails its task over and the pool replaces it, rather than sit in the pool deaf.
Built outside Ray, as in test_task_actor_abandon."""

from __future__ import annotations

import logging
import os
import threading

import pytest

from tests.unit.pure.test_exchange import _fail_to_start_readers
from weir.actors.exchange import DeliveryError, Outbox, Route
from weir.actors.task_actor import TaskActor
from weir.runtime.mailbox import Mailbox


def test_a_slot_whose_inbox_cannot_start_a_reader_ends_its_process(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    exits: list[int] = []
    ended = threading.Event()
    monkeypatch.setattr(os, "_exit", lambda code: (exits.append(code), ended.set()))
    slot = TaskActor()
    slot._inbox.open("run", 1, Mailbox(1))
    _fail_to_start_readers(monkeypatch)
    with caplog.at_level(logging.CRITICAL, logger="weir.task_actor"), pytest.raises(DeliveryError):
        Outbox([[Route(slot.endpoint(), 0, 1)]], "run").send(0, 0, b"x")
    assert ended.wait(5) and exits == [1]
    assert "its inbox broke (RuntimeError: can't start new thread)" in caplog.text, caplog.text
