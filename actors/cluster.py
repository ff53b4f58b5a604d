"""Joining or starting a Ray cluster, with what Spark on Java 17 needs set first."""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

import ray

from runtime.errors import WeirError

NAMESPACE = "weir"
log = logging.getLogger("weir")

# Every JVM that Ray or Spark starts on Java 17 needs these, or raydp's Java actor
# dies (java.math is the one raydp's Arrow conversion of a DataFrame trips over).
_OPENS = [
    "java.base/java.lang", "java.base/java.lang.invoke", "java.base/java.lang.reflect", "java.base/java.io",
    "java.base/java.net", "java.base/java.nio", "java.base/java.util", "java.base/java.util.concurrent",
    "java.base/java.util.concurrent.atomic", "java.base/java.math", "java.base/java.text", "java.base/java.time",
    "java.base/sun.nio.ch", "java.base/sun.nio.cs", "java.base/sun.security.action", "java.base/sun.util.calendar",
]
JDK_JAVA_OPTIONS = " ".join(f"--add-opens={m}=ALL-UNNAMED" for m in _OPENS)


def java_env() -> dict[str, str]:
    existing = os.environ.get("JDK_JAVA_OPTIONS", "")
    value = existing if JDK_JAVA_OPTIONS in existing else f"{existing} {JDK_JAVA_OPTIONS}".strip()
    return {"JDK_JAVA_OPTIONS": value}


class NoClusterError(WeirError):
    """A client found no Ray cluster to attach to (it never starts one)."""


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
        if not start:
            _reachable(address)
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=True)
        return
    try:
        ray.init(address="auto", runtime_env=runtime_env)
    except ConnectionError:
        if not start:
            raise NoClusterError(
                "no Ray cluster found on this machine (RAY_ADDRESS is unset): start one with `ray start --head`, "
                "or point RAY_ADDRESS or --address at yours"
            ) from None
        ray.init(runtime_env=runtime_env)


def _reachable(address: str) -> None:
    """Fail fast when nothing listens at ``address`` (Ray itself waits a minute or more)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=3).close()
    except (OSError, ValueError):
        raise NoClusterError(f"no Ray cluster found at {address}: is it running, and is RAY_ADDRESS or --address right?") from None


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
