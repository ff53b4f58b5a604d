"""Nexmark (bench/nexmark): the generator follows Nexmark's rules and is
deterministic from its seed; every query on weir's in-process executor gives
exactly what its plain-Python reference computes from the same Parquet files."""

from __future__ import annotations

import collections
import glob
import os
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from bench.nexmark import generator, queries, reference
from bench.nexmark.generator import GeneratorConfig

SLOW = GeneratorConfig(seed=7, events_per_second=500)  # 20,000 events span 40 s of event time: several windows


def parts(data: str, kind: str) -> list[str]:
    return sorted(glob.glob(os.path.join(data, kind, "part-*.parquet")))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    """20,000 events, 4 part files per kind."""
    folder = str(tmp_path_factory.mktemp("nexmark"))
    generator.write(folder, 20_000, SLOW, events_per_part=5_000)
    return folder


# ---------------------------------------------------------------------- the generator
def test_events_come_as_persons_auctions_and_bids_one_to_three_to_forty_six():
    cfg = GeneratorConfig()
    tables = generator.tables(cfg, 0, 50_000, with_event=True)
    assert {k: t.num_rows for k, t in tables.items()} == {"person": 1_000, "auction": 3_000, "bid": 46_000}
    assert cfg.counts(50_000) == {"person": 1_000, "auction": 3_000, "bid": 46_000}
    assert cfg.counts(57) == {"person": 2, "auction": 6, "bid": 49}  # event 50 a person, 51-53 auctions, 54-56 bids
    for kind, table in tables.items():
        assert {cfg.kind_of(e) for e in table.column("event").to_pylist()} == {kind}


def test_the_same_seed_gives_the_same_events_and_a_prefix_is_a_shorter_run(tmp_path):
    a, b, c = (str(tmp_path / name) for name in "abc")
    generator.write(a, 25_000, GeneratorConfig(seed=3), events_per_part=10_000)
    generator.write(b, 25_000, GeneratorConfig(seed=3), events_per_part=7_000)  # other files, same events
    generator.write(c, 25_000, GeneratorConfig(seed=4), events_per_part=10_000)
    for kind in generator.KINDS:
        ta, tb, tc = (pq.read_table(f"{x}/{kind}").to_pylist() for x in (a, b, c))
        assert ta == tb
        assert ta != tc
    shorter = generator.tables(GeneratorConfig(seed=3), 0, 12_345)
    longer = generator.tables(GeneratorConfig(seed=3), 0, 25_000)
    for kind in generator.KINDS:
        assert shorter[kind].to_pylist() == longer[kind].slice(0, shorter[kind].num_rows).to_pylist()


def test_any_event_can_be_made_alone_as_an_in_process_source_needs():
    cfg = GeneratorConfig(seed=5)
    in_order = list(generator.events(30_100, cfg))
    for i in (0, 1, 4, 49, 50, 9_999, 10_000, 10_053, 30_099):
        assert generator.event_at(i, cfg) == in_order[i]
    bids = [row for kind, row in in_order if kind == "bid"]
    assert generator.row_at("bid", 12_345, cfg) == bids[12_345]
    assert generator.row_at("auction", 7, cfg, columns=("id", "seller")) == {
        k: [row for kind, row in in_order if kind == "auction"][7][k] for k in ("id", "seller")
    }


def test_the_files_are_the_data_contract(data):
    assert generator.read_meta(data)["counts"] == {"person": 400, "auction": 1_200, "bid": 18_400}
    for kind, schema in generator.SCHEMAS.items():
        files = parts(data, kind)
        assert [f.rsplit("/", 1)[1] for f in files] == [f"part-{i:05d}.parquet" for i in range(4)]
        assert all(pq.read_schema(f).remove_metadata() == schema for f in files)
    assert str(generator.SCHEMAS["bid"]) == (
        "auction: int64\nbidder: int64\nprice: int64\nchannel: string\nurl: string\ndateTime: int64\nextra: string"
    )


def test_ids_come_from_event_numbers_and_references_point_at_existing_or_soon_made_ones():
    cfg = GeneratorConfig(seed=11)
    t = {k: v.to_pydict() for k, v in generator.tables(cfg, 0, 200_000, with_event=True).items()}
    persons, auctions, bids = t["person"], t["auction"], t["bid"]
    assert persons["id"] == list(range(1000, 1000 + len(persons["id"])))
    assert auctions["id"] == list(range(1000, 1000 + len(auctions["id"])))
    # A reference is to one of the last 1,000 persons / 100 auctions, or at most 10 ahead of the newest.
    newest_person = generator.last_base0_person_id(cfg, np.array(bids["event"])) + 1000
    newest_auction = generator.last_base0_auction_id(cfg, np.array(bids["event"])) + 1000
    bidder, auction = np.array(bids["bidder"]), np.array(bids["auction"])
    assert (bidder >= np.maximum(newest_person - 999, 1000)).all() and (bidder <= newest_person + 10).all()
    assert (auction >= np.maximum(newest_auction - 100, 1000)).all() and (auction <= newest_auction + 10).all()
    seller = np.array(auctions["seller"])
    newest_seller = generator.last_base0_person_id(cfg, np.array(auctions["event"])) + 1000
    assert (seller >= 1000).all() and (seller <= newest_seller + 10).all()
    # So only the last few ids referred to may not exist yet when the data ends.
    assert set(bids["auction"]) - set(auctions["id"]) <= set(range(max(auctions["id"]) + 1, max(auctions["id"]) + 11))
    known = set(persons["id"])
    assert set(bids["bidder"]) - known <= set(range(max(known) + 1, max(known) + 11))
    assert set(auctions["seller"]) - known <= set(range(max(known) + 1, max(known) + 11))
    # Hot auctions, bidders and sellers (at least 1 - 1/ratio: the others may hit them too).
    hot_auction = (newest_auction - 1000) // 100 * 100 + 1000
    assert 0.49 < np.mean(auction == hot_auction) < 0.53
    hot_bidder = (newest_person - 1000) // 100 * 100 + 1001
    assert 0.74 < np.mean(bidder == hot_bidder) < 0.78
    hot_seller = (newest_seller - 1000) // 100 * 100 + 1000
    assert 0.74 < np.mean(seller == hot_seller) < 0.78


