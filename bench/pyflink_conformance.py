"""How much of PyFlink runs on weir unchanged but for the import root (issue #32).

    python3 -m bench.pyflink_conformance [--flink-git DIR] [--only examples|tests]

1. PyFlink's release examples: ``pip download apache-flink==2.3.*`` into a temp
   folder, take ``pyflink/examples/datastream/**.py`` from the wheel, change the
   import root ``pyflink`` to ``weir`` and run each with the local executor at
   its own parallelism and at ``WEIR_DEFAULT_PARALLELISM=3``. A run passes when it
   exits 0 and prints exactly the records PyFlink prints (``EXPECTED`` below,
   worked out from each program; the ``N> `` prefix PyFlink's ``print()`` puts
   before a record at parallelism above 1 is dropped, and records are compared
   as a sorted list, since PyFlink fixes their order per key only).
2. PyFlink's own DataStream tests, ``test_data_stream.py`` and ``test_window.py``
   of apache/flink, fetched from GitHub at run time (or, where GitHub cannot be
   reached, read from a clone: ``--flink-git /path/to/flink/.git``). Their imports
   change root to ``weir``, except those of PyFlink's test bases, which become
   :mod:`bench.pyflink_adapter` (a fresh environment per test, a test sink
   collecting in-process). A test that calls the JVM (``get_gateway()``, the Java
   configuration, ``_j_`` objects, or expects py4j's Java errors) is not counted. Prints passed / counted.

Flink's code is only ever written to a temp folder, never into this repository.
"""

from __future__ import annotations

import argparse
import ast
import collections
import glob
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import urllib.request
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FLINK_TAG = "release-2.3.0"
TEST_FILES = ["test_data_stream.py", "test_window.py"]
TESTS_PATH = "flink-python/pyflink/datastream/tests"
ADAPTED_MODULES = (  # PyFlink's test bases and JVM helpers: the adapter stands in for them
    "pyflink.testing.test_case_utils",
    "pyflink.datastream.tests.test_util",
    "pyflink.java_gateway",
    "pyflink.util.java_utils",
)
JVM_MARKERS = ("get_gateway(", "_j_", "get_j_env_configuration(", "invoke_java_object_method", "py4j")

_F32 = "float rounded through 4 bytes, as PyFlink's FLOAT serializer does between operators and in state"
# What PyFlink 2.3 prints for each example that needs no external service, worked out from the program.
# A record of a declared TUPLE / ROW type prints as Java's toString() ("(hi,0,5,4)", "+I[a, 1]"); one of
# no declared type as Python's str().
EXPECTED: dict[str, list[str]] = {
    # Three jobs at parallelism 1: map (tel + 1), filter id == 1 then map, key_by(country).sum(1).
    "basic_operations.py": [
        """(1, '{"name": "Flink", "tel": 124, "addr": {"country": "Germany", "city": "Berlin"}}')""",
        """(2, '{"name": "hello", "tel": 136, "addr": {"country": "China", "city": "Shanghai"}}')""",
        """(3, '{"name": "world", "tel": 125, "addr": {"country": "USA", "city": "NewYork"}}')""",
        """(4, '{"name": "PyFlink", "tel": 33, "addr": {"country": "China", "city": "Hangzhou"}}')""",
        """(1, '{"name": "Flink", "tel": 124, "addr": {"country": "Germany", "city": "Berlin"}}')""",
        "('Germany', 123)",
        "('China', 135)",
        "('USA', 124)",
        "('China', 167)",
    ],
    # The two records whose country contains "China", tel + 1, the JSON parsed into a dict.
    "process_json_data.py": [
        "(2, {'name': 'hello', 'tel': 136, 'addr': {'country': 'China', 'city': 'Shanghai'}})",
        "(4, {'name': 'PyFlink', 'tel': 33, 'addr': {'country': 'China', 'city': 'Hangzhou'}})",
    ],
    # A running sum per name of a FLOAT field into FLOAT state: each input and each state
    # value is a float rounded through 4 bytes, the sum itself a Python float.
    "state_access.py": [
        "('Alice', 110.0999984741211)",
        "('Bob', 30.200000762939453)",
        "('Alice', 130.0999984741211)",
        "('Bob', 83.29999923706055)",
        "('Alice', 143.20000648498535)",
        "('Bob', 86.40000295639038)",
        "('Bob', 102.50000190734863)",
        "('Alice', 163.30001258850098)",
    ],
    # Each record sets a timer 2 s after it; all eight records are in before the watermark passes any
    # timer (the collection is read at once), so each of a name's 4 distinct timers prints its final
    # sum, read back from FLOAT state.
    "event_time_timer.py": ["('Alice', 163.30001831054688)"] * 4 + ["('Bob', 102.5)"] * 4,
    # BATCH word count of Hamlet's lines split on whitespace: one (word,count) per word, Tuple2's toString.
    "word_count.py": [],  # filled in below, from the program's own data
    # hi at 1,2,3,4,5,8,9,15 in 5 ms tumbling windows: [0,5) 4, [5,10) 3, [15,20) 1.
    "windowing/tumbling_time_window.py": ["(hi,0,5,4)", "(hi,5,10,3)", "(hi,15,20,1)"],
    # The same in 5 ms windows every 2 ms: every window [s, s+5) with s even that holds a record.
    "windowing/sliding_time_window.py": [
        "(hi,-2,3,2)",
        "(hi,0,5,4)",
        "(hi,2,7,4)",
        "(hi,4,9,3)",
        "(hi,6,11,2)",
        "(hi,8,13,2)",
        "(hi,12,17,1)",
        "(hi,14,19,1)",
    ],
    # hi at 1,2,3,4,8,9,15 with a 5 ms gap: [1,14) holds six, [15,20) one.
    "windowing/session_with_gap_window.py": ["(hi,1,14,6)", "(hi,15,20,1)"],
    # The gap is the timestamp itself: [1,2) [2,4) [3,6) [4,8) [8,16) [9,18) [15,30) touch one after
    # another (Flink merges windows that touch), so one session [1,30) of seven.
    "windowing/session_with_dynamic_gap_window.py": ["(hi,1,30,7)"],
    # Count windows of 2 per word, summing field 0: hi 1+3 (5 waits), hello 2+4 and 6+6.
    "windowing/tumbling_count_window.py": ["(hi,4)", "(hello,6)", "(hello,12)"],
}
TABLE_API = {"streaming_word_count.py", "asyncio/remote_model_inference.py"}  # build their input with the Table API


