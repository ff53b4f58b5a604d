"""What an installer and a contributor get, with no Ray cluster: the wheel installs
one package, weir, and runs the main example; the cluster config is valid for
`ray up`; the license is the one pyproject names; README's test command keeps a
file's tests on one worker. (A file of its own so that these run on the worker
without the session's cluster, which carries most of the suite's time.)"""

from __future__ import annotations

import copy
import os
import pathlib
import re
import subprocess
import sys
import zipfile

import pytest
import yaml

from tests.venvs import new_venv, pinned_to_this_environment, uv

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.ray  # as the other tests that build environments (test_ray_versions.py): slow, out of a quick `-m "not ray"` run
def test_the_wheel_installs_one_package_weir_and_runs_the_main_example_outside_the_repository(tmp_path):
    """Built from an sdist as an index would, installed without -e into an
    environment of its own, run from a folder where the source folders
    (runtime/, actors/, connectors/) cannot be imported by accident."""
    dist = tmp_path / "dist"
    build = subprocess.run(
        [uv(), "build", "-q", "--out-dir", str(dist), str(ROOT)], capture_output=True, text=True, timeout=300
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("weir-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        top_level = zf.read(f"{info}/top_level.txt").decode().split()
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
    assert {n.split("/")[0] for n in names} == {"weir", info}
    assert top_level == ["weir"]
    for path in (
        "weir/__init__.py",
        "weir/py.typed",
        "weir/runtime/task.py",
        "weir/runtime/py.typed",
        "weir/actors/cli.py",
        "weir/connectors/kafka.py",
        "weir/datastream/connectors/kafka.py",
        "weir/common/typeinfo.py",
    ):
        assert path in names, path
    assert "weir.actors.cli:main" in entry_points and "weir.runtime.local:LocalExecutor" in entry_points

    python = new_venv(tmp_path / "venv", str(wheel), "-c", str(pinned_to_this_environment(tmp_path / "pins.txt")))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")} | {"WEIR_EXECUTOR": "local"}
    where = subprocess.run(
        [
            python,
            "-c",
            "import importlib.util, weir, weir.datastream, weir.common; print(weir.__file__); "
            "print([m for m in ('runtime', 'actors', 'connectors') if importlib.util.find_spec(m)])",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert where.returncode == 0, where.stderr[-3000:]
    assert where.stdout.splitlines() == [
        str(
            pathlib.Path(python).parents[1]
            / "lib"
            / f"python{sys.version_info.major}.{sys.version_info.minor}"
            / "site-packages"
            / "weir"
            / "__init__.py"
        ),
        "[]",
    ]
    run = subprocess.run(
        [
            python,
            str(ROOT / "examples" / "keyed_sum.py"),
            "--records",
            "20000",
            "--parallelism",
            "1",
            "--output",
            str(tmp_path / "out"),
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "job keyed-sum: FINISHED" in run.stdout and "final sums of 1000 keys match plain Python: True" in run.stdout
    cli = subprocess.run(
        [str(pathlib.Path(python).parent / "weir"), "--help"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0 and "Usage: weir" in cli.stdout, cli.stderr[-3000:]


def test_ray_cluster_yaml_passes_rays_own_validation():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())
    validate_config(prepare_config(copy.deepcopy(config)))  # what `ray up` does before it starts
    assert config["provider"]["type"] == "local"
    assert any("pip install" in c and "-e ~/weir" in c and ".venv" in c for c in config["setup_commands"])
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    assert all(c.startswith(". ~/weir/.venv/bin/activate && ") for c in starts)  # the venv's ray and python
    assert all(
        "RAY_AUTH_MODE=token" in c
        for c in config["head_start_ray_commands"][1:] + config["worker_start_ray_commands"][1:]
    )
    # One token for every node, at the path Ray reads by default; made by the user before `ray up`.
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    assert "ray get-auth-token --generate" in (ROOT / "ray_cluster.yaml").read_text()


def test_the_license_file_is_the_one_pyproject_names():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text


def test_ci_runs_readmes_test_command():
    """`.ci/run` calls exactly README's second command (install and test)."""
    commands = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert commands[1].strip().endswith("-m pytest -n 2 --dist loadgroup")
    assert commands[1].strip() in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_test_command_keeps_a_files_tests_on_one_worker_and_the_cluster_files_together():
    """README's `-n 2 --dist loadgroup` runs files on the session's Ray cluster on
    one worker and the rest on the other, a few cluster files on whichever runs out
    of work first (tests/conftest.py); pytest 9.2 would silently drop the groups
    (pytest-dev/pytest-xdist#1386)."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-v",
            "-p",
            "no:cacheprovider",
            "tests/unit/pure/test_mailbox.py",
            "tests/integration/test_packaging.py",
            "tests/integration/test_readme.py",
            "-k",
            "mailbox or license or readme_has_examples",
        ],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ran = re.findall(r"PASSED (\S+)", out.stdout)
    assert len(ran) == 9, out.stdout[-3000:]
    assert all(t.endswith("@apart") for t in ran if "test_mailbox.py" in t or "license" in t), ran
    assert [t for t in ran if "readme_has_examples" in t][0].endswith("@session-cluster"), ran
    # The files that may run on the other worker's own cluster exist, run on a cluster, and use no Spark
    # (a second Spark session would cost more than the move saves).
    from tests.conftest import SECOND_CLUSTER

    for name in SECOND_CLUSTER:
        text = (ROOT / "tests" / "integration" / name).read_text()
        assert "ray_cluster," in text and not re.search(r"def test_\w+\([^)]*\bspark\b", text), name
