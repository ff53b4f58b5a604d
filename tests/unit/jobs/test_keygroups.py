from __future__ import annotations

import subprocess
import sys

import pytest

from weir import (
    DiscardingSink,
    JobExecutionError,
    KeySelectionError,
    RestartStrategy,
    StreamExecutionEnvironment,
)
from weir.runtime.keygroups import (
    KeyGroupRange,
    key_group_for,
    key_groups_for,
    operator_index_for_key_group,
    stable_hash,
)
from weir.runtime.network import KeyGroupPartitioner

KEYS = ["user-1", 42, -7, 3.5, 2.0, b"raw", None, True, ("a", 1, (2.5, None))]


def test_hash_is_the_same_in_another_process_with_another_hash_seed():
    code = (
        "import sys; sys.path.insert(0, %r); from weir.runtime.keygroups import stable_hash; "
        "print([stable_hash(k) for k in %r])" % (sys.path[0], KEYS)
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    ).stdout
    assert out.strip() == str([stable_hash(k) for k in KEYS])


def test_key_groups_stay_as_savepoints_wrote_them():
    """A key's group is part of every savepoint: a change to the encoding or the
    hash would restore state into groups no record routes to. These were
    computed by the code that wrote the first savepoints."""
    keys = [*KEYS, 0, 255, 256, -256, 2**63, -(2**64), 10**30]
    expected = [46, 56, 38, 102, 92, 53, 10, 45, 106, 77, 89, 70, 121, 105, 56, 51]
    assert [key_group_for(k, 128) for k in keys] == expected
    assert key_groups_for(keys, 128) == expected  # the batch form, with its inline int encoding
    assert key_groups_for(keys, 32768) == [
        32686,
        28728,
        15526,
        486,
        7900,
        23605,
        2826,
        19885,
        27626,
        28877,
        14425,
        2758,
        11897,
        25193,
        15928,
        18739,
    ]


def test_keys_equal_in_python_route_alike():
    # A key selector may return 1, 1.0 or True for one key: state keeps them as one key.
    assert stable_hash(2.0) == stable_hash(2)
    assert stable_hash(True) == stable_hash(1) == stable_hash(1.0) and stable_hash(False) == stable_hash(0)
    assert stable_hash(("a", True)) == stable_hash(("a", 1))


def test_the_partitioner_routes_each_key_to_its_groups_owner_whether_keys_repeat_or_not():
    """It caches recent keys' channels, and bypasses the cache for a while after a
    batch of keys it had never seen: the routes are the same either way."""
    partitioner = KeyGroupPartitioner(lambda r: r, 128, "Reduce")
    hot = [i % 7 for i in range(700)]
    batches = [list(range(1000)), hot, hot, list(range(1000, 2000)), *[hot] * 40, list(range(5000, 5300)) + hot]
    for batch in batches:
        parts, _ = partitioner.partition(batch, None, 3)
        routed = {key: channel for channel, part in enumerate(parts) for key in part}
        assert sorted(sum(parts, [])) == sorted(batch)
        assert routed == {k: operator_index_for_key_group(128, 3, key_group_for(k, 128)) for k in batch}


@pytest.mark.parametrize("first", [list(range(1000)), [1, 2] * 500])  # routed without the cache, then with it
def test_a_key_without_a_stable_hash_names_its_record_however_the_batch_is_routed(first):
    partitioner = KeyGroupPartitioner(lambda r: r[0], 128, "Reduce")
    partitioner.partition([(k,) for k in first], None, 2)
    with pytest.raises(
        KeySelectionError, match=r"key selector of operator 'Reduce' .*no stable hash.* on record \(\[1\],\)"
    ):
        partitioner.partition([(5,), ([1],), (6,)], None, 2)


@pytest.mark.parametrize("key", [[1, 2], {"a": 1}, {1, 2}])
def test_unhashable_keys_are_refused_with_the_key_named(key):
    with pytest.raises(TypeError, match="no stable hash"):
        key_group_for(key, 128)


@pytest.mark.parametrize("key", [float("nan"), ("a", float("nan")), (1, (None, float("nan")))])
def test_nan_keys_are_refused_since_nan_never_equals_itself(key):
    """NaN != NaN: state looked up under a NaN key never finds what was stored
    under it, so each record would start a new running value."""
    with pytest.raises(TypeError, match=r"key nan holds NaN, and NaN != NaN, so records with it cannot group"):
        key_group_for(key, 128)


def test_a_nan_key_fails_the_job_naming_the_operator_and_the_record():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)  # the first NaN fails
    env.set_restart_strategy(RestartStrategy.no_restart())
    records = [(1.5, 1), (float("nan"), 2), (1.5, 3), (float("nan"), 4)]
    env.from_collection(records).key_by(lambda r: r[0]).sum(1).sink_to(DiscardingSink())
    with pytest.raises(
        JobExecutionError,
        match=r"key selector of operator 'Sum' raised TypeError: key nan holds NaN, and NaN != NaN, "
        r".* on record \(nan, 2\)",
    ) as info:
        env.execute("nan-key", executor="local")
    assert isinstance(info.value.__cause__, KeySelectionError)


@pytest.mark.parametrize("max_p,p", [(128, 1), (128, 2), (128, 3), (128, 7), (10, 10), (32768, 5)])
def test_key_group_ranges_partition_all_groups(max_p, p):
    ranges = [KeyGroupRange.for_subtask(max_p, p, i) for i in range(p)]
    assert sum(len(r) for r in ranges) == max_p
    for i, r in enumerate(ranges):
        assert all(operator_index_for_key_group(max_p, p, kg) == i for kg in (r.start, r.end - 1))
    assert [r.start for r in ranges[1:]] == [r.end for r in ranges[:-1]]
