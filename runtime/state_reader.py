"""Reading a savepoint's or a checkpoint's keyed state outside any job: from a
notebook, as a ``pyarrow.Table`` (``key``, ``value``) or a dict.

    from weir import read_keyed_state
    counts = read_keyed_state("/savepoints/savepoint-1a2b3c-...", "counts")  # an operator's uid or name

An operator may hold several keyed states: name one with ``state=`` (the error
lists them). A keyed ``reduce`` keeps its values as ``_reduce``; windows and
timers keep theirs under names that begin with ``_`` too. Values with a time to
live are read without their timestamps. The files are pickles, checksummed:
read only savepoints and checkpoints that you or your jobs wrote.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from weir.runtime.errors import InvalidConfigurationError
from weir.runtime.incremental import FileKeyed, KeyedSnapshot, located, merged
from weir.runtime.keygroups import KeyGroupRange
from weir.runtime.state import TtlValue
from weir.runtime.storage import find_restore_point, handle_from_json, read_metadata, read_state


def read_keyed_state(path: str, operator: str, state: str | None = None) -> pa.Table:
    """One keyed state of ``operator`` (its uid, or its name) in the savepoint or
    checkpoint at ``path``, as a table of ``key`` and ``value``."""
    entries = read_keyed_state_dict(path, operator, state)
    try:
        return pa.table({"key": pa.array(list(entries)), "value": pa.array(list(entries.values()))})
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise TypeError(
            f"keyed state {state or '(the only one)'} of operator '{operator}' holds keys or values that "
            f"pyarrow cannot put in a column ({exc}); read them as Python objects with read_keyed_state_dict()"
        ) from None


def read_keyed_state_dict(path: str, operator: str, state: str | None = None) -> dict[Any, Any]:
    """Like :func:`read_keyed_state`, as a dict ``key -> value``."""
    location = find_restore_point(path)
    uid, entry = _operator(read_metadata(location), operator, location)
    tables: dict[str, dict[Any, Any]] = {}
    for h in entry["handles"]:
        if h is None:
            continue
        links = handle_from_json(h).chain
        chain = [read_state(link).get(uid) for link in links]
        keyed = [located(s.keyed, link.files) for s, link in zip(chain, links) if s is not None and s.keyed]
        if keyed:
            whole = merged(keyed)
            ttl_states = getattr(whole, "ttl_states", ())  # a snapshot before they were named: none
            for name, entries in _tables(whole, entry["max_parallelism"]).items():
                tables.setdefault(name, {}).update(_plain(entries, name in ttl_states))
    if state is None and len(tables) == 1:
        state = next(iter(tables))
    if state not in tables:
        raise InvalidConfigurationError(
            f"keyed state of operator '{operator}'",
            state,
            f"name one of {sorted(tables)} with state=..." if tables else "this operator holds no keyed state there",
        )
    return tables[state]


def _operator(metadata: dict[str, Any], operator: str, location: str) -> tuple[str, dict[str, Any]]:
    ops = metadata["operators"]
    if operator in ops:
        return operator, ops[operator]
    named = [uid for uid, op in ops.items() if op.get("name") == operator]
    if len(named) == 1:
        return named[0], ops[named[0]]
    raise InvalidConfigurationError(
        "operator",
        operator,
        f"is not one uid or name in {location}; its operators (uid: name): "
        + ", ".join(f"{uid}: {op.get('name', '?')}" for uid, op in ops.items()),
    )


def _tables(keyed: Any, max_parallelism: int) -> dict[str, dict[Any, Any]]:
    if isinstance(keyed, KeyedSnapshot):
        return keyed.tables
    if isinstance(keyed, FileKeyed):
        return keyed.tables_in(KeyGroupRange(0, max_parallelism))
    out: dict[str, dict[Any, Any]] = {}
    for groups in keyed.values():  # an older file: key group -> name -> entries
        for name, entries in groups.items():
            out.setdefault(name, {}).update(entries)
    return out


def _plain(entries: dict[Any, Any], ttl: bool) -> dict[Any, Any]:
    """A state's entries without their time-to-live timestamps: those of a state the
    snapshot names as a TTL state, or (a snapshot before 2026-11-29, which names
    none) those held in weir's old ``TtlValue`` class, which every entry of such a
    state was."""
    if not ttl and not _old_ttl_entry(next(iter(entries.values()), None)):
        return entries
    return {k: _without_timestamps(v) for k, v in entries.items()}


def _old_ttl_entry(stored: Any) -> bool:
    if isinstance(stored, (list, dict)) and stored:
        stored = next(iter(stored if isinstance(stored, list) else stored.values()))
    return isinstance(stored, TtlValue)


def _without_timestamps(stored: Any) -> Any:
    """A time-to-live state's stored value without its timestamps: its entry's
    value, or its list or map of entries' values."""
    if isinstance(stored, tuple):
        return stored[0]
    if isinstance(stored, list):
        return [e[0] for e in stored]
    return {k: e[0] for k, e in stored.items()}
