"""The web UI's API over fake job clients (no Ray, no browser): who may call it,
what it answers, the CLI's errors on actions, and the rates it computes from the
totals tasks report. The figures the runtime keeps for it are tested in
test_watched_figures.py, the page in a browser on Ray in tests/integration/test_ui.py."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest
from aiohttp.test_utils import TestClient, TestServer

from weir.actors import control
from weir.actors.job_views import MetricsSample, task_rows, vertex_rows
from weir.actors.ui import COOKIE, JobBoard, make_app
from weir.runtime.errors import JobRequestError, WeirError
from weir.runtime.job_lifecycle import JobStatus

TOKEN = "s3cret-token"


class FakeJob:
    """A job client with RayJobClient's methods, over figures a test sets."""

    def __init__(self, name: str) -> None:
        self.job_name = name
        self.state = JobStatus.RUNNING
        self.records = 0
        self.calls: list[tuple[str, Any]] = []
        self.refuse: Exception | None = None

    def info(self) -> dict[str, Any]:
        self.calls.append(("info", None))
        return {
            "job": self.job_name,
            "status": self.state.value,
            "restarts": 1,
            "duration_s": 12.5,
            "parallelism": {"source": 1, "sum": 2},
            "completed_checkpoints": 3,
        }

    def metrics(self) -> list[dict[str, Any]]:
        self.calls.append(("metrics", None))
        base = {"state": "RUNNING", "backpressured_s": 0.0, "idle_s": 0.0, "queued": 1, "watermark": None}
        return [
            {**base, "task": "source/0", "records_in": self.records, "records_out": self.records},
            {**base, "task": "sum/0", "records_in": self.records // 2, "records_out": self.records // 2},
            {**base, "task": "sum/1", "records_in": self.records // 2, "records_out": self.records // 2},
        ]

    def checkpoints(self) -> list[dict[str, Any]]:
        return [{"checkpoint_id": i, "status": "COMPLETED", "size_bytes": 10} for i in (1, 2, 3)]

    def exceptions(self) -> list[dict[str, Any]]:
        return [{"at": 1.0, "task": "sum/1", "attempt": 0, "exception": "TaskFailedError", "message": "killed"}]

    def graph_svg(self) -> str:
        return "<svg xmlns='http://www.w3.org/2000/svg' width='80' height='30'><text y='20'>sum</text></svg>"

    def status(self) -> JobStatus:
        return self.state

    def _act(self, name: str, args: Any) -> None:
        self.calls.append((name, args))
        if self.refuse is not None:
            raise self.refuse

    def savepoint(self, path: str | None = None, timeout_s: float = 120) -> str:
        self._act("savepoint", (path, timeout_s))
        return path or "/cp/job/savepoints/savepoint-1"

    def stop(self, savepoint_path: str | None = None, drain: bool = False, timeout_s: float = 120) -> str:
        self._act("stop", (savepoint_path, drain, timeout_s))
        self.state = JobStatus.FINISHED if drain else JobStatus.SUSPENDED
        return savepoint_path or "/cp/job/run/chk-4"

    def cancel(self, timeout_s: float = 30) -> None:
        self._act("cancel", None)
        self.state = JobStatus.CANCELED

    def rescale(self, parallelism: dict[str, int], timeout_s: float = 120) -> float:
        self._act("rescale", parallelism)
        return 0.0512


class NoSuchJobError(WeirError, LookupError):
    """As the cluster's JobNotFoundError."""


class FakeJobs:
    def __init__(self, *names: str) -> None:
        self.jobs = {n: FakeJob(n) for n in names}

    def names(self) -> list[str]:
        return sorted(self.jobs)

    def client(self, name: str) -> FakeJob:
        if name not in self.jobs:
            raise NoSuchJobError(f"no job named '{name}' on this Ray cluster (see `weir list`)")
        return self.jobs[name]


class ManualClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def call(app_args: tuple, body: Callable[[TestClient], Any]) -> Any:
    async def run() -> Any:
        async with TestClient(TestServer(make_app(*app_args))) as client:
            return await body(client)

    return asyncio.run(run())


def test_without_a_token_the_api_answers_anyone():
    async def body(c: TestClient) -> Any:
        r = await c.get("/api/jobs")
        return r.status, await r.json()

    status, jobs = call((FakeJobs("a", "b"), None), body)
    assert status == 200
    assert [j["job"] for j in jobs] == ["a", "b"]
    assert jobs[0] == {
        "job": "a",
        "status": "RUNNING",
        "parallelism": 2,
        "tasks": 3,
        "uptime_s": 12.5,
        "restarts": 1,
        "completed_checkpoints": 3,
    }


@pytest.mark.parametrize(
    "headers, status",
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 403),
        ({"Authorization": f"Bearer {TOKEN}"}, 200),
        ({"X-Ray-Authorization": f"Bearer {TOKEN}"}, 200),
        ({"Cookie": f"{COOKIE}=wrong"}, 403),
        ({"Cookie": f"{COOKIE}={TOKEN}"}, 200),
    ],
)
def test_with_a_token_every_api_call_needs_it(headers, status):
    async def body(c: TestClient) -> Any:
        return [
            (await c.get("/api/jobs", headers=headers)).status,
            (await c.get("/api/jobs/a", headers=headers)).status,
            (await c.get("/api/jobs/a/graph.svg", headers=headers)).status,
            (await c.post("/api/jobs/a/cancel", json={}, headers=headers)).status,
        ]

    jobs = FakeJobs("a")
    assert call((jobs, TOKEN), body) == [status] * 4
    assert (("cancel", None) in jobs.jobs["a"].calls) == (status == 200)


