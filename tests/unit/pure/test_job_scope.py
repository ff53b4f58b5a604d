"""What a reused process forgets of a job (:class:`weir.actors.slots.JobScope`):
the user's modules, so that an edited one is imported afresh (on Ray:
tests/integration/test_pool.py), and never weir's own, wherever weir is
installed."""

from __future__ import annotations

import sys
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
