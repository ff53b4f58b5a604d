"""Failure injection for weir's own reliability tests.

``WEIR_FAULT=<point>`` makes the process end abruptly (``os._exit``, like a
SIGKILL: no cleanup, no flushing) the first time it passes ``<point>``; the
file named by ``WEIR_FAULT_MARK`` records that it did, so the restarted process
goes on. Unset (always, outside tests), a check is one dictionary lookup.

Points: ``checkpoint-half-acknowledged`` and ``checkpoint-before-metadata`` (the
job master), ``task-aligning`` (a task holding back channels for a barrier),
``task-writing-snapshot`` (before a task writes its state), ``task-finishing``
(a task at the end of its input), ``task-committing`` (a task told that a
checkpoint completed, before its sinks commit).
"""

from __future__ import annotations

import os
import pathlib


def point(name: str) -> None:
    if os.environ.get("WEIR_FAULT") != name:
        return
    mark = pathlib.Path(os.environ.get("WEIR_FAULT_MARK", "/nonexistent/weir-fault-mark"))
    if mark.exists():
        return
    mark.write_text(name)
    os._exit(137)
