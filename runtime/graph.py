"""From the user's transformations to the job graph: parallelism, edges, chaining.

Consecutive operators joined by a forward edge with equal parallelism, where
neither side fans in or out, are chained into one vertex: its subtasks pass
records by function call. Every other edge crosses tasks through channels.
"""

from __future__ import annotations

import copy
import logging
import re
import uuid
from dataclasses import dataclass, field, replace
from html import escape
from typing import Any, Callable, Protocol

import cloudpickle

from weir.runtime.config import MAX_MAX_PARALLELISM, CheckpointConfig, ExecutionConfig, RuntimeExecutionMode
from weir.runtime.coordination import OperatorCoordinator
from weir.runtime.errors import InvalidConfigurationError, InvalidJobGraphError
from weir.runtime.network import (
    BroadcastPartitioner,
    CustomPartitioner,
    ForwardPartitioner,
    KeyGroupPartitioner,
    Partitioner,
    RebalancePartitioner,
    ShufflePartitioner,
)
from weir.runtime.typeinfo import RecordTypes

log = logging.getLogger("weir.graph")


class Operator(Protocol):
    """What the graph knows of the operators its specs make: their name and uid.
    They are :class:`weir.runtime.operators.StreamOperator` s, which only the task
    runs; the graph, which the job master and its rooms read, does not import them."""

    name: str
    uid: str


@dataclass(frozen=True)
class PartitionSpec:
    kind: str  # forward | rebalance | rescale | broadcast | shuffle | hash | custom | "" (forward or rebalance, by parallelism)
    key_selector: Callable[[Any], Any] | None = None
    side_output: str | None = None  # read this side output of the upstream operator
    input_index: int = 0  # which input of the target operator the edge feeds: 1 is a two-input operator's second
    custom: Callable[[Any, int], int] | None = None  # kind custom: the channel of a key, given the number of channels


@dataclass(eq=False)
class Transformation:
    id: int
    name: str
    make_operator: Callable[[str, str], Operator]
    inputs: list[tuple["Transformation", PartitionSpec | None]] = field(default_factory=list)
    uid: str | None = None
    parallelism: int | None = None
    max_parallelism: int | None = None
    is_source: bool = False
    bounded: bool = True  # a source's input ends
    resources: dict[str, float] = field(default_factory=dict)  # num_cpus, num_gpus, memory, or custom names
    make_coordinator: Callable[[], OperatorCoordinator] | None = None  # runs on the job master
    record_types: RecordTypes = field(default_factory=RecordTypes)  # output_type=, a read side output's tag type
    output: str | None = None  # a sink's exclusive output (Sink.exclusive_location): one running job writes there

    @property
    def effective_uid(self) -> str:
        return self.uid or f"{_slug(self.name)}-{self.id}"


@dataclass(frozen=True)
class OperatorSpec:
    name: str
    uid: str
    make: Callable[[str, str], Operator]
    make_coordinator: Callable[[], OperatorCoordinator] | None = None
    record_types: RecordTypes = field(default_factory=RecordTypes)

    def create(self) -> Operator:
        return self.make(self.name, self.uid)


@dataclass(frozen=True)
class JobEdge:
    edge_id: int
    source: str  # vertex id
    target: str  # vertex id
    partition: PartitionSpec
    input_index: int
    target_parallelism: int
    target_max_parallelism: int
    target_operator: str  # name of the operator the edge feeds (key selectors belong to it)
    source_operator: str = ""  # uid of the operator whose output the edge reads
    side_output: str | None = None

    def partitioner(self) -> Partitioner:
        kind = self.partition.kind
        if kind == "forward":
            return ForwardPartitioner()
        if kind in ("rebalance", "rescale"):
            return RebalancePartitioner()
        if kind == "broadcast":
            return BroadcastPartitioner()
        if kind == "shuffle":
            return ShufflePartitioner()
        assert self.partition.key_selector is not None
        if kind == "custom":
            assert self.partition.custom is not None
            return CustomPartitioner(self.partition.custom, self.partition.key_selector, self.target_operator)
        return KeyGroupPartitioner(self.partition.key_selector, self.target_max_parallelism, self.target_operator)

    @property
    def pointwise(self) -> bool:
        return self.partition.kind == "forward"


