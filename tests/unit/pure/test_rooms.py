"""The control plane's rooms, read from the code with ``ast`` (beside
:mod:`tests.unit.pure.test_layers`, whose import graph it reuses):

- the job master changes no other object's state: it writes no attribute of
  another object, and calls no mutating method on another object's field
  (``self.tasks.exited.add(...)``); each room changes its own state through
  named methods;
- the job's status lives with the job's lifecycle, not in the client's module,
  and the job master does not import the client's module;
- letters are typed: no function of ``weir.runtime`` takes or returns a letter typed ``Any``;
- no chain of imports among weir's modules is longer than 15 modules;
- no module is longer than 1,000 lines (a class every feature grows ends up in one);
- the stream task holds one lifecycle (its phase and reported state), not a second enum beside it;
- a stop is owned by one room (``StopProtocol``): only it reads or writes the stop's
  state, none of its methods hands a state object out, and the rooms that report
  to it (the checkpoint flow, the job master) call its named methods and nothing else.

Each check is also run on a small piece of code that breaks it, so that it is
seen to fail."""

from __future__ import annotations

import ast
import functools

from tests.unit.pure.test_layers import GRAPH, MODULES

MAX_IMPORT_CHAIN = 15
MAX_MODULE_LINES = 1_000
MUTATORS = frozenset(
    {"add", "update", "clear", "append", "extend", "pop", "popleft", "remove", "discard", "setdefault"}
)


def _class(path_or_source: str, name: str) -> ast.ClassDef:
    tree = ast.parse(path_or_source)
    return next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)


def writes_to_others(cls: ast.ClassDef) -> list[str]:
    """Every place ``cls`` changes another object's state: ``x.field = ...`` or
    ``x.field += ...`` where ``x`` is not ``self``, and ``self.a.b.add(...)``
    (a mutating call on a field of another object)."""
    found = []
    for node in ast.walk(cls):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                    if not (isinstance(sub.value, ast.Name) and sub.value.id == "self"):
                        found.append(f"{node.lineno}: {ast.unparse(sub)} =")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            owner = node.func.value
            if isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Attribute):
                found.append(f"{node.lineno}: {ast.unparse(node.func)}(...)")
    return found


def test_the_writes_finder_finds_writes_to_other_objects_and_only_those():
    cls = _class(
        """
class M:
    def f(self, other):
        self.own = 1
        self.count += 1
        self.tasks.killed = set()
        other.field += 1
        self.graph = self.coordinator.graph = 2
        self.tasks.exited.add(3)
        self.tasks.send(4)
        self._failures.append(5)
""",
        "M",
    )
    assert writes_to_others(cls) == [
        "6: self.tasks.killed =",
        "7: other.field =",
        "8: self.coordinator.graph =",
        "9: self.tasks.exited.add(...)",
    ]


def test_the_job_master_changes_no_other_rooms_state():
    cls = _class(MODULES["weir.runtime.jobmaster"].read_text(), "JobMaster")
    assert writes_to_others(cls) == []


def test_the_job_status_lives_with_the_jobs_lifecycle_and_the_job_master_does_not_import_the_client():
    defined = {
        module
        for module, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name == "JobStatus"
    }
    assert defined == {"weir.runtime.job_lifecycle"}
    assert "weir.runtime.executor" not in GRAPH["weir.runtime.jobmaster"]
    assert "weir.runtime.executor" not in GRAPH["weir.runtime.job_lifecycle"]


def any_typed_letters(source: str) -> list[str]:
    """Every function that takes a ``letter`` typed ``Any`` or returns one (a
    function named for letters returning ``Any``), and every ``post`` callback
    typed ``Callable[[Any], None]``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            for arg in args:
                typed = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if "letter" in arg.arg and "Any" in typed:
                    found.append(f"{node.lineno}: {node.name}({arg.arg}: {typed})")
                if arg.arg == "post" and typed == "Callable[[Any], None]":
                    found.append(f"{node.lineno}: {node.name}({arg.arg}: {typed})")
            returns = ast.unparse(node.returns) if node.returns is not None else ""
            if "letter" in node.name and "Any" in returns:
                found.append(f"{node.lineno}: {node.name}() -> {returns}")
    return found


def test_the_letter_finder_finds_letters_typed_any():
    source = """