def test_the_page_asks_for_the_token_and_a_login_sets_the_cookie():
    async def body(c: TestClient) -> Any:
        page = await c.get("/", allow_redirects=False)
        assert page.status == 401 and "ray get-auth-token" in await page.text()
        assert (await c.get("/static/ui.js")).status == 200  # the page's files are no secret
        wrong = await c.post("/login", data={"token": "nope", "next": "/"}, allow_redirects=False)
        assert wrong.status == 403 and "invalid authentication token" in await wrong.text()
        ok = await c.post("/login", data={"token": TOKEN, "next": "/#/jobs/a"}, allow_redirects=False)
        assert ok.status == 302 and ok.headers["Location"] == "/#/jobs/a"
        cookie = ok.cookies[COOKIE]
        assert cookie.value == TOKEN and cookie["httponly"] and cookie["samesite"] == "Strict"
        assert (await c.get("/api/jobs")).status == 200  # the cookie jar sends it now
        offsite = await c.post("/login", data={"token": TOKEN, "next": "//evil.example/"}, allow_redirects=False)
        assert offsite.headers["Location"] == "/"

    call((FakeJobs("a"), TOKEN), body)


def test_a_token_in_the_address_becomes_the_cookie_and_leaves_the_address():
    async def body(c: TestClient) -> Any:
        r = await c.get(f"/?token={TOKEN}", allow_redirects=False)
        assert r.status == 302 and r.headers["Location"] == "/"
        assert r.cookies[COOKIE].value == TOKEN
        assert (await c.get("/api/jobs")).status == 200

    call((FakeJobs("a"), TOKEN), body)


def test_changes_come_as_json_from_the_pages_own_origin():
    async def body(c: TestClient) -> Any:
        form = await c.post("/api/jobs/a/cancel", data={"x": "1"})
        offsite = await c.post("/api/jobs/a/cancel", json={}, headers={"Origin": "http://evil.example"})
        return form.status, offsite.status

    jobs = FakeJobs("a")
    assert call((jobs, None), body) == (415, 403)
    assert jobs.jobs["a"].state is JobStatus.RUNNING


def test_bound_to_the_loopback_it_answers_only_loopback_names():
    async def body(c: TestClient) -> Any:
        rebound = await c.get("/api/jobs", headers={"Host": "attacker.example:8290"})
        local = await c.get("/api/jobs", headers={"Host": "localhost:8290"})
        return rebound.status, local.status

    assert call((FakeJobs("a"), None, True), body) == (403, 200)


def test_actions_answer_as_the_cli_does():
    async def body(c: TestClient) -> Any:
        sp = await (await c.post("/api/jobs/a/savepoint", json={"path": "/sp"})).json()
        scaled = await (await c.post("/api/jobs/a/rescale", json={"parallelism": {"sum": 3}})).json()
        stopped = await (await c.post("/api/jobs/a/stop", json={"savepoint_path": "/sp2"})).json()
        return sp, scaled, stopped

    jobs = FakeJobs("a")
    sp, scaled, stopped = call((jobs, None), body)
    job = jobs.jobs["a"]
    assert sp == control.savepoint(FakeJob("a"), "/sp", 120) == {"job": "a", "savepoint": "/sp"}
    assert scaled == {"job": "a", "parallelism": {"sum": 3}, "pause_s": 0.051}
    assert stopped == {"job": "a", "status": "SUSPENDED", "savepoint": "/sp2"}
    assert [c for c in job.calls if c[0] in ("savepoint", "rescale", "stop")] == [
        ("savepoint", ("/sp", 120.0)),
        ("rescale", {"sum": 3}),
        ("stop", ("/sp2", False, 120.0)),
    ]