@dataclass
class JobVertex:
    id: str
    name: str
    parallelism: int
    max_parallelism: int
    operators: list[OperatorSpec]
    is_source: bool
    inputs: list[JobEdge] = field(default_factory=list)
    outputs: list[JobEdge] = field(default_factory=list)
    resources: dict[str, float] = field(default_factory=dict)  # what each of its task actors asks for
    resource_owners: list[str] = field(default_factory=list)  # the operators that asked


@dataclass
class JobGraph:
    name: str
    vertices: dict[str, JobVertex]  # in topological order
    execution: ExecutionConfig
    checkpointing: CheckpointConfig
    sinks: list[Transformation] = field(default_factory=list)  # the user's dataflow, to rebuild from
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])  # this submission: its checkpoints' folder
    runtime_mode: RuntimeExecutionMode = RuntimeExecutionMode.STREAMING  # STREAMING or BATCH, never AUTOMATIC

    def rescaled(self, parallelism: dict[str, int]) -> "JobGraph":
        """The same job with other parallelism for the operators named (by name or
        uid). Chaining is worked out anew; the max parallelism is the limit."""
        sinks = copy.deepcopy(self.sinks)
        by_name: dict[str, list[Transformation]] = {}
        for t in topological(sinks):
            by_name.setdefault(t.name, []).append(t)
            by_name.setdefault(t.effective_uid, []).append(t)
        for name, p in parallelism.items():
            if name not in by_name:
                known = sorted({t.name for t in topological(sinks)})
                raise InvalidJobGraphError(
                    f"job '{self.name}' has no operator named '{name}'; its operators: {', '.join(known)}"
                )
            if not isinstance(p, int) or isinstance(p, bool) or p < 1:
                raise InvalidJobGraphError(f"operator '{name}': parallelism {p!r} must be a whole number of at least 1")
            for t in by_name[name]:
                t.parallelism = p
        return replace(build_job_graph(self.name, sinks, self.execution, self.checkpointing), run_id=self.run_id)

    @property
    def outputs(self) -> dict[str, str]:
        """Each exclusive output of the job's sinks (a FileSink's folder, a Kafka
        transactional-id prefix) and the sink operator that writes it: while the
        job runs, no other job may write there."""
        return {t.output: t.name for t in topological(self.sinks) if t.output is not None}

    def to_svg(self) -> str:
        """The job graph as a picture (SVG): vertices with their chained operators
        and parallelism, edges with their partitioners. ``weir graph JOB`` writes it."""
        return job_graph_svg(self)

    def _repr_svg_(self) -> str:  # a notebook shows the graph as its picture
        return self.to_svg()

    @property
    def sources(self) -> list[JobVertex]:
        return [v for v in self.vertices.values() if v.is_source]

    def task_names(self) -> list[tuple[str, int]]:
        return [(v.id, i) for v in self.vertices.values() for i in range(v.parallelism)]

    def input_channels(self, key: tuple[str, int]) -> list[tuple[JobEdge, int]]:
        """Task ``key``'s input channels as (edge, producer subtask): a pointwise
        edge its own subtask of the producer, an all-to-all edge every subtask."""
        out: list[tuple[JobEdge, int]] = []
        for e in self.vertices[key[0]].inputs:
            out += [(e, key[1])] if e.pointwise else [(e, j) for j in range(self.vertices[e.source].parallelism)]
        return out

    def producers(self, key: tuple[str, int]) -> list[tuple[str, int]]:
        """The tasks whose output ``key`` reads."""
        return [(e.source, j) for e, j in self.input_channels(key)]

    def regions(self) -> list[frozenset[tuple[str, int]]]:
        """Pipelined regions: the sets of tasks joined by channels, directly or
        through others. Every channel is pipelined, so a failed task's region is
        what must rewind with it; tasks of other regions exchange nothing with it
        and may go on. A job of forward edges only has one region per subtask
        index; one shuffle joins every task it reaches."""
        parent = {k: k for k in self.task_names()}

        def root(k: tuple[str, int]) -> tuple[str, int]:
            while parent[k] != k:
                parent[k] = parent[parent[k]]
                k = parent[k]
            return k

        for key in parent:
            for p in self.producers(key):
                parent[root(p)] = root(key)
        groups: dict[tuple[str, int], set[tuple[str, int]]] = {}
        for key in parent:
            groups.setdefault(root(key), set()).add(key)
        return [frozenset(g) for g in groups.values()]


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "op"


