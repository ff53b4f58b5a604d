"""Folders a task process keeps on its node's local disk (each RocksDB's), and the
sweep that deletes those whose process has died.

A process that is killed (``weir kill``, a slot killed after the cancel grace,
the OOM killer) deletes nothing. Its RocksDB folder stays, and since a restore
hard-links checkpoint files into it, it keeps disk space that storage already
freed (about 0.9 GB a kill for a 50M-key job) until the disk is full.

So each folder carries an **owner file**, locked with ``fcntl.flock`` for as long
as its :class:`OwnedFolder` is open. The kernel drops the lock when the process
dies, however it dies, and a reused pid does not get it back. The file is
locked before it takes its name (written under a temporary name, then renamed),
so a folder whose owner file can be locked has an owner that is gone. The file
holds the owner's pid and host, for a person looking at the disk.

:func:`sweep` deletes a folder of a parent only when all three hold: its name
starts with weir's prefix, it holds weir's owner file, and that file's lock can
be taken. It never deletes what weir did not write (a folder of an older weir,
without an owner file, stays), nor a live owner's folder (a process that forked
without exec shares the lock with its child: the folder stays until both ended).

Threads: an :class:`OwnedFolder` belongs to the thread that made it; :func:`sweep`
may run on any thread, in any process of the node, at the same time as others.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import socket
import tempfile

log = logging.getLogger("weir.local_folders")

ROCKSDB_PREFIX = "weir-rocksdb-"
OWNER_FILE = "weir-owner"

_parents: set[str] = set()  # where this process made folders: :func:`sweep_known` looks there too


class OwnedFolder:
    """A fresh folder ``<parent>/<prefix>…`` with a locked owner file, for this
    process's lifetime or until :meth:`remove`."""

    def __init__(self, parent: str, prefix: str) -> None:
        os.makedirs(parent, 0o700, exist_ok=True)
        _parents.add(os.path.abspath(parent))
        self.path = tempfile.mkdtemp(prefix=prefix, dir=parent)
        taking = os.path.join(self.path, f"{OWNER_FILE}.taking")
        self._lock = os.open(taking, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh file: no one else holds it
        os.write(self._lock, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        os.rename(taking, os.path.join(self.path, OWNER_FILE))

    def remove(self) -> None:
        """Delete the folder, then let go of its lock (so no sweep sees it unowned)."""
        if self._lock < 0:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._lock)
        self._lock = -1


def sweep(parent: str, prefix: str = ROCKSDB_PREFIX) -> list[str]:
    """Delete the folders in ``parent`` whose owner has died (see the module's doc);
    returns their paths. Never raises: what it cannot read or delete it leaves,
    with a warning for a dead owner's folder it could not delete."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return []  # no such parent (yet): nothing of weir's in it
    swept = []
    for name in names:
        folder = os.path.join(parent, name)
        try:
            owner = os.open(os.path.join(folder, OWNER_FILE), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # not weir's, not a folder, or swept meanwhile
        try:
            fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(owner)
            continue  # its owner lives
        try:
            shutil.rmtree(folder)
            swept.append(folder)
        except OSError as exc:
            log.warning("could not delete %s, a folder of a process that died: %s", folder, exc)
        finally:
            os.close(owner)
    if swept:
        log.info("deleted %d folder(s) of dead processes in %s", len(swept), parent)
    return swept


def sweep_known() -> list[str]:
    """:func:`sweep` of the temp folder (RocksDB's default place) and of every
    parent this process made folders in (a job's ``storage_paths``)."""
    return [path for parent in sorted({tempfile.gettempdir(), *_parents}) for path in sweep(parent)]
