"""Which checkpoint task files later checkpoints still name (Flink's shared state
registry): a checkpoint that writes only changes names the files it builds on,
so a file is deleted only once no kept checkpoint names it.

Sans-IO: the checkpoint flow tells it what completed, was discarded or aborted,
and deletes the files it answers with. Only files in this run's shared folder
are ever answered: a restore point of another run (a checkpoint given to start
from) or a savepoint is never deleted by this one.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from weir.runtime.storage import StateHandle, handle_from_json, within


def metadata_files(metadata: dict[str, Any]) -> set[str]:
    """Every task file a checkpoint's metadata names, each chain's too, and the
    backend files (RocksDB's) each of those names."""
    return {
        uri
        for op in metadata.get("operators", {}).values()
        for h in op["handles"]
        if h is not None
        for link in handle_from_json(h).chain
        for uri in link.uris
    }


class SharedFiles:
    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._refs: Counter[str] = Counter()
        self._files: dict[int, set[str]] = {}  # kept checkpoint id -> the files it names
        self._bases: Counter[int] = Counter()  # checkpoint -> pending checkpoints built on it
        self._released: set[int] = set()  # discarded while a pending checkpoint was built on it
        self.latest: int | None = None  # the newest completed checkpoint: the next one's base

    def completed(self, checkpoint_id: int, metadata: dict[str, Any]) -> None:
        files = {uri for uri in metadata_files(metadata) if within(uri, self.folder)}
        self._files[checkpoint_id] = files
        self._refs.update(files)
        if self.latest is None or checkpoint_id > self.latest:
            self.latest = checkpoint_id

    def build_on(self, base: int | None) -> None:
        """A pending checkpoint writes changes against ``base``: keep its files."""
        if base is not None:
            self._bases[base] += 1

    def built(self, base: int | None) -> list[str]:
        """A checkpoint built on ``base`` ended: the files now free to delete."""
        if base is None:
            return []
        self._bases[base] -= 1
        if self._bases[base] > 0:
            return []
        del self._bases[base]
        return self.discarded([base]) if base in self._released else []

    def discarded(self, checkpoint_ids: Iterable[int]) -> list[str]:
        """Checkpoints no longer kept: the files no other kept checkpoint names."""
        free = []
        for cid in checkpoint_ids:
            if cid in self._bases:
                self._released.add(cid)
                continue
            self._released.discard(cid)
            for uri in self._files.pop(cid, ()):
                self._refs[uri] -= 1
                if self._refs[uri] == 0:
                    del self._refs[uri]
                    free.append(uri)
        return free

    def unreferenced(self, handles: Iterable[StateHandle]) -> list[str]:
        """Of the files an aborted checkpoint's tasks wrote, those no checkpoint names."""
        return self.unnamed(uri for h in handles for uri in h.uris)

    def unnamed(self, uris: Iterable[str]) -> list[str]:
        """Of these files, those in this run's shared folder that no kept checkpoint names."""
        return [uri for uri in uris if within(uri, self.folder) and uri not in self._refs]