def resolve_runtime_mode(mode: RuntimeExecutionMode, sources: list[Transformation]) -> RuntimeExecutionMode:
    """What ``mode`` means for a job reading ``sources``: ``AUTOMATIC`` is
    ``BATCH`` when every source is bounded, else ``STREAMING``; ``BATCH`` with an
    unbounded source is refused, naming it (as Flink refuses it)."""
    endless = [t.name for t in sources if not t.bounded]
    if mode is RuntimeExecutionMode.AUTOMATIC:
        return RuntimeExecutionMode.STREAMING if endless else RuntimeExecutionMode.BATCH
    if mode is RuntimeExecutionMode.BATCH and endless:
        which = ", ".join(f"'{name}'" for name in endless)
        raise InvalidConfigurationError(
            "runtime_mode",
            mode.name,
            f"BATCH execution needs every source to end, and {which} {'does' if len(endless) == 1 else 'do'} not: "
            "bound it (e.g. from_generator(..., count=n)) or use RuntimeExecutionMode.STREAMING or AUTOMATIC",
        )
    return mode


def build_job_graph(
    name: str, sinks: list[Transformation], execution: ExecutionConfig, checkpointing: CheckpointConfig
) -> JobGraph:
    """The job graph of the dataflow that ``sinks`` end. Its runtime mode is
    resolved here (see :func:`resolve_runtime_mode`); in BATCH mode periodic
    checkpoints are off, as in Flink (the final checkpoint still commits sinks)."""
    if not sinks:
        raise InvalidJobGraphError("the job has no sink: add sink_to(...) or print() before execute()")
    order = topological(sinks)
    mode = resolve_runtime_mode(execution.runtime_mode, [t for t in order if t.is_source])
    if mode is RuntimeExecutionMode.BATCH and checkpointing.enabled:
        log.info("job %s runs in BATCH mode: no periodic checkpoints (as in Flink, neither supported nor needed)", name)
        checkpointing = replace(checkpointing, interval_ms=None)
    par, maxp = _parallelism(order, execution)
    for t in order:
        _check_shippable(t)
    chain_of, head_of = _chains(order, par)
    vertex_ids, vertices = _vertices(chain_of, par, maxp)
    edge_id = 0
    for head_id, chain in chain_of.items():
        head, target = chain[0], vertices[vertex_ids[head_id]]
        for u, spec in head.inputs:
            r = _resolved(u, head, spec, par)
            source = vertex_ids[head_of[u.id]]
            edge = JobEdge(
                edge_id, source, target.id, r, r.input_index, par[head.id], maxp[head.id], head.name,
                u.effective_uid, r.side_output,
            )  # fmt: skip
            edge_id += 1
            target.inputs.append(edge)
            vertices[source].outputs.append(edge)
    return JobGraph(name, vertices, execution, checkpointing, list(sinks), runtime_mode=mode)


def _parallelism(order: list[Transformation], execution: ExecutionConfig) -> tuple[dict[int, int], dict[int, int]]:
    """Each operator's parallelism and max parallelism (its own, else the job's),
    checked, and its uid checked unique."""
    par: dict[int, int] = {}
    maxp: dict[int, int] = {}
    uids: dict[str, Transformation] = {}
    for t in order:
        p = t.parallelism if t.parallelism is not None else execution.parallelism
        mp = t.max_parallelism if t.max_parallelism is not None else execution.max_parallelism
        if not 1 <= mp <= MAX_MAX_PARALLELISM:
            raise InvalidJobGraphError(
                f"operator '{t.name}': max parallelism {mp} must be between 1 and {MAX_MAX_PARALLELISM}"
            )
        if p < 1:
            raise InvalidJobGraphError(f"operator '{t.name}': parallelism {p} must be at least 1")
        if p > mp:
            raise InvalidJobGraphError(
                f"operator '{t.name}': parallelism {p} is above its max parallelism {mp}; "
                "raise it with set_max_parallelism() (it fixes the number of key groups for good)"
            )
        par[t.id], maxp[t.id] = p, mp
        uid = t.effective_uid
        if uid in uids:
            raise InvalidJobGraphError(
                f"uid '{uid}' is used by both '{uids[uid].name}' and '{t.name}'; uids must be unique"
            )
        uids[uid] = t
    return par, maxp


