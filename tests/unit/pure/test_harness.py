"""The public operator harness: snapshot -> close -> restore (also rescaled) -> open."""

from __future__ import annotations

from weir import KeyedProcessFunction, UserFunctionError, ValueStateDescriptor
from weir.runtime.keygroups import key_group_for, operator_index_for_key_group
from weir.runtime.testing import OperatorHarness


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n", default=0))

    def process_element(self, value, ctx):
        self.n.update(self.n.value() + 1)
        yield (ctx.get_current_key(), self.n.value())


def test_keyed_state_survives_a_restore_into_two_subtasks():
    h = OperatorHarness.keyed_process(Count(), key_selector=lambda r: r)
    assert h.process("a", "b", "a") == [("a", 1), ("b", 1), ("a", 2)]
    snap = h.snapshot(1)
    h.close()
    keys = ["a", "b", "c"]
    owner = {k: operator_index_for_key_group(128, 2, key_group_for(k, 128)) for k in keys}
    restored = [
        OperatorHarness.keyed_process(Count(), lambda r: r, restore=[snap], subtask=i, parallelism=2) for i in range(2)
    ]
    for k in keys:
        assert restored[owner[k]].process(k) == [(k, {"a": 3, "b": 2, "c": 1}[k])]


def test_reduce_and_map_harnesses_and_errors():
    r = OperatorHarness.reduce(lambda a, b: a + b, key_selector=lambda x: x % 2)
    assert r.process(1, 2, 3, 4) == [1, 2, 4, 6]
    m = OperatorHarness.map(lambda x: 10 // x)
    try:
        m.process(5, 0)
    except UserFunctionError as exc:
        assert exc.operator == "Map" and exc.record_repr == "0"
    else:
        raise AssertionError("expected a UserFunctionError")
