"""What a reused process forgets of a job (:class:`weir.actors.slots.JobScope`):
the user's modules, so that an edited one is imported afresh (on Ray:
tests/integration/test_pool.py), and never weir's own, wherever weir is
installed."""

from __future__ import annotations

import importlib
import os
import sys
import time
import types
from pathlib import Path

import pytest

from weir.actors.slots import JobScope


def _module(name: str, file: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = str(file)
    return module


def test_a_reset_forgets_the_users_modules_and_keeps_weirs_own_in_an_editable_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scope = JobScope()
    # A job imports a user's module and one of weir's that the process had not
    # loaded yet, both from outside site-packages, as an editable install has weir.
    users = _module("users_etl_helpers", tmp_path / "users_etl_helpers.py")
    weirs = _module("weir.connectors.not_loaded_before", tmp_path / "project" / "connectors" / "not_loaded_before.py")
    monkeypatch.setitem(sys.modules, users.__name__, users)
    monkeypatch.setitem(sys.modules, weirs.__name__, weirs)

    assert scope.leave() == 1
    assert users.__name__ not in sys.modules
    assert sys.modules[weirs.__name__] is weirs  # the same module, its classes the same objects


def test_an_unchanged_users_module_is_imported_afresh_without_being_compiled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No bytecode on disk (PYTHONDONTWRITEBYTECODE=1, as many container images set):
    # every job's import compiled the module's text again in every process.
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    source = tmp_path / "weir_compiled_once_probe.py"
    source.write_text("SEEN = []\n\ndef f():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    scope = JobScope()

    first = importlib.import_module(source.stem)
    first.SEEN.append("job 1")
    scope.leave()
    second = importlib.import_module(source.stem)
    assert second is not first and second.SEEN == []  # a fresh module: the last job's globals are gone
    assert second.f.__code__ is first.f.__code__  # the same text is not compiled again

    scope.leave()
    source.write_text("SEEN = []\n\ndef f():\n    return 2\n")
    os.utime(source, (time.time() + 5, time.time() + 5))
    importlib.invalidate_caches()
    assert importlib.import_module(source.stem).f() == 2  # an edited module is compiled anew
    scope.leave()