def _resolved(u: Transformation, t: Transformation, spec: PartitionSpec | None, par: dict[int, int]) -> PartitionSpec:
    """The edge from ``u`` to ``t``: forward between equal parallelisms unless the
    program chose a partitioning, else rebalance; a forward edge between unequal ones is refused."""
    if spec is None or spec.kind == "":
        kind = "forward" if par[u.id] == par[t.id] else "rebalance"
        return PartitionSpec(kind) if spec is None else replace(spec, kind=kind)
    if spec.kind == "forward" and par[u.id] != par[t.id]:
        raise InvalidJobGraphError(
            f"forward edge from '{u.name}' (parallelism {par[u.id]}) to '{t.name}' (parallelism {par[t.id]}): "
            "a forward edge needs equal parallelism; use rebalance() instead"
        )
    return spec


def _chains(order: list[Transformation], par: dict[int, int]) -> tuple[dict[int, list[Transformation]], dict[int, int]]:
    """Operator chains: an operator joins its only input's chain over a forward
    edge between equals that no other operator reads. Returns each chain by its
    head's id, and each operator's head."""
    consumers: dict[int, int] = {}
    for t in order:
        for u, _ in t.inputs:
            consumers[u.id] = consumers.get(u.id, 0) + 1
    chain_of: dict[int, list[Transformation]] = {}
    head_of: dict[int, int] = {}
    for t in order:
        if len(t.inputs) == 1 and not t.is_source:
            u, spec = t.inputs[0]
            r = _resolved(u, t, spec, par)
            if r.kind == "forward" and r.side_output is None and consumers[u.id] == 1:
                head_of[t.id] = head_of[u.id]
                chain_of[head_of[u.id]].append(t)
                continue
        head_of[t.id] = t.id
        chain_of[t.id] = [t]
    return chain_of, head_of


def _vertices(
    chain_of: dict[int, list[Transformation]], par: dict[int, int], maxp: dict[int, int]
) -> tuple[dict[int, str], dict[str, JobVertex]]:
    """A vertex per chain, named after its head (made unique); returns each chain's vertex id, and the vertices."""
    vertex_ids: dict[int, str] = {}
    vertices: dict[str, JobVertex] = {}
    for head_id, chain in chain_of.items():
        head = chain[0]
        vid = _slug(head.name)
        n = 2
        while vid in vertices:
            vid = f"{_slug(head.name)}-{n}"
            n += 1
        vertex_ids[head_id] = vid
        vertices[vid] = JobVertex(
            id=vid,
            name=" -> ".join(t.name for t in chain),
            parallelism=par[head.id],
            max_parallelism=maxp[head.id],
            operators=[
                OperatorSpec(t.name, t.effective_uid, t.make_operator, t.make_coordinator, t.record_types)
                for t in chain
            ],
            is_source=head.is_source,
            resources=_chain_resources(chain),
            resource_owners=[t.name for t in chain if t.resources],
        )
    return vertex_ids, vertices


def _chain_resources(chain: list[Transformation]) -> dict[str, float]:
    """A chain runs in one actor: it asks for the most any of its operators asks for."""
    out: dict[str, float] = {}
    for t in chain:
        for name, amount in t.resources.items():
            out[name] = max(out.get(name, 0.0), amount)
    return out


def _check_shippable(t: Transformation) -> None:
    """Every operator travels to its tasks pickled: say which one cannot, now."""
    try:
        cloudpickle.dumps(t.make_operator)
    except Exception as exc:
        raise InvalidJobGraphError(
            f"operator '{t.name}' cannot be shipped to its tasks: its function (or what it captures) "
            f"cannot be pickled ({type(exc).__name__}: {exc}); create such objects in open() instead"
        ) from exc


def topological(sinks: list[Transformation]) -> list[Transformation]:
    """Every transformation that ``sinks`` read from, and they themselves, inputs first."""
    seen: set[int] = set()
    order: list[Transformation] = []

    def visit(t: Transformation) -> None:
        if t.id in seen:
            return
        seen.add(t.id)
        for u, _ in t.inputs:
            visit(u)
        order.append(t)

    for s in sorted(sinks, key=lambda t: t.id):
        visit(s)
    return order


# ------------------------------------------------------------------ picture
# The job graph as a picture: an SVG a browser opens and a notebook shows.
# Vertices are boxes laid out left to right by their distance from the sources,
# each listing its chained operators first to last, with its parallelism; edges
# are arrows labelled with their partitioner (and side output). No layout library
# and no Graphviz: a job graph is a small DAG, and SVG is text.

