"""Joining or starting a Ray cluster, with what Spark on Java 17 needs set first."""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

import ray

from weir.runtime.errors import WeirError

NAMESPACE = "weir"
log = logging.getLogger("weir")

# Every JVM that Ray or Spark starts on Java 17 needs these, or raydp's Java actor
# dies (java.math is the one raydp's Arrow conversion of a DataFrame trips over).
_OPENS = [
    "java.base/java.lang",
    "java.base/java.lang.invoke",
    "java.base/java.lang.reflect",
    "java.base/java.io",
    "java.base/java.net",
    "java.base/java.nio",
    "java.base/java.util",
    "java.base/java.util.concurrent",
    "java.base/java.util.concurrent.atomic",
    "java.base/java.math",
    "java.base/java.text",
    "java.base/java.time",
    "java.base/sun.nio.ch",
    "java.base/sun.nio.cs",
    "java.base/sun.security.action",
    "java.base/sun.util.calendar",
]
JDK_JAVA_OPTIONS = " ".join(f"--add-opens={m}=ALL-UNNAMED" for m in _OPENS)


def java_env() -> dict[str, str]:
    existing = os.environ.get("JDK_JAVA_OPTIONS", "")
    value = existing if JDK_JAVA_OPTIONS in existing else f"{existing} {JDK_JAVA_OPTIONS}".strip()
    return {"JDK_JAVA_OPTIONS": value}


class NoClusterError(WeirError):
    """A client found no Ray cluster to attach to (it never starts one)."""


class RayVersionMismatchError(WeirError):
    """The cluster on this machine runs another Ray than the driver: Ray would
    retry for tens of seconds and end with a bare ConnectionError."""


def ensure_ray(address: str | None = None, start: bool = True) -> None:
    """Connect to the cluster at ``address`` / ``RAY_ADDRESS``, else to one running
    on this machine, else (``start``) start a local one. Idempotent. Clients that
    only look at jobs pass ``start=False``: with no cluster they fail at once,
    naming where they looked, instead of starting an empty one.

    The driver keeps a namespace of its own (weir's actors are named in
    ``NAMESPACE`` explicitly): raydp names its Spark app master the same in every
    application, so two drivers sharing a namespace could not both run Spark."""
    if ray.is_initialized():
        return
    os.environ.update(java_env())  # inherited by a cluster this process starts
    runtime_env = {"env_vars": java_env()}  # reaches workers of a cluster we join
    address = address or os.environ.get("RAY_ADDRESS")
    if address and address != "auto":
        if not start and not _listening(address):
            raise NoClusterError(
                f"no Ray cluster found at {address}: is it running, and is RAY_ADDRESS or --address right?"
            )
        _same_ray(address, start)
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=True)
        return
    found = _auto_address()
    if found is not None and not _listening(found):
        # A cluster that crashed or was stopped uncleanly left its address behind;
        # Ray would wait minutes for it.
        log.warning("the Ray cluster recorded at %s is gone (nothing listens there)", found)
        found = None
    if found is not None:
        _same_ray(found, start)
        # "auto", not the address: for a cluster on this machine Ray then also
        # finds its auth token (ray start turns token authentication on).
        ray.init(address="auto", runtime_env=runtime_env)
    elif start and address != "auto":  # RAY_ADDRESS=auto asks for a running cluster, as Ray's "auto" does
        # Ray would start a worker per CPU for this driver's tasks, which weir's
        # actors (in a runtime env of their own) never use: 2 s of CPU each,
        # beside the pool's processes.
        ray.init(address="local", runtime_env=runtime_env, _system_config={"prestart_worker_first_driver": False})
    else:
        raise NoClusterError(
            "no Ray cluster found on this machine (RAY_ADDRESS is unset): start one with `ray start --head`, "
            "or point RAY_ADDRESS or --address at yours"
            if address is None
            else "no Ray cluster found on this machine, and RAY_ADDRESS=auto asks for a running one: "
            "start one with `ray start --head`, or unset RAY_ADDRESS to have weir start a local one"
        )


def _listening(address: str) -> bool:
    """Whether anything takes a connection at ``address`` (Ray itself waits minutes
    for an address that does not answer)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=3).close()
    except (OSError, ValueError):
        return False
    return True


def _auto_address() -> str | None:
    """The cluster to join on this machine (None: none): the one ``ray start``
    recorded, else, as Ray's ``auto`` has it, a cluster found running here.
    Ray's lookups are private, and the same from 2.52 to 2.60."""
    services = ray._private.services
    try:
        return services.find_bootstrap_address(None) or services.get_ray_address_from_environment("auto", None)
    except ConnectionError:
        return None


def _same_ray(address: str, start: bool) -> None:
    """Fail at once when the cluster at ``address`` runs on this machine under
    another Ray release than this driver's (its GCS process names its build).
    Clusters on other machines are left to Ray's own check."""
    host, _, port = address.rpartition(":")
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue  # gone, or not ours to read
        if not args[0].endswith("/gcs_server") or f"--gcs_server_port={port}" not in args:
            continue
        if host not in ("localhost", "127.0.0.1") and f"--node-ip-address={host}" not in args:
            continue  # the same port on another machine
        commit = next((a.partition("=")[2] for a in args if a.startswith("--ray-commit=")), None)
        if commit is None or commit == ray.__commit__:
            return
        version = _version_of(Path(args[0]))
        if version == ray.__version__:
            return  # another build of the same release, which Ray's own check accepts
        theirs, fix = (
            (f"Ray {version}", f'uv pip install "ray[default]=={version}"')
            if version
            else (f"another Ray build (commit {commit[:12]})", "install its Ray")
        )
        raise RayVersionMismatchError(
            f"the Ray cluster at {address} runs {theirs}, and this driver runs Ray {ray.__version__} ({sys.executable}): "
            f"a driver must run its cluster's Ray. Install it here ({fix})"
            + (", or set RAY_ADDRESS=local to start a cluster of this driver's own" if start else "")
        )


def _version_of(gcs_server: Path) -> str | None:
    """The Ray release a GCS binary belongs to (.../ray/core/src/ray/gcs/gcs_server)."""
    try:
        found = re.search(r'^version = "([^"]+)"', (gcs_server.parents[4] / "_version.py").read_text(), re.M)
    except (OSError, IndexError):
        return None
    return found.group(1) if found else None


def actor_runtime_env() -> dict[str, Any]:
    """The runtime env of weir's actors: the current Ray job's (its working_dir,
    pip packages) plus the Java flags Spark needs. Ray starts workers for a
    runtime env of their own, so weir's actors never land on a worker from the
    shared pool that raydp's block-fetching tasks have switched to cross-language
    code loading (such a worker dies loading any Python actor class)."""
    env = dict(ray.get_runtime_context().runtime_env)
    env["env_vars"] = {**env.get("env_vars", {}), **java_env(), "WEIR_ACTOR_WORKER": "1"}
    return env


def task_actor_name(job_name: str, vertex: str, subtask: int) -> str:
    return f"{job_name}/{vertex}/{subtask}"
