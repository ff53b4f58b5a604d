"""The job graph as a picture: an SVG a browser opens and a notebook shows.

Vertices are boxes laid out left to right by their distance from the sources,
each listing its chained operators first to last, with its parallelism; edges
are arrows labelled with their partitioner (and side output). No layout library
and no Graphviz: a job graph is a small DAG, and SVG is text.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from weir.runtime.graph import JobGraph

_W, _LINE, _PAD, _GAP_X, _GAP_Y = 230, 16, 10, 90, 28
_FONT = "font-family='Helvetica, Arial, sans-serif'"


def _fit(text: str, chars: int = 34) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def job_graph_svg(graph: "JobGraph") -> str:
    layer: dict[str, int] = {}
    for vid, v in graph.vertices.items():  # topological order: inputs come first
        layer[vid] = 1 + max((layer[e.source] for e in v.inputs), default=-1)
    columns: dict[int, list[str]] = {}
    for vid, n in layer.items():
        columns.setdefault(n, []).append(vid)

    def height(vid: str) -> int:
        return _PAD * 2 + _LINE * (1 + len(graph.vertices[vid].operators))

    where: dict[str, tuple[int, int]] = {}
    for n, vids in columns.items():
        y = _GAP_Y + 20
        for vid in vids:
            where[vid] = (_GAP_X // 2 + n * (_W + _GAP_X), y)
            y += height(vid) + _GAP_Y
    width = _GAP_X + len(columns) * (_W + _GAP_X) - _GAP_X // 2
    total_h = max(y for y in (where[v][1] + height(v) for v in where)) + _GAP_Y

    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{total_h}' viewBox='0 0 {width} {total_h}' font-size='12'>",
        "<defs><marker id='arrow' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='7' markerHeight='7' orient='auto'>"
        "<path d='M0,0 L10,5 L0,10 z' fill='#555'/></marker></defs>",
        "<rect width='100%' height='100%' fill='white'/>",
        f"<text x='{_GAP_X // 2}' y='22' {_FONT} font-size='14' font-weight='bold'>{escape(graph.name)}"
        f" ({escape(graph.runtime_mode.value.lower())})</text>",
    ]
    # Each box's edges attach at their own heights, in the order of the boxes at
    # their other ends, so arrows and their labels do not pile up.
    edges = [e for v in graph.vertices.values() for e in v.inputs]

    def port(vid: str, mine: list, other: str) -> dict[int, int]:
        ordered = sorted(mine, key=lambda e: where[getattr(e, other)][1])
        return {e.edge_id: where[vid][1] + height(vid) * (k + 1) // (len(ordered) + 1) for k, e in enumerate(ordered)}

    outs = {vid: port(vid, [e for e in edges if e.source == vid], "target") for vid in graph.vertices}
    ins = {vid: port(vid, [e for e in edges if e.target == vid], "source") for vid in graph.vertices}
    for e in edges:
        x1, y1 = where[e.source][0] + _W, outs[e.source][e.edge_id]
        x2, y2 = where[e.target][0], ins[e.target][e.edge_id]
        mid = (x1 + x2) // 2
        label = e.partition.kind + (f" [{e.side_output}]" if e.side_output else "")
        out.append(f"<path d='M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}' fill='none' stroke='#555' stroke-width='1.3' marker-end='url(#arrow)'/>")
        out.append(f"<text x='{x2 - 8}' y='{y2 - 4}' text-anchor='end' {_FONT} fill='#333'>{escape(label)}</text>")
    for vid, v in graph.vertices.items():
        x, y = where[vid]
        fill = "#e8f1fb" if v.is_source else "#f4f4f4"
        out.append(f"<rect x='{x}' y='{y}' width='{_W}' height='{height(vid)}' rx='6' fill='{fill}' stroke='#356' stroke-width='1.2'/>")
        out.append(f"<text x='{x + _PAD}' y='{y + _PAD + 12}' {_FONT} font-weight='bold'>{escape(_fit(vid, 28))}</text>")
        out.append(f"<text x='{x + _W - _PAD}' y='{y + _PAD + 12}' text-anchor='end' {_FONT} fill='#356' font-weight='bold'>"
                   f"×{v.parallelism}</text>")
        for i, op in enumerate(v.operators):
            prefix = "→ " if i else ""
            out.append(f"<text x='{x + _PAD}' y='{y + _PAD + 12 + _LINE * (i + 1)}' {_FONT}>{escape(_fit(prefix + op.name))}</text>")
    out.append("</svg>")
    return "\n".join(out)
