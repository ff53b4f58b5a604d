"""What the pool's processes share with the pool: the pool's name and how to
find it, how an actor is named in its tables, and what a job leaves in a reused
process (:class:`JobScope`). Below the pool, the job coordinator and the task
actor, which all import it; the pool imports those two to start them."""

from __future__ import annotations

import hashlib
import importlib.machinery as machinery
import os
import sys
import sysconfig
from types import CodeType
from typing import Any

import ray

from weir.actors.cluster import NAMESPACE

POOL_NAME = "weir-pool"


def find_pool() -> Any:
    """The cluster's running pool, or None (see :func:`weir.actors.pool.get_pool`,
    which also starts one)."""
    try:
        return ray.get_actor(POOL_NAME, namespace=NAMESPACE)
    except ValueError:
        return None


def actor_id(actor: Any) -> str:
    return actor._actor_id.hex()


# Modules a job imports from these folders stay loaded when its process is reset
# (Ray, numpy and the like: many C extensions cannot be loaded twice), and so do
# weir's own, wherever it is installed: an editable install (README's) keeps them
# in the project's folder, and a job that imported one (a connector, PyFlink's
# module paths) would leave the next job to import it again, its classes anew.
_KEPT_PATHS = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})


def _kept(name: str, module: Any) -> bool:
    return (
        name == "weir"
        or name.startswith("weir.")
        or str(getattr(module, "__file__", None) or "").startswith(_KEPT_PATHS)
    )


class _CompiledOnce(machinery.SourceFileLoader):
    """The standard source loader, except that a module compiled from source (no
    bytecode on disk: ``PYTHONDONTWRITEBYTECODE=1``, as many container images set,
    or a folder it cannot write) keeps its code object for the process's later
    jobs, by the source's path and content. A job still imports a fresh module,
    executed anew; only compiling the same text again is saved (10-30 ms a module
    a process a job)."""

    _compiled: dict[tuple[str, bytes], CodeType] = {}

    def source_to_code(self, data: Any, path: Any, *, _optimize: int = -1) -> CodeType:  # type: ignore[override]
        key = (str(path), hashlib.blake2b(data, digest_size=16).digest())
        code = self._compiled.get(key)
        if code is None:
            code = self._compiled[key] = super().source_to_code(data, path, _optimize=_optimize)
        return code


def _compile_sources_once() -> None:
    """Folders on ``sys.path`` find source modules through :class:`_CompiledOnce`
    from now on (in this process: a pool's slot or coordinator)."""
    if any(getattr(hook, "_weir_compiled_once", False) for hook in sys.path_hooks):
        return
    hook = machinery.FileFinder.path_hook(
        (_CompiledOnce, machinery.SOURCE_SUFFIXES),
        (machinery.ExtensionFileLoader, machinery.EXTENSION_SUFFIXES),
        (machinery.SourcelessFileLoader, machinery.BYTECODE_SUFFIXES),
    )
    hook._weir_compiled_once = True  # type: ignore[attr-defined]
    sys.path_hooks.insert(0, hook)  # a zip file is not a folder: it goes on to zipimport
    sys.path_importer_cache.clear()


class JobScope:
    """What one job leaves in a reused process, and its removal: the environment
    variables the job set (weir's failure injection) and the modules it imported
    from outside the standard library, site-packages and weir, so that a user's
    edited module is imported afresh by the next job (an unchanged one is not
    compiled again: :class:`_CompiledOnce`)."""

    def __init__(self) -> None:
        self._own_modules = set(sys.modules)  # what the process loaded before any job
        self._env: set[str] = set()
        _compile_sources_once()

    def enter(self, env: dict[str, str]) -> None:
        os.environ.update(env)
        self._env |= set(env)

    def leave(self) -> int:
        """Returns how many modules were dropped."""
        for name in self._env:
            os.environ.pop(name, None)
        self._env = set()
        dropped = [
            name
            for name, module in list(sys.modules.items())
            if name not in self._own_modules and not _kept(name, module)
        ]
        for name in dropped:
            del sys.modules[name]
        return len(dropped)


# A cancelled task has this long to return before its slot is killed instead of
# reused (a user function that does not return, a source blocked on input): in a
# failover, and when a coordinator taking a job over takes its slots back.
CANCEL_GRACE_S = 3.0


def _id(actor: Any) -> str:
    return actor._actor_id.hex()