_W, _LINE, _PAD, _GAP_X, _GAP_Y = 230, 16, 10, 90, 28
_FONT = "font-family='Helvetica, Arial, sans-serif'"


def _fit(text: str, chars: int = 34) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def job_graph_svg(graph: "JobGraph") -> str:
    """The job graph drawn as SVG: a column per layer (inputs to the left), a box
    per vertex listing its chained operators, an arrow per edge named after its
    partitioning."""
    where, height = _layout(graph)
    width = max(x for x, _ in where.values()) + _W + _GAP_X
    total_h = max(y for y in (where[v][1] + height(v) for v in where)) + _GAP_Y
    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{total_h}' viewBox='0 0 {width} {total_h}' font-size='12'>",
        "<defs><marker id='arrow' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='7' markerHeight='7' orient='auto'>"
        "<path d='M0,0 L10,5 L0,10 z' fill='#555'/></marker></defs>",
        "<rect width='100%' height='100%' fill='white'/>",
        f"<text x='{_GAP_X // 2}' y='22' {_FONT} font-size='14' font-weight='bold'>{escape(graph.name)}"
        f" ({escape(graph.runtime_mode.value.lower())})</text>",
    ]
    out += _svg_edges(graph, where, height)
    for vid, v in graph.vertices.items():
        out += _svg_box(vid, v, where[vid], height(vid))
    out.append("</svg>")
    return "\n".join(out)


def _layout(graph: "JobGraph") -> tuple[dict[str, tuple[int, int]], Callable[[str], int]]:
    """Where each vertex's box goes (its top left corner), and each box's height."""
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
    return where, height


def _svg_edges(graph: "JobGraph", where: dict[str, tuple[int, int]], height: Callable[[str], int]) -> list[str]:
    """Each box's edges attach at their own heights, in the order of the boxes at
    their other ends, so arrows and their labels do not pile up."""
    edges = [e for v in graph.vertices.values() for e in v.inputs]

    def port(vid: str, mine: list, other: str) -> dict[int, int]:
        ordered = sorted(mine, key=lambda e: where[getattr(e, other)][1])
        return {e.edge_id: where[vid][1] + height(vid) * (k + 1) // (len(ordered) + 1) for k, e in enumerate(ordered)}

    outs = {vid: port(vid, [e for e in edges if e.source == vid], "target") for vid in graph.vertices}
    ins = {vid: port(vid, [e for e in edges if e.target == vid], "source") for vid in graph.vertices}
    out = []
    for e in edges:
        x1, y1 = where[e.source][0] + _W, outs[e.source][e.edge_id]
        x2, y2 = where[e.target][0], ins[e.target][e.edge_id]
        mid = (x1 + x2) // 2
        label = e.partition.kind + (f" [{e.side_output}]" if e.side_output else "")
        out.append(
            f"<path d='M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}' fill='none' stroke='#555' stroke-width='1.3' marker-end='url(#arrow)'/>"
        )
        out.append(f"<text x='{x2 - 8}' y='{y2 - 4}' text-anchor='end' {_FONT} fill='#333'>{escape(label)}</text>")
    return out


def _svg_box(vid: str, v: "JobVertex", at: tuple[int, int], height: int) -> list[str]:
    x, y = at
    fill = "#e8f1fb" if v.is_source else "#f4f4f4"
    out = [
        f"<rect x='{x}' y='{y}' width='{_W}' height='{height}' rx='6' fill='{fill}' stroke='#356' stroke-width='1.2'/>",
        f"<text x='{x + _PAD}' y='{y + _PAD + 12}' {_FONT} font-weight='bold'>{escape(_fit(vid, 28))}</text>",
        f"<text x='{x + _W - _PAD}' y='{y + _PAD + 12}' text-anchor='end' {_FONT} fill='#356' font-weight='bold'>"
        f"×{v.parallelism}</text>",
    ]
    for i, op in enumerate(v.operators):
        prefix = "→ " if i else ""
        out.append(
            f"<text x='{x + _PAD}' y='{y + _PAD + 12 + _LINE * (i + 1)}' {_FONT}>{escape(_fit(prefix + op.name))}</text>"
        )
    return out
