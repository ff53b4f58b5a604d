"""The web UI on the Ray cluster: one detached actor per cluster (``weir-ui`` in
the ``weir`` namespace), pinned to the head node, serving :func:`weir.actors.ui.make_app`
for every job on the cluster, whichever driver submitted it. ``weir ui`` and
``client.ui()`` start it (or find it running).

Threading: the HTTP server runs its own asyncio loop on a daemon thread of the
actor's process; each request that reads a job runs on a worker thread of that
loop, where it makes the job client's Ray calls. The actor's methods only say
where it listens.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any, Callable

import ray
from aiohttp import web

from weir.actors.cluster import NAMESPACE, actor_runtime_env, ensure_ray
from weir.actors.ui import LOOPBACK_NAMES, JobSource, make_app
from weir.runtime.errors import WeirError

UI_NAME = "weir-ui"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8290


class UIStartError(WeirError):
    """The UI could not start (its port taken, its host not an address of the
    head node), or runs already somewhere else than asked."""


def ray_auth_token() -> str | None:
    """Ray's cluster token when its token authentication is on in this process
    (a cluster's processes follow the cluster's mode), else None. Ray finds the
    token in ``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH`` names, or
    ``~/.ray/auth_token``; ``ray get-auth-token`` prints it."""
    try:
        from ray._raylet import AuthenticationMode, AuthenticationTokenLoader, get_authentication_mode

        if get_authentication_mode() != AuthenticationMode.TOKEN:
            return None
        token = AuthenticationTokenLoader.instance().get_raw_token(ignore_auth_mode=True)
    except (ImportError, AttributeError, TypeError):  # another Ray's loader: read where Ray documents it
        return _token_from_environment()
    if not token:
        raise UIStartError(
            "Ray's token authentication is on but this process found no token: the UI will not start open"
        )
    return token.strip()


def cluster_token() -> str:
    """The cluster's token as ``ray get-auth-token`` reads it (for a client of
    the UI: a script, a test), whatever this process's own mode."""
    from ray._raylet import AuthenticationTokenLoader

    return AuthenticationTokenLoader.instance().get_raw_token(ignore_auth_mode=True).strip()


def _token_from_environment() -> str | None:
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        return None
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    return path.read_text().strip()


class UIServer:
    """Serves the UI over the jobs ``jobs()`` makes (the cluster's:
    :class:`weir.actors.executor.ClusterJobs`) on ``host``:``port`` of its node
    from construction on, for the life of its process; refuses to start where it
    cannot bind."""

    def __init__(self, jobs: Callable[[], JobSource], host: str, port: int) -> None:
        self._host, self._port = host, port
        self._token = ray_auth_token()
        app = make_app(jobs(), self._token, loopback_only=host in LOOPBACK_NAMES)
        self._loop = asyncio.new_event_loop()
        runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(runner.setup())
        try:
            self._loop.run_until_complete(web.TCPSite(runner, host, port).start())
        except OSError as exc:
            raise UIStartError(f"the weir UI cannot listen on {host}:{port} of the head node: {exc}") from None
        threading.Thread(target=self._loop.run_forever, name="weir-ui", daemon=True).start()

    def where(self) -> dict[str, Any]:
        """Where it listens, the address to open, and whether it asks for a token."""
        shown = ray.util.get_node_ip_address() if self._host in ("0.0.0.0", "::", "") else self._host
        return {
            "host": self._host,
            "port": self._port,
            "url": f"http://{shown}:{self._port}/",
            "token_required": self._token is not None,
        }


RemoteUIServer = ray.remote(UIServer)


def _running() -> Any:
    try:
        return ray.get_actor(UI_NAME, namespace=NAMESPACE)
    except ValueError:
        return None


def start_ui(
    jobs: Callable[[], JobSource], address: str | None = None, host: str | None = None, port: int | None = None
) -> dict[str, Any]:
    """The cluster's UI over the jobs ``jobs()`` makes (passed in: the module of
    the cluster's job clients imports this one, for ``client.ui()``): started on
    the head node (``host``, ``port``: where it binds there, 127.0.0.1:8290 by
    default) unless it runs already; returns
    :meth:`UIServer.where`. :class:`UIStartError` when it cannot bind, or runs
    already on another host or port than asked (``weir ui --stop`` first)."""
    ensure_ray(address, start=False)
    handle = _running()
    if handle is None:
        handle = RemoteUIServer.options(
            name=UI_NAME,
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_restarts=0,
            resources={"node:__internal_head__": 0.001},
            runtime_env=actor_runtime_env(),
        ).remote(jobs, host or DEFAULT_HOST, port or DEFAULT_PORT)
    try:
        where = ray.get(handle.where.remote())
    except ray.exceptions.RayActorError as exc:
        cause = exc.cause if isinstance(getattr(exc, "cause", None), Exception) else exc
        if isinstance(cause, ray.exceptions.RayTaskError):
            cause = cause.cause
        raise (cause if isinstance(cause, UIStartError) else UIStartError(str(cause))) from None
    if (host is not None and host != where["host"]) or (port is not None and port != where["port"]):
        raise UIStartError(
            f"the cluster's weir UI runs already on {where['host']}:{where['port']} ({where['url']}); "
            "`weir ui --stop` first to move it"
        )
    return where


def stop_ui(address: str | None = None) -> bool:
    """End the cluster's UI; False when none ran."""
    ensure_ray(address, start=False)
    handle = _running()
    if handle is not None:
        ray.kill(handle, no_restart=True)
    return handle is not None