def test_action_errors_carry_the_clis_text_and_a_status_that_names_them():
    async def body(c: TestClient) -> Any:
        out = []
        for path, payload in [
            ("/api/jobs/nope/cancel", {}),
            ("/api/jobs/a/stop", {}),
            ("/api/jobs/a/rescale", {"parallelism": {"sum": 0}}),
            ("/api/jobs/a/rescale", {}),
            ("/api/jobs/a/savepoint", {"timeout_s": -1}),
        ]:
            r = await c.post(path, json=payload)
            out.append((r.status, (await r.json())["error"]))
        return out

    jobs = FakeJobs("a")
    jobs.jobs["a"].refuse = JobRequestError("job 'a' is SUSPENDED: no savepoint or stop now")
    assert call((jobs, None), body) == [
        (404, "no job named 'nope' on this Ray cluster (see `weir list`)"),
        (409, "job 'a' is SUSPENDED: no savepoint or stop now"),
        (400, "'sum=0' is not OPERATOR=PARALLELISM (a whole number from 1)"),
        (400, 'rescale needs {"parallelism": {"OPERATOR": N}}'),
        (400, "timeout_s=-1 is not a number of seconds above 0"),
    ]


def test_a_time_out_is_504():
    async def body(c: TestClient) -> Any:
        r = await c.post("/api/jobs/a/savepoint", json={})
        return r.status, (await r.json())["error"]

    jobs = FakeJobs("a")
    jobs.jobs["a"].refuse = TimeoutError("the job coordinator of 'a' did not answer within 150s")
    assert call((jobs, None), body) == (504, "the job coordinator of 'a' did not answer within 150s")


def test_the_board_reads_a_job_once_a_second_however_many_pages_ask():
    clock = ManualClock()
    jobs = FakeJobs("a")
    board = JobBoard(jobs, clock)
    job = jobs.jobs["a"]
    first = board.overview("a")
    assert all(t["in_per_s"] is None for t in first["subtasks"])  # one report: no rate yet
    job.records = 3000
    assert board.overview("a") is first  # cached: the job is not asked again
    clock.now += 1.5
    second = board.overview("a")
    assert [c for c, _ in job.calls].count("metrics") == 2
    assert {v["vertex"]: v["in_per_s"] for v in second["vertices"]} == {"source": 2000.0, "sum": 2000.0}
    board.act("a", "cancel", {})  # an action: the next read asks again
    assert board.overview("a")["status"] == "CANCELED"


def test_the_board_lets_go_of_jobs_the_cluster_forgot():
    jobs, clock = FakeJobs("a", "b"), ManualClock()
    board = JobBoard(jobs, clock)
    board.overview("a")
    board.overview("b")
    del jobs.jobs["a"]
    clock.now += 2
    assert [j["job"] for j in board.jobs()] == ["b"]
    assert set(board._samples) == {"b"}
    assert {k[1] for k in board._cache if k[0] == "job"} == {"b"}


def test_rates_and_time_shares_from_two_reports():
    before = MetricsSample(
        10.0,
        [
            {"task": "v/0", "records_in": 100, "records_out": 50, "backpressured_s": 1.0, "idle_s": 2.0},
            {"task": "v/1", "records_in": 900, "records_out": 0, "backpressured_s": 0.0, "idle_s": 0.0},
        ],
    )
    now = MetricsSample(
        12.0,
        [
            {"task": "v/0", "records_in": 300, "records_out": 250, "backpressured_s": 1.5, "idle_s": 3.0, "queued": 2},
            # restarted: its totals start again from zero, so no rate this time
            {"task": "v/1", "records_in": 10, "records_out": 0, "backpressured_s": 0.0, "idle_s": 0.0, "queued": 0},
        ],
    )
    rows = task_rows(now, before)
    assert rows[0] | {} == {
        **now.tasks[0],
        "vertex": "v",
        "subtask": 0,
        "in_per_s": 100.0,
        "out_per_s": 100.0,
        "backpressured": 0.25,
        "idle": 0.5,
        "busy": 0.25,
    }
    assert rows[1]["in_per_s"] is None and rows[1]["busy"] == 1.0
    (vertex,) = vertex_rows(rows, {"v": 2})
    assert vertex["in_per_s"] == 100.0 and vertex["busy"] == 1.0 and vertex["queued"] == 2


def test_the_clis_scale_arguments():
    assert control.parse_parallelism(["enrich=4", "a=b=2"]) == {"enrich": 4, "a=b": 2}
    with pytest.raises(control.InvalidRequestError, match="'x' is not OPERATOR=PARALLELISM"):
        control.parse_parallelism(["x"])


def test_where_a_ray_without_the_token_loader_finds_the_token(monkeypatch, tmp_path):
    from weir.actors.ui_server import _token_from_environment

    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    assert _token_from_environment() is None  # token authentication off: the UI asks for nothing
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    (tmp_path / "token").write_text("from-file\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "token"))
    assert _token_from_environment() == "from-file"
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    assert _token_from_environment() == "from-env"
