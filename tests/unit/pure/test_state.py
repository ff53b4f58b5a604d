from __future__ import annotations

import pytest

from weir.runtime.keygroups import KeyGroupRange
from weir.runtime.state import (
    KeyedStateBackend,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ValueState,
    ValueStateDescriptor,
    keyed_state,
    redistribute_lists,
)


def _backend(p: int, i: int, max_p: int = 128) -> KeyedStateBackend:
    return KeyedStateBackend(max_p, KeyGroupRange.for_subtask(max_p, p, i))


def test_keyed_state_rescales_by_key_group_without_loss_or_overlap():
    old = [_backend(2, i) for i in range(2)]
    from weir.runtime.keygroups import key_group_for, operator_index_for_key_group

    for key in range(1000):
        owner = operator_index_for_key_group(128, 2, key_group_for(key, 128))
        old[owner].table("sum")[key] = key * 10
    snaps = [(b.key_groups, b.snapshot(1)) for b in old]
    for new_p in (1, 3, 5):
        new = [_backend(new_p, i) for i in range(new_p)]
        for b in new:
            b.restore(snaps)
        merged = {}
        for b in new:
            table = b.table("sum")
            assert not merged.keys() & table.keys()
            merged.update(table)
        assert merged == {k: k * 10 for k in range(1000)}


def test_value_list_and_map_state_follow_the_current_key():
    b = _backend(1, 0)
    v = ValueState(b, ValueStateDescriptor("v", default=0))
    lst = keyed_state(b, ListStateDescriptor("l"))
    m = MapState(b, MapStateDescriptor("m"))
    for key in ("a", "b"):
        b.current_key = key
        v.update(v.value() + len(key))
        lst.add(key)
        lst.add(key.upper())
        m.put("k", key)
    b.current_key = "a"
    assert (v.value(), list(lst.get()), m.get("k")) == (1, ["a", "A"], "a")
    m.remove("k")
    assert m.is_empty() and "a" not in b.table("m")
    v.clear()
    assert v.value() == 0


@pytest.mark.parametrize("old_p,new_p", [(2, 2), (2, 3), (3, 1), (1, 4)])
def test_list_state_splits_evenly_and_keeps_every_entry(old_p, new_p):
    previous = [{"splits": [f"s{i}-{j}" for j in range(3)]} for i in range(old_p)]
    new = [redistribute_lists(previous, i, new_p)["splits"] for i in range(new_p)]
    assert sorted(x for part in new for x in part) == sorted(x for p in previous for x in p["splits"])
    assert max(map(len, new)) - min(map(len, new)) <= 1 or old_p == new_p
    if old_p == new_p:
        assert new == [p["splits"] for p in previous]
