"""A Ray temp dir of a test's own: the clusters started under it stay apart from
the test session's, and are killed with it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def own_ray_tmpdir() -> Iterator[str]:
    """Yields a short temp dir (Ray keeps socket paths under it) for ``RAY_TMPDIR``;
    afterwards kills every process whose command line names it, since ``ray
    stop`` would stop every cluster on the machine, the session's too."""
    own = tempfile.mkdtemp(prefix="wv", dir="/tmp")
    try:
        yield own
    finally:
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if own.encode() in cmdline.read_bytes() and int(cmdline.parent.name) != os.getpid():
                    os.kill(int(cmdline.parent.name), signal.SIGKILL)
            except (OSError, ValueError):
                pass  # gone already
        shutil.rmtree(own, ignore_errors=True)
