from __future__ import annotations

import os
import pathlib

import pytest

from weir import DiscardingSink, InvalidJobGraphError, StreamExecutionEnvironment


def _env(p: int = 2) -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment().set_parallelism(p)


def test_forward_edges_with_equal_parallelism_chain_and_key_by_does_not():
    env = _env()
    (
        env.from_sequence(0, 9)
        .map(lambda x: x)
        .filter(bool)
        .key_by(lambda x: x % 2)
        .reduce(lambda a, b: a + b)
        .sink_to(DiscardingSink())
    )
    g = env.get_job_graph("g")
    assert [v.name for v in g.vertices.values()] == [
        "Source: sequence -> Map -> Filter",
        "Reduce -> Sink: DiscardingSink",
    ]
    (edge,) = g.vertices["reduce"].inputs
    assert edge.partition.kind == "hash"


def test_parallelism_change_gets_a_rebalance_edge():
    env = _env(2)
    env.from_sequence(0, 9).map(lambda x: x).set_parallelism(3).sink_to(DiscardingSink())
    g = env.get_job_graph("g")
    assert len(g.vertices) == 3
    assert g.vertices["map"].inputs[0].partition.kind == "rebalance"


def test_forward_between_different_parallelism_is_an_error_naming_both_operators():
    env = _env(2)
    env.from_sequence(0, 9).forward().map(lambda x: x).name("enrich").set_parallelism(3).sink_to(DiscardingSink())
    with pytest.raises(InvalidJobGraphError, match="'Source: sequence'.*'enrich'"):
        env.get_job_graph("g")


def test_parallelism_above_max_parallelism_names_the_operator():
    env = _env(2)
    env.from_sequence(0, 9).map(lambda x: x).name("score").set_parallelism(8).set_max_parallelism(4).sink_to(
        DiscardingSink()
    )
    with pytest.raises(InvalidJobGraphError, match="operator 'score': parallelism 8 is above its max parallelism 4"):
        env.get_job_graph("g")


def test_duplicate_uids_are_refused():
    env = _env()
    s = env.from_sequence(0, 9)
    s.map(lambda x: x).uid("same").sink_to(DiscardingSink())
    s.map(lambda x: x).uid("same").sink_to(DiscardingSink())
    with pytest.raises(InvalidJobGraphError, match="uid 'same'"):
        env.get_job_graph("g")


def test_a_job_without_sink_is_refused():
    env = _env()
    env.from_sequence(0, 9).map(lambda x: x)
    with pytest.raises(InvalidJobGraphError, match="no sink"):
        env.get_job_graph("g")


def test_union_feeds_one_vertex_from_two_sources():
    env = _env(1)
    a = env.from_sequence(0, 4)
    b = env.from_collection([10, 11])
    a.union(b).map(lambda x: x).sink_to(DiscardingSink())
    g = env.get_job_graph("g")
    assert len(g.vertices["map"].inputs) == 2


PICTURE = pathlib.Path(__file__).resolve().parents[3] / "docs" / "images" / "job-graph.svg"


def _pictured():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    clicks = env.from_collection([("a", 1)]).name("clicks")
    clicks.map(lambda kv: kv).name("parse").key_by(lambda kv: kv[0]).sum(1).name("totals").set_parallelism(3).sink_to(
        DiscardingSink()
    )
    clicks.rebalance().map(lambda kv: kv).name("audit").sink_to(DiscardingSink())
    return env.get_job_graph("pictured")


def test_the_job_graph_picture_shows_vertices_chains_parallelism_and_partitioners():
    import xml.etree.ElementTree as ET

    graph = _pictured()
    svg = graph._repr_svg_()  # what a notebook shows
    texts = [t.text for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")]
    assert texts[0] == "pictured (streaming)"
    assert {
        "clicks",
        "parse",
        "totals",
        "audit",
        "→ Sink: DiscardingSink",
        "×2",
        "×3",
        "forward",
        "hash",
        "rebalance",
    } <= set(texts), texts
    assert svg.count("marker-end") == sum(len(v.inputs) for v in graph.vertices.values())


def test_the_picture_in_the_docs_is_what_weir_draws_today():
    if os.environ.get("WEIR_REDRAW"):
        PICTURE.write_text(_pictured().to_svg())
    assert PICTURE.read_text() == _pictured().to_svg(), (
        "redraw it: WEIR_REDRAW=1 python3 -m pytest tests/unit/pure/test_graph.py"
    )
