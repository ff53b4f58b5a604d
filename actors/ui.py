"""weir's web UI over HTTP: the page, its JSON API, and who may use them.

:func:`make_app` builds an aiohttp application over a :class:`JobSource` (the
jobs of a Ray cluster, or a fake one in tests) and a token; it knows nothing of
Ray. :mod:`weir.actors.ui_server` runs it on the cluster.

Routes (every answer is JSON but the page, its files and the graph's SVG)::

    GET  /                              the page (its views are #/, #/jobs/NAME, .../checkpoints, .../exceptions)
    GET  /api/jobs                      every job: name, status, parallelism, uptime, restarts, checkpoints
    GET  /api/jobs/NAME                 its row of /api/jobs, info, vertices and subtasks with their rates
    GET  /api/jobs/NAME/checkpoints     client.checkpoints()
    GET  /api/jobs/NAME/exceptions      client.exceptions(), newest first
    GET  /api/jobs/NAME/graph.svg       client.graph_svg()
    POST /api/jobs/NAME/savepoint       {"path": null}                             -> weir savepoint's answer
    POST /api/jobs/NAME/stop            {"savepoint_path": null, "drain": false}   -> weir stop's answer
    POST /api/jobs/NAME/cancel          {}                                         -> weir cancel's answer
    POST /api/jobs/NAME/rescale         {"parallelism": {"OPERATOR": N}}           -> weir scale's answer

Actions go through :mod:`weir.actors.control`, as the CLI's do, and fail with
its texts: ``{"error": "..."}`` with 400 (a request that names nothing valid),
404 (no such job), 409 (the job refused: e.g. ``job 'x' is SUSPENDED: no
savepoint or stop now``) or 504 (a time-out).

Security (docs/security.md): with a token (Ray's, when its token authentication
is on), every request but the login page and the page's static files needs it,
as Ray's dashboard takes it: ``Authorization: Bearer TOKEN`` (or
``X-Ray-Authorization``), or the cookie ``ray-authentication-token`` that
``/login`` and ``?token=`` set (HttpOnly, SameSite=Strict). A missing token is
401, a wrong one 403. Changes are POSTs with a JSON body from the page's own
origin (a form on another site cannot send one), and a server bound to the
loopback answers only requests addressed to a loopback name (no DNS rebinding).

Collecting figures costs the job nothing new: the board reads what tasks
already report, once per :attr:`JobBoard.FRESH_S` however many pages ask.
"""

from __future__ import annotations

import asyncio
import enum
import hmac
import html
import json
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Awaitable, Callable, Protocol
from urllib.parse import quote, urlencode

from aiohttp import web

from weir.actors import control
from weir.actors.job_views import MetricsSample, task_rows, vertex_rows
from weir.runtime.errors import JobForgottenError, WeirError

STATIC = Path(__file__).with_name("ui_static")
COOKIE = "ray-authentication-token"  # Ray dashboard's cookie: one login serves both on one host
COOKIE_MAX_AGE_S = 30 * 24 * 3600  # as Ray's dashboard
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


class ViewedJob(control.ControlledJob, Protocol):
    """What the UI reads of a job: :class:`weir.actors.executor.RayJobClient`'s methods."""

    def info(self) -> dict[str, Any]: ...

    def metrics(self) -> list[dict[str, Any]]: ...

    def checkpoints(self) -> list[dict[str, Any]]: ...

    def exceptions(self) -> list[dict[str, Any]]: ...

    def graph_svg(self) -> str: ...


class JobSource(Protocol):
    """The jobs the UI shows: those of a Ray cluster (:class:`weir.actors.executor.ClusterJobs`)."""

    def names(self) -> list[str]: ...

    def client(self, name: str) -> ViewedJob:
        """A client for job ``name``; a :class:`WeirError` that is a ``LookupError``
        (``JobNotFoundError``) when there is none."""
        ...


