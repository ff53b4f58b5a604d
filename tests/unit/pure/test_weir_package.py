"""One top-level package, ``weir``: the user API at its root, PyFlink's module
paths mirrored under it (``pyflink.datastream`` -> ``weir.datastream``), and no
file left importing the old top-level names (``runtime``, ``actors``,
``connectors``: names of other projects on PyPI, and a second copy of every
class where both load)."""

from __future__ import annotations

import importlib
import pathlib
import re
import subprocess
import sys

import pytest

import weir
import weir.runtime

ROOT = pathlib.Path(__file__).resolve().parents[3]

# PyFlink's module paths that weir mirrors, each holding those of PyFlink's names there that weir has.
MIRROR = [
    "weir.common",
    "weir.common.serialization",
    "weir.common.time",
    "weir.common.typeinfo",
    "weir.common.types",
    "weir.common.watermark_strategy",
    "weir.datastream",
    "weir.datastream.connectors",
    "weir.datastream.connectors.file_system",
    "weir.datastream.connectors.kafka",
    "weir.datastream.formats.csv",
    "weir.datastream.formats.json",
    "weir.datastream.formats.parquet",
    "weir.datastream.functions",
    "weir.datastream.state",
    "weir.datastream.window",
]


def test_the_root_exports_the_runtime_api():
    assert weir.__all__ == weir.runtime.__all__
    for name in weir.__all__:
        assert getattr(weir, name) is getattr(weir.runtime, name), name


@pytest.mark.parametrize("path", MIRROR)
def test_every_mirrored_name_is_weirs_own_class(path):
    """No stand-ins: each name is the class weir defines in its own modules."""
    module = importlib.import_module(path)
    assert module.__all__ and len(set(module.__all__)) == len(module.__all__)
    for name in module.__all__:
        obj = getattr(module, name)
        home = obj.__module__
        assert home.startswith(("weir.runtime.", "weir.connectors.")), f"{path}.{name} is defined in {home}"
        assert getattr(importlib.import_module(home), name) is obj, f"{path}.{name}"
    public = {n for n, v in vars(module).items() if not n.startswith("_") and not isinstance(v, type(sys))}
    public.discard("Any")  # weir.datastream.connectors' annotation
    assert public <= set(module.__all__), f"{path} has names outside __all__: {sorted(public - set(module.__all__))}"


def test_the_mirror_holds_weirs_classes_under_pyflinks_paths():
    import weir.connectors.files as files
    import weir.connectors.formats as formats
    import weir.connectors.kafka as kafka
    import weir.connectors.serialization as serialization
    from weir.common import Duration, Row, Types, WatermarkStrategy
    from weir.common.serialization import Encoder, SimpleStringSchema
    from weir.common.typeinfo import Types as TypeinfoTypes
    from weir.datastream import KeyedProcessFunction, RuntimeExecutionMode, StreamExecutionEnvironment
    from weir.datastream.connectors import DeliveryGuarantee, Sink, Source
    from weir.datastream.connectors.file_system import FileSink, FileSource, StreamFormat
    from weir.datastream.connectors.kafka import KafkaSink, KafkaSource
    from weir.datastream.formats.csv import CsvReaderFormat
    from weir.datastream.state import ValueStateDescriptor
    from weir.datastream.window import TumblingEventTimeWindows

    assert StreamExecutionEnvironment is weir.StreamExecutionEnvironment is weir.runtime.StreamExecutionEnvironment
    assert (KeyedProcessFunction, RuntimeExecutionMode, ValueStateDescriptor, TumblingEventTimeWindows) == (
        weir.KeyedProcessFunction,
        weir.RuntimeExecutionMode,
        weir.ValueStateDescriptor,
        weir.TumblingEventTimeWindows,
    )
    assert (Duration, Row, Types, WatermarkStrategy) == (weir.Duration, weir.Row, weir.Types, weir.WatermarkStrategy)
    assert TypeinfoTypes is Types and (Sink, Source) == (weir.Sink, weir.Source)
    assert (FileSink, FileSource, StreamFormat, Encoder) == (
        files.FileSink,
        files.FileSource,
        files.StreamFormat,
        files.Encoder,
    )
    assert CsvReaderFormat is formats.CsvReaderFormat and SimpleStringSchema is serialization.SimpleStringSchema
    assert (KafkaSource, KafkaSink, DeliveryGuarantee) == (kafka.KafkaSource, kafka.KafkaSink, kafka.DeliveryGuarantee)


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_without_the_kafka_extra_only_the_kafka_names_refuse_and_they_say_how_to_install_it():
    run = _python(
        "import sys; sys.modules['confluent_kafka'] = None  # as if the kafka extra were not installed\n"
        "import weir, weir.common, weir.datastream, weir.datastream.connectors, weir.datastream.connectors.file_system\n"
        "for attempt in ('from weir.datastream.connectors import DeliveryGuarantee',\n"
        "                'import weir.datastream.connectors.kafka'):\n"
        "    try:\n"
        "        exec(attempt)\n"
        "    except ImportError as e:\n"
        "        assert \"pip install 'weir[kafka]'\" in str(e), e\n"
        "    else:\n"
        "        raise AssertionError(attempt)\n"
        "print('refused')\n"
    )
    assert run.returncode == 0 and "refused" in run.stdout, run.stderr[-3000:]


def test_importing_the_mirror_loads_no_ray():
    run = _python(
        "import importlib, sys\n"
        f"for m in {MIRROR!r}: importlib.import_module(m)\n"
        "assert 'ray' not in sys.modules, sorted(m for m in sys.modules if m.startswith('ray'))\n"
    )
    assert run.returncode == 0, run.stderr[-3000:]


# Imports of the old top-level names, in code and in the code of docs, notebooks and configs.
_OLD_IMPORT = re.compile(
    r"\b(from (runtime|actors|connectors)(\.\w+)* import\b|import (runtime|actors|connectors)\b)"
    r"|[\"'= ](runtime|actors|connectors)\.\w+:\w+"  # entry points
    r"|-m (runtime|actors|connectors)\."
)  # python -m actors.cli


def _project_files() -> list[pathlib.Path]:
    """The project's files as git sees them (tracked, or new and not ignored): never
    a virtual environment or a benchmark's downloads."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [
        ROOT / name
        for name in listed
        if (ROOT / name).is_file()
        and (
            name.endswith((".py", ".md", ".ipynb", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".txt"))
            or name.endswith("/run")
        )
    ]


def test_no_file_imports_the_old_top_level_names():
    files = _project_files()
    assert ROOT / "README.md" in files and ROOT / "examples" / "notebook.ipynb" in files
    offenders = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()[:120]}"
        for p in files
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if _OLD_IMPORT.search(line) and p != pathlib.Path(__file__)
    ]
    assert offenders == []