def post(self, letter: Any) -> None: ...
def take_letter(self) -> Any: ...
def run(self, post: Callable[[Any], None], letter: MasterLetter) -> None: ...
"""
    assert any_typed_letters(source) == [
        "2: post(letter: Any)",
        "3: take_letter() -> Any",
        "4: run(post: Callable[[Any], None])",
    ]


def test_no_function_of_the_runtime_takes_or_returns_a_letter_typed_any():
    found = {
        module: any_typed_letters(path.read_text())
        for module, path in MODULES.items()
        if module.startswith("weir.runtime.")
    }
    assert {m: f for m, f in found.items() if f} == {}


def test_the_mailbox_hands_out_what_its_letters_are_typed_as():
    mailbox = _class(MODULES["weir.runtime.mailbox"].read_text(), "Mailbox")
    take = next(n for n in mailbox.body if isinstance(n, ast.FunctionDef) and n.name == "take")
    assert ast.unparse(take.returns) == "L | DataLetter | None"


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest chain of imports (modules, each importing the next) in an
    import graph without circles."""

    @functools.cache
    def from_(module: str) -> tuple[str, ...]:
        chains = [from_(other) for other in sorted(graph.get(module, set()) & graph.keys()) if other != module]
        return (module, *max(chains, key=len, default=()))

    return list(max((from_(m) for m in sorted(graph)), key=len, default=()))


def test_the_chain_finder_finds_the_longest_chain():
    graph = {"a": {"b", "d"}, "b": {"c"}, "c": set(), "d": {"e"}, "e": {"f"}, "f": set()}
    assert longest_chain(graph) == ["a", "d", "e", "f"]


def test_no_chain_of_imports_is_longer_than_fifteen_modules():
    chain = longest_chain({m: {i for i in imports if i in MODULES} - {m} for m, imports in GRAPH.items()})
    assert len(chain) <= MAX_IMPORT_CHAIN, " -> ".join(chain)


def lifecycle_fields(cls: ast.ClassDef) -> list[str]:
    """The fields of ``cls`` it sets to a member of a lifecycle enum (``TaskState``, ``Phase``) itself."""
    return [
        f"{node.lineno}: {ast.unparse(target)} = {ast.unparse(node.value)}"
        for node in ast.walk(cls)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Attribute)
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id in {"TaskState", "Phase"}
        for target in node.targets
        if isinstance(target, ast.Attribute)
    ]


def test_the_lifecycle_field_finder_finds_a_second_lifecycle():
    cls = _class("class T:\n    def f(self):\n        self.state = TaskState.RUNNING\n        self.n = 1\n", "T")
    assert lifecycle_fields(cls) == ["3: self.state = TaskState.RUNNING"]


def test_the_stream_task_holds_one_lifecycle():
    cls = _class(MODULES["weir.runtime.task"].read_text(), "StreamTask")
    assert lifecycle_fields(cls) == []


STOP_STATES = frozenset({"NoStop", "WaitingForSlots", "Stopping", "Redeploying", "State"})
# The rooms that hold the stop (as ``self._stop``) and report to it.
STOP_REPORTERS = {"weir.runtime.checkpoint_flow": "CheckpointFlow", "weir.runtime.jobmaster": "JobMaster"}


def stop_methods(room: ast.ClassDef) -> frozenset[str]:
    """The stop room's named methods, its events and questions: public, no
    property, and none returns a stop state."""
    return frozenset(
        node.name
        for node in room.body
        if isinstance(node, ast.FunctionDef)
        and not node.name.startswith("_")
        and "property" not in {ast.unparse(d) for d in node.decorator_list}
        and not (
            node.returns is not None and STOP_STATES & {n.id for n in ast.walk(node.returns) if isinstance(n, ast.Name)}
        )
    )