def test_event_time_advances_ten_thousand_events_a_second_and_auctions_expire_soon_after():
    cfg = GeneratorConfig(seed=2)
    t = {k: v.to_pydict() for k, v in generator.tables(cfg, 0, 100_000, with_event=True).items()}
    for kind in generator.KINDS:
        assert t[kind]["dateTime"] == [generator.BASE_TIME_MS + e // 10 for e in t[kind]["event"]]
    a = t["auction"]
    length = np.array(a["expires"]) - np.array(a["dateTime"])
    # 1 + uniform[0, 2 * horizon): the horizon is the time 100 more auctions take, 1,666 events = 166 ms
    assert length.min() >= 1 and length.max() <= 333 and 150 < length.mean() < 183
    assert set(a["category"]) == {10, 11, 12, 13, 14}
    assert all(r >= i for r, i in zip(a["reserve"], a["initialBid"]))
    prices = np.array(t["bid"]["price"])
    assert prices.min() >= 100 and prices.max() <= 100_000_000
    channels = collections.Counter(t["bid"]["channel"])
    assert 0.48 < sum(channels[c] for c in generator.HOT_CHANNELS) / len(prices) < 0.52
    # extra pads each kind to its average size (bids: 100 bytes, of which 32 are the numbers)
    assert 62 < np.mean([len(e) for e in t["bid"]["extra"]]) < 74


def test_the_command_writes_the_folder_and_reuses_it(tmp_path, monkeypatch, capsys):
    out = str(tmp_path / "nexmark")
    argv = ["generator", "--events", "3000", "--seed", "9", "--out", out, "--events-per-part", "1000"]
    monkeypatch.setattr(sys, "argv", argv)
    generator.main()
    assert "3,000 events (60 persons, 180 auctions, 2,760 bids)" in capsys.readouterr().out
    first = pq.read_table(f"{out}/bid").to_pylist()
    assert generator.config_of(out) == GeneratorConfig(seed=9)
    before = {p: os.stat(p).st_mtime_ns for p in parts(out, "bid")}
    generator.main()  # the same request: the files stay
    assert {p: os.stat(p).st_mtime_ns for p in parts(out, "bid")} == before
    monkeypatch.setattr(sys, "argv", argv[:-2])  # another part size: written again, the same events
    generator.main()
    assert len(parts(out, "bid")) == 1 and pq.read_table(f"{out}/bid").to_pylist() == first


# ---------------------------------------------------------------------- the queries, exact
@pytest.mark.parametrize("query", ["q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q11", "q20"])
def test_a_query_on_weir_gives_exactly_what_its_reference_computes(query, data, tmp_path):
    expected = reference.QUERIES[query](data)
    run = queries.run(query, queries.ParquetInput(data), 2, str(tmp_path / "out"), executor="local")
    reference.check(query, run.output, expected)  # raises OutputMismatch, saying what differs
    assert run.output, f"{query} found nothing in the test data: it checks nothing"


def test_the_window_queries_have_several_windows_and_ties_to_check(data):
    assert len({end for _, _, end in reference.q5(data)}) > 15  # 40 s of event time, a window every 2 s
    assert len({t - t % 10_000 for *_, t, _ in reference.q7(data)}) >= 4
    sessions = collections.Counter(bidder for bidder, *_ in reference.q11(data))
    assert max(sessions.values()) > 1  # some bidders have more than one session


def test_processing_time_windows_add_up_to_no_more_than_the_bids(data, tmp_path):
    run = queries.run("q12", queries.ParquetInput(data), 2, str(tmp_path / "out"), executor="local", window_ms=20)
    verdict = reference.check("q12", run.output, reference.q12(data), window_ms=20)
    assert run.output and verdict.startswith("consistent")


def test_the_in_process_generator_is_a_source_of_the_same_events(data, tmp_path):
    source = queries.GeneratedInput(20_000, SLOW)
    run = queries.run("q7", source, 2, str(tmp_path / "out"), executor="local")
    reference.check("q7", run.output, reference.q7(data))


def test_a_wrong_output_fails_the_check_saying_what_differs(data):
    expected = reference.q8(data)
    with pytest.raises(reference.OutputMismatch, match=r"1 missing .* 1 unexpected"):
        reference.check("q8", [*expected[1:], (1, "nobody", 0)], expected)
    with pytest.raises(reference.OutputMismatch, match="q4"):
        reference.check("q4", [(10, 1.0)], reference.q4(data))
