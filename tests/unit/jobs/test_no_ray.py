"""runtime/ (weir.runtime) must never import Ray (DESIGN.md): checked in the source and at import time."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

RUNTIME = pathlib.Path(__file__).resolve().parents[3] / "runtime"


def test_no_runtime_module_imports_ray():
    offenders = [
        str(p) for p in RUNTIME.rglob("*.py") if re.search(r"^\s*(import ray\b|from ray\b)", p.read_text(), re.M)
    ]
    assert offenders == []


def test_importing_runtime_and_running_a_local_job_loads_no_ray():
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "from weir import StreamExecutionEnvironment, DiscardingSink\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.from_sequence(1, 10).map(lambda x: x).sink_to(DiscardingSink())\n"
        "env.execute('no-ray', executor='local')\n"
        "assert 'ray' not in sys.modules, sorted(m for m in sys.modules if m.startswith('ray'))\n"
        "assert 'weir.runtime.local' in sys.modules and 'weir.actors' not in sys.modules\n"
        # the folders install under weir only: a top-level runtime would be a second copy of every class
        "assert not {'runtime', 'actors', 'connectors'} & set(sys.modules), 'a top-level package was imported'\n"
    ) % str(RUNTIME.parent)
    subprocess.run([sys.executable, "-c", code], check=True)