class JobBoard:
    """What pages are shown, read from the jobs' clients at most once per
    ``FRESH_S`` for each view of each job (two tabs open cost what one does),
    and the previous metrics sample of each job, which rates are taken against.

    Threading: methods block on the jobs' clients; the HTTP server calls them
    on worker threads. One lock per view and job keeps a second caller waiting
    for the first one's answer instead of asking the job again."""

    FRESH_S = 1.0

    def __init__(self, source: JobSource, clock: Callable[[], float] = time.monotonic) -> None:
        self._source, self._clock = source, clock
        self._lock = threading.Lock()
        self._locks: dict[tuple[str, ...], threading.Lock] = {}
        self._cache: dict[tuple[str, ...], tuple[float, Any]] = {}
        self._samples: dict[str, MetricsSample] = {}

    def _cached(self, key: tuple[str, ...], fetch: Callable[[], Any]) -> Any:
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            hit = self._cache.get(key)
            if hit is not None and self._clock() - hit[0] < self.FRESH_S:
                return hit[1]
            value = fetch()
            self._cache[key] = (self._clock(), value)
            return value

    def forget(self, name: str) -> None:
        """An action changed the job: the next read asks it again."""
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if k[:2] != ("job", name) and k != ("jobs",)}

    def jobs(self) -> list[dict[str, Any]]:
        return self._cached(("jobs",), self._read_jobs)

    def _read_jobs(self) -> list[dict[str, Any]]:
        names = self._source.names()
        with self._lock:  # the figures of jobs the cluster has forgotten go too
            self._samples = {n: sample for n, sample in self._samples.items() if n in names}
            self._cache = {k: v for k, v in self._cache.items() if k[0] != "job" or k[1] in names}
            self._locks = {k: v for k, v in self._locks.items() if k[0] != "job" or k[1] in names}
        out = []
        for name in names:
            try:
                info = self._source.client(name).info()
            except (LookupError, JobForgottenError):
                continue  # ended between the listing and the call
            out.append(_job_row(info))
        return out

    def overview(self, name: str) -> dict[str, Any]:
        return self._cached(("job", name, "overview"), lambda: self._read_overview(name))

    def _read_overview(self, name: str) -> dict[str, Any]:
        client = self._source.client(name)
        info = client.info()
        sample = MetricsSample(self._clock(), client.metrics())
        tasks = task_rows(sample, self._samples.get(name))
        self._samples[name] = sample
        return {**_job_row(info), "info": info, "vertices": vertex_rows(tasks, info["parallelism"]), "subtasks": tasks}

    def checkpoints(self, name: str) -> list[dict[str, Any]]:
        rows = self._cached(("job", name, "checkpoints"), lambda: self._source.client(name).checkpoints())
        return sorted(rows, key=lambda c: c["checkpoint_id"], reverse=True)

    def exceptions(self, name: str) -> list[dict[str, Any]]:
        return self._cached(("job", name, "exceptions"), lambda: self._source.client(name).exceptions())

    def graph_svg(self, name: str) -> str:
        return self._cached(("job", name, "graph"), lambda: self._source.client(name).graph_svg())

    def act(self, name: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
        """Run one of the CLI's control calls on the job (see :data:`ACTIONS`)."""
        try:
            return ACTIONS[action](self._source.client(name), body)
        finally:
            self.forget(name)


@dataclass(frozen=True)
class JobFrame:
    """One job's view of the UI, for a notebook: an IFrame of it (Jupyter shows
    ``_repr_html_``). Where the UI asks for a token, the frame shows its login
    form first; the cookie it sets serves the frames after it."""

    ui_url: str
    job: str
    height: int = 720

    @property
    def url(self) -> str:
        return f"{self.ui_url.rstrip('/')}/#/jobs/{quote(self.job, safe='')}"

    def _repr_html_(self) -> str:
        return (
            f"<iframe src='{html.escape(self.url)}' width='100%' height='{int(self.height)}' "
            "style='border: 1px solid #e1e4e8; border-radius: 6px'></iframe>"
        )


def _job_row(info: dict[str, Any]) -> dict[str, Any]:
    parallelism = info.get("parallelism") or {}
    return {
        "job": info["job"],
        "status": info["status"],
        "parallelism": max(parallelism.values(), default=0),
        "tasks": sum(parallelism.values()),
        "uptime_s": info.get("duration_s"),
        "restarts": info.get("restarts", 0),
        "completed_checkpoints": info.get("completed_checkpoints", 0),
    }


def _timeout(body: dict[str, Any]) -> float:
    value = body.get("timeout_s", 120.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise control.InvalidRequestError(f"timeout_s={value!r} is not a number of seconds above 0")
    return float(value)


def _text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise control.InvalidRequestError(f"{name}={value!r} is not a path")
    return value or None


def _parallelism(body: dict[str, Any]) -> dict[str, int]:
    value = body.get("parallelism")
    if not isinstance(value, dict):
        raise control.InvalidRequestError('rescale needs {"parallelism": {"OPERATOR": N}}')
    return value


ACTIONS: dict[str, Callable[[Any, dict[str, Any]], dict[str, Any]]] = {
    "savepoint": lambda c, b: control.savepoint(c, _text(b, "path"), _timeout(b)),
    "stop": lambda c, b: control.stop(c, _text(b, "savepoint_path"), bool(b.get("drain")), _timeout(b)),
    "cancel": lambda c, b: control.cancel(c),
    "rescale": lambda c, b: control.rescale(c, _parallelism(b), _timeout(b)),
}


class AuthResult(enum.Enum):
    """How a request stands with the UI's token."""

    ALLOWED = "allowed"
    MISSING = "Unauthorized: missing authentication token (log in, or send Authorization: Bearer <token>)"
    INVALID = "Forbidden: invalid authentication token"


def presented_token(request: web.Request) -> str | None:
    """The token a request carries, where Ray's dashboard looks for it."""
    for header in ("Authorization", "X-Ray-Authorization"):
        value = request.headers.get(header, "")
        if value.startswith("Bearer "):
            return value.removeprefix("Bearer ")
    return request.cookies.get(COOKIE) or request.query.get("token")


def check_token(expected: str | None, presented: str | None) -> AuthResult:
    if expected is None:
        return AuthResult.ALLOWED
    if not presented:
        return AuthResult.MISSING
    ok = hmac.compare_digest(expected.encode(), presented.encode())
    return AuthResult.ALLOWED if ok else AuthResult.INVALID


def _redirect(location: str, token: str | None) -> web.Response:
    """To ``location``, logged in: the token in an HttpOnly cookie that no other
    site's page sends."""
    response = web.Response(status=302, headers={"Location": location})
    if token is not None:
        response.set_cookie(COOKIE, token, max_age=COOKIE_MAX_AGE_S, httponly=True, samesite="Strict", path="/")
    return response


def _host_name(request: web.Request) -> str:
    host = request.host
    if host.startswith("["):  # [::1]:8290
        return host[: host.index("]") + 1]
    return host.rsplit(":", 1)[0]


def make_app(source: JobSource | JobBoard, token: str | None, loopback_only: bool = False) -> web.Application:
    """The UI's application: the page, its files and the API over ``source``'s
    jobs; ``token``: what every request must carry (None: nothing);
    ``loopback_only``: answer only requests addressed to a loopback name (the
    server is bound to one)."""
    board = source if isinstance(source, JobBoard) else JobBoard(source)

    @web.middleware
    async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Any:
        if loopback_only and _host_name(request) not in LOOPBACK_NAMES:
            return _refuse(403, f"Forbidden: this UI answers on 127.0.0.1 only, not {request.host}")
        if request.method == "POST":
            origin = request.headers.get("Origin")
            if origin is not None and origin != f"{request.scheme}://{request.host}":
                return _refuse(403, f"Forbidden: a request from {origin} (another site)")
            if request.path != "/login" and request.content_type != "application/json":
                return _refuse(415, "actions take a JSON body (Content-Type: application/json)")
        if request.path == "/login" or request.path.startswith("/static/"):
            return await handler(request)
        presented = presented_token(request)
        result = check_token(token, presented)
        if result is AuthResult.ALLOWED:
            if token is not None and "token" in request.query and not request.path.startswith("/api/"):
                # ?token= once: the cookie from now on, and the token out of the address bar and history.
                rest = {k: v for k, v in request.query.items() if k != "token"}
                return _redirect(request.path + (f"?{urlencode(rest)}" if rest else ""), token)
            return await handler(request)
        if not request.path.startswith("/api/"):  # a person at the page: the login form
            missing = result is AuthResult.MISSING
            return _login_page(request.path_qs, 401 if missing else 403, None if missing else result)
        return _refuse(401 if result is AuthResult.MISSING else 403, result.value)

    async def page(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html")

    async def login(request: web.Request) -> web.StreamResponse:
        if request.method == "GET":
            return _login_page(request.query.get("next", "/"), 200, None)
        form = await request.post()
        after = str(form.get("next", "/"))
        after = after if after.startswith("/") and not after.startswith("//") else "/"
        result = check_token(token, str(form.get("token", "")) or None)
        if result is not AuthResult.ALLOWED:
            return _login_page(after, 401 if result is AuthResult.MISSING else 403, result)
        return _redirect(after, token)

    def read(view: Callable[[str], Any]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(request: web.Request) -> web.StreamResponse:
            return await _answer(lambda: view(request.match_info["job"]))

        return handler

    async def jobs(request: web.Request) -> web.StreamResponse:
        return await _answer(board.jobs)

    async def graph(request: web.Request) -> web.StreamResponse:
        try:
            svg = await asyncio.to_thread(board.graph_svg, request.match_info["job"])
        except (LookupError, JobForgottenError) as exc:
            return web.json_response({"error": str(exc)}, status=404)
        return web.Response(text=svg, content_type="image/svg+xml")

    async def act(request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json() if request.can_read_body else {}
        except json.JSONDecodeError as exc:
            return web.json_response({"error": f"the body is not JSON: {exc}"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "the body must be a JSON object"}, status=400)
        name, action = request.match_info["job"], request.match_info["action"]
        return await _answer(lambda: board.act(name, action, body))

    app = web.Application(middlewares=[guard])
    app.router.add_get("/", page)
    app.router.add_route("*", "/login", login)
    app.router.add_static("/static/", STATIC)
    app.router.add_get("/api/jobs", jobs)
    app.router.add_get("/api/jobs/{job}", read(board.overview))
    app.router.add_get("/api/jobs/{job}/checkpoints", read(board.checkpoints))
    app.router.add_get("/api/jobs/{job}/exceptions", read(board.exceptions))
    app.router.add_get("/api/jobs/{job}/graph.svg", graph)
    app.router.add_post("/api/jobs/{job}/{action:savepoint|stop|cancel|rescale}", act)
    return app


_dumps = partial(json.dumps, default=str)


async def _answer(call: Callable[[], Any]) -> web.StreamResponse:
    """``call``'s value as JSON, run off the event loop (it blocks on the job's
    clients); its error as ``{"error": text}`` with the status that names it."""
    try:
        return web.json_response(await asyncio.to_thread(call), dumps=_dumps)
    except (WeirError, TimeoutError) as exc:
        return web.json_response({"error": str(exc)}, status=_status(exc))


def _status(error: Exception) -> int:
    if isinstance(error, control.InvalidRequestError):
        return 400  # names nothing valid
    if isinstance(error, (LookupError, JobForgottenError)):
        return 404
    return 504 if isinstance(error, TimeoutError) else 409  # the job refused


def _refuse(status: int, text: str) -> web.StreamResponse:
    return web.json_response({"error": text}, status=status)


def _login_page(after: str, status: int, result: AuthResult | None) -> web.Response:
    page = (STATIC / "login.html").read_text()
    problem = "" if result is None else f"<p class='error'>{html.escape(result.value)}</p>"
    page = page.replace("{{next}}", html.escape(after)).replace("{{problem}}", problem)
    return web.Response(text=page, status=status, content_type="text/html")
