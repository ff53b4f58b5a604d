"""Counts of lost and duplicated records for the keyed running-sum jobs.

A keyed running sum emits, per key, the running total after every record, so the
committed outputs of a key sorted ascending are that key's running totals in
processing order, and their successive differences are exactly the record values
it processed. Comparing those differences with the expected values as multisets
gives the records lost (expected, never applied) and duplicated (applied twice).
This holds because every record value is >= 0.
"""

from __future__ import annotations

import collections
import pathlib
import re
from dataclasses import dataclass
from typing import Any, Iterable


@dataclass
class Verdict:
    lost: int
    duplicated: int
    keys_wrong: int
    outputs: int

    @property
    def exact(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.keys_wrong == 0


def check_running_sums(outputs: Iterable[Any], inputs: Iterable[tuple[Any, int]]) -> Verdict:
    """``outputs``: committed ``(key, running_sum)`` pairs; ``inputs``: the ``(key, value)`` records."""
    expected: dict[Any, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for k, v in inputs:
        expected[k][v] += 1
    seen: dict[Any, list[int]] = collections.defaultdict(list)
    n = 0
    for k, total in outputs:
        seen[k].append(total)
        n += 1
    lost = dup = wrong = 0
    for k in expected.keys() | seen.keys():
        totals = sorted(seen.get(k, []))
        applied = collections.Counter(b - a for a, b in zip([0] + totals, totals))
        exp = expected.get(k, collections.Counter())
        lost += sum((exp - applied).values())
        dup += sum((applied - exp).values())
        wrong += (max(totals) if totals else 0) != sum(v * c for v, c in exp.items())
    return Verdict(lost, dup, wrong, n)


@dataclass
class SequenceVerdict:
    """Jepsen total-queue style counts over records that each carry a unique
    (partition, sequence); ``out_of_order`` counts, within one committed file,
    a partition's sequence not above the one before it."""

    lost: int
    duplicated: int
    unexpected: int
    out_of_order: int
    per_partition: dict[Any, tuple[int, int]]  # partition -> (lost, duplicated)

    @property
    def exact(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected or self.out_of_order)


def check_sequences(files: Iterable[Iterable[tuple[Any, int]]], expected: dict[Any, int]) -> SequenceVerdict:
    """``files``: the committed (partition, sequence) records, file by file, in file
    order; ``expected``: per partition, how many sequences (0..n-1) went in."""
    seen: dict[Any, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    unexpected = out_of_order = 0
    for records in files:
        last: dict[Any, int] = {}
        for partition, seq in records:
            if partition not in expected or not 0 <= seq < expected[partition]:
                unexpected += 1
                continue
            if seq <= last.get(partition, -1):
                out_of_order += 1
            last[partition] = seq
            seen[partition][seq] += 1
    per: dict[Any, tuple[int, int]] = {}
    for partition, n in expected.items():
        counts = seen.get(partition, collections.Counter())
        per[partition] = (n - len(counts), sum(c - 1 for c in counts.values()))
    return SequenceVerdict(
        sum(lost for lost, _ in per.values()), sum(d for _, d in per.values()), unexpected, out_of_order, per
    )


def shared_folder_problems(shared: pathlib.Path, named: set[str], latest_kept: int) -> list[str]:
    """What is wrong with a run's shared folder after its job was cancelled: a file
    a kept checkpoint names is missing, or a file stayed that belongs to no
    checkpoint newer than the latest kept one (only those, in flight at the
    cancel, may have been written after the job master's last deletion)."""
    on_disk = {f"file://{p}" for p in shared.iterdir()}
    missing = [f"missing: {uri}" for uri in sorted(named - on_disk)]
    stale = [
        f"not deleted: {uri}"
        for uri in sorted(on_disk - named)
        if int(re.search(r"-(\d+)-[0-9a-f]{12}", uri.rsplit("/", 1)[1]).group(1)) <= latest_kept
    ]
    return missing + stale