def _word_counts(source: str) -> list[str]:
    """word_count.py's expected records, from the lines in its own source."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "word_count_data":
            lines = ast.literal_eval(node.value)
            counts = collections.Counter(word for line in lines for word in line.split())
            return [f"({word},{n})" for word, n in counts.items()]
    raise ValueError("word_count.py has no word_count_data")


def fetch_examples(into: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "apache-flink==2.3.*", "-d", str(into)],
        check=True,
    )
    (wheel,) = glob.glob(str(into / "apache_flink-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        z.extractall(into / "wheel", [n for n in z.namelist() if n.startswith("pyflink/examples/datastream/")])
    return into / "wheel" / "pyflink" / "examples" / "datastream"


def fetch_tests(into: Path, flink_git: str | None) -> list[Path]:
    paths = []
    for name in TEST_FILES:
        if flink_git:
            text = subprocess.run(
                ["git", "--git-dir", flink_git, "show", f"HEAD:{TESTS_PATH}/{name}"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        else:
            url = f"https://raw.githubusercontent.com/apache/flink/{FLINK_TAG}/{TESTS_PATH}/{name}"
            with urllib.request.urlopen(url, timeout=60) as response:
                text = response.read().decode()
        path = into / name
        path.write_text(text)
        paths.append(path)
    return paths


def port_example(source: str) -> str:
    """Only the import root changes."""
    return re.sub(r"^(\s*)(from|import) pyflink\b", r"\1\2 weir", source, flags=re.M)


def port_test_module(source: str) -> tuple[str, set[str]]:
    """The test module with its imports on weir and the adapter, and the
    qualified names of its test methods that call the JVM."""
    tree = ast.parse(source)
    lines = source.splitlines()
    jvm = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_"):
                if any(m in (ast.get_source_segment(source, fn) or "") for m in JVM_MARKERS):
                    jvm.add(f"{cls.name}.{fn.name}")
    for node in sorted((n for n in tree.body if isinstance(n, ast.ImportFrom)), key=lambda n: -n.lineno):
        module = node.module or ""
        names = [a.name for a in node.names]
        bound = ", ".join(a.asname or a.name for a in node.names)
        if module in ADAPTED_MODULES:
            new = f"from bench.pyflink_adapter import {', '.join(names)}"
        elif module.startswith("pyflink"):
            weir_module = "weir" + module[len("pyflink") :]
            new = (
                f"{bound}, = weir_names({weir_module!r}, {', '.join(map(repr, names))})"
                if len(names) > 1
                else f"{bound} = weir_names({weir_module!r}, {names[0]!r})"
            )
        else:
            continue
        assert node.end_lineno is not None
        lines[node.lineno - 1 : node.end_lineno] = [new]
    ported = "from bench.pyflink_adapter import weir_names, java_config\n" + "\n".join(lines) + "\n"
    # The test bases' setUp sets Flink runtime options on the Java configuration.
    ported = ported.replace("get_j_env_configuration(self.env._j_stream_execution_environment)", "java_config()")
    return ported, jvm


def count_tests(source: str, jvm: set[str]) -> int:
    """How many tests pytest runs from ``source`` and counts here: each concrete test
    class's ``test_`` methods, inherited ones too, but those that call the JVM. Worked
    out from the classes as written, so a module that fails at import still counts."""
    bases = {name: type(name, (), {}) for name in ("PyFlinkTestCase",)}
    for name in ("PyFlinkStreamingTestCase", "PyFlinkBatchTestCase"):
        bases[name] = type(name, (bases["PyFlinkTestCase"],), {})
    made: dict[str, type] = {}
    for cls in (n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)):
        named = [b.id for b in cls.bases if isinstance(b, ast.Name)]
        parents = tuple(made.get(b) or bases[b] for b in named if b in made or b in bases)  # a user function: no test
        tests = {
            f.name: f"{cls.name}.{f.name}"
            for f in cls.body
            if isinstance(f, ast.FunctionDef) and f.name.startswith("test_")
        }
        made[cls.name] = type(cls.name, parents, tests)
    return sum(
        getattr(c, t) not in jvm
        for c in made.values()
        if issubclass(c, bases["PyFlinkTestCase"])
        for t in dir(c)
        if t.startswith("test_")
    )


def _records(stdout: str) -> list[str]:
    return sorted(
        re.sub(r"^\d+> ", "", line)
        for line in stdout.splitlines()
        if line and not line.startswith(("Printing result", "Executing word_count", "Use --input"))
    )


def run_examples(folder: Path, work: Path) -> int:
    passed = 0
    names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.py") if "connectors" not in p.parts)
    for name in names:
        source = (folder / name).read_text()
        if name == "word_count.py":
            EXPECTED[name] = _word_counts(source)
        if name in TABLE_API:
            print(f"  skip  {name}: builds its input with the Table API")
            continue
        script = work / "examples" / name
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(port_example(source))
        outcomes = []
        for parallelism in (None, "3"):
            env = {**os.environ, "WEIR_EXECUTOR": "local", "PYTHONPATH": str(REPO)}
            if parallelism:
                env["WEIR_DEFAULT_PARALLELISM"] = parallelism
            run = subprocess.run(
                [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300, cwd=work
            )
            if run.returncode != 0:
                last = (run.stderr.strip().splitlines() or ["?"])[-1]
                outcomes.append(f"exit {run.returncode}: {last[:160]}")
            elif _records(run.stdout) != sorted(EXPECTED[name]):
                got = _records(run.stdout)
                outcomes.append(f"different records: {got[:3]}{' ...' if len(got) > 3 else ''}")
            else:
                outcomes.append("ok")
        ok = all(o == "ok" for o in outcomes)
        passed += ok
        print(f"  {'ok  ' if ok else 'FAIL'}  {name}" + ("" if ok else f": {next(o for o in outcomes if o != 'ok')}"))
    print(
        f"examples: {passed}/{len(names) - len(TABLE_API)} DataStream-only examples print PyFlink's records "
        f"({len(names)} need no external service)"
    )
    return passed


CONFTEST = textwrap.dedent("""
    import os
    JVM = set(os.environ["PYFLINK_JVM_TESTS"].split(","))

    def pytest_collection_modifyitems(config, items):
        kept = [i for i in items if i.function.__qualname__ not in JVM]
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept
""")


def run_tests(paths: list[Path], work: Path, jobs: int) -> None:
    jvm: set[str] = set()
    counted = 0
    for path in paths:
        source = path.read_text()
        ported, calls_jvm = port_test_module(source)
        (work / "tests" / path.name).write_text(ported)
        jvm |= calls_jvm
        counted += count_tests(source, calls_jvm)
    (work / "tests" / "conftest.py").write_text(CONFTEST)
    env = {
        **os.environ,
        "WEIR_EXECUTOR": "local",
        "PYTHONPATH": str(REPO),
        "COLUMNS": "250",
        "PYFLINK_JVM_TESTS": ",".join(sorted(jvm)),
    }
    report = work / "report.txt"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--timeout",
            "120",
            "-n",
            str(jobs),
            "-rA",
            "--tb=line",
            "--rootdir",
            str(work / "tests"),
            str(work / "tests"),
        ],
        env=env,
        cwd=work / "tests",
        stdout=report.open("w"),
        stderr=subprocess.STDOUT,
    )
    text = report.read_text()
    passed = len(re.findall(r"^PASSED ", text, re.M))
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)(?: - (.*))?$", text, re.M)
    reasons = collections.Counter((why or "?")[:110] for _, why in failed)
    for why, n in reasons.most_common(25):
        print(f"  {n:4d}  {why}")
    print(
        f"tests: {passed}/{counted} of PyFlink's DataStream tests that do not call the JVM pass "
        f"({100 * passed / max(counted, 1):.0f} %); full report: {report}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--flink-git", help="an apache/flink git directory to read the tests from, when GitHub is out of reach"
    )
    parser.add_argument("--only", choices=["examples", "tests"])
    parser.add_argument("--jobs", type=int, default=2, help="pytest workers for the tests")
    parser.add_argument("--keep", help="work in this folder (kept) rather than a temp folder")
    args = parser.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="pyflink-conformance-"))
    (work / "tests").mkdir(parents=True, exist_ok=True)
    if args.only != "tests":
        run_examples(fetch_examples(work), work)
    if args.only != "examples":
        run_tests(fetch_tests(work / "tests", args.flink_git), work, args.jobs)


if __name__ == "__main__":
    main()