def stop_imports(source: str) -> dict[str, int]:
    """What ``source`` imports from the stop's module, and on which line."""
    return {
        alias.name: node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module == "weir.runtime.stopping"
        for alias in node.names
    }


def stop_state_touches(source: str, cls_name: str, methods: frozenset[str]) -> list[str]:
    """Every place ``cls_name`` (in ``source``) touches the stop's state instead of
    calling one of the room's ``methods`` on ``self._stop``: a stop state imported
    (``isinstance(x, Redeploying)``), a property or field read off the stop
    (``self._stop.waiting``) or written, a call that hands a state out
    (``self._stop.slots_ready()``)."""
    found = [(line, f"imports {name}") for name, line in stop_imports(source).items() if name in STOP_STATES]
    cls = _class(source, cls_name)
    called = {id(node.func) for node in ast.walk(cls) if isinstance(node, ast.Call)}
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "self._stop":
            if id(node) not in called or node.attr not in methods:
                found.append((node.lineno, ast.unparse(node) + ("()" if id(node) in called else "")))
    return [f"{line}: {what}" for line, what in sorted(found)]


def test_the_stop_finders_find_what_touches_the_stops_state_and_only_that():
    room = _class(
        """
class StopProtocol:
    @property
    def waiting(self) -> WaitingForSlots | None: ...
    def slots_ready(self) -> WaitingForSlots: ...
    def stops_at(self, checkpoint_id: int) -> bool: ...
    def savepoint_failed(self, error: BaseException) -> Answer: ...
    def _illegal(self, event: str) -> StopProtocolError: ...
""",
        "StopProtocol",
    )
    methods = stop_methods(room)
    assert methods == {"stops_at", "savepoint_failed"}
    flow = """
from weir.runtime.stopping import Redeploying, StopProtocol

class Flow:
    def __init__(self, stop: StopProtocol) -> None:
        self._stop = stop
    def abort(self, checkpoint_id, error):
        if self._stop.stops_at(checkpoint_id):
            self._stop.savepoint_failed(error).deliver("j")
        waiting = self._stop.waiting
        rescale = self._stop.slots_ready()
        if isinstance(self._stop.state, Redeploying):
            self._stop.state = None
"""
    assert stop_state_touches(flow, "Flow", methods) == [
        "2: imports Redeploying",
        "10: self._stop.waiting",
        "11: self._stop.slots_ready()",
        "12: self._stop.state",
        "13: self._stop.state",
    ]


def test_only_the_stops_room_touches_the_stops_state():
    room = _class(MODULES["weir.runtime.stopping"].read_text(), "StopProtocol")
    methods = stop_methods(room)
    public = {n.name for n in room.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}
    assert public - methods == {"state"}, "the stop hands out its state to tests only"
    imported = {m: stop_imports(path.read_text()) for m, path in MODULES.items() if m != "weir.runtime.stopping"}
    assert {m for m, names in imported.items() if "StopProtocol" in names} == set(STOP_REPORTERS)
    assert {m: STOP_STATES & set(names) for m, names in imported.items() if STOP_STATES & set(names)} == {}
    for module, cls in STOP_REPORTERS.items():
        assert stop_state_touches(MODULES[module].read_text(), cls, methods) == [], module


def long_modules(texts: dict[str, str], max_lines: int) -> dict[str, int]:
    """The modules of ``texts`` (module -> source) longer than ``max_lines``, with their lengths."""
    lengths = {module: len(text.splitlines()) for module, text in texts.items()}
    return {module: n for module, n in lengths.items() if n > max_lines}


def test_the_length_finder_finds_the_modules_over_the_bound():
    texts = {"a": "x = 1\n" * 3, "b": "x = 1\n" * 2, "c": ""}
    assert long_modules(texts, 2) == {"a": 3}
    assert long_modules(texts, 1) == {"a": 3, "b": 2}


def test_no_module_is_longer_than_a_thousand_lines():
    texts = {module: path.read_text() for module, path in MODULES.items()}
    assert long_modules(texts, MAX_MODULE_LINES) == {}
    assert long_modules(texts, 100)  # the tree was read: some module is longer than 100 lines
