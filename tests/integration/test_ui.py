"""The web UI in a real browser (headless Chromium, Debian's package, driven by
Playwright's Python API) on the session's Ray cluster: a keyed sum into a
FileSink runs, the page shows its graph, rates and checkpoints, a killed task
in the exceptions, and its buttons take a savepoint and stop the job; the
stop's savepoint then restores to exactly the sums of an uninterrupted run.

Screenshots of each view go to the test's folder; ``WEIR_UI_SCREENSHOT=PATH``
copies the job's view there too (``WEIR_UI_SCREENSHOT=docs/images/ui-job.png``
renews README's).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import socket
import urllib.error
import urllib.request

import pytest

from tests.checker import check_running_sums
from tests.integration.test_cli import weir
from weir import JobStatus, StreamExecutionEnvironment
from weir.actors.ui_server import cluster_token
from weir.connectors.files import FileSink, read_committed

pytestmark = pytest.mark.ray

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
RECORDS = 200_000
KEYS = 10


def sums_job(out: str, checkpoints: str, records_per_second: float) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(300)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoints)
    (
        env.from_generator(lambda i: (i % KEYS, i), count=RECORDS, records_per_second=records_per_second)
        .uid("gen")
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .name("sums")
        .uid("sums")
        .sink_to(FileSink(out))
        .uid("out")
    )
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def per_second(text: str) -> float:
    """'4.9 k/s' -> 4900.0 (0 for '–')."""
    m = re.fullmatch(r"([\d.]+) (M|k)?/s", text.strip())
    return 0.0 if m is None else float(m[1]) * {"M": 1e6, "k": 1e3, None: 1}[m[2]]


@pytest.fixture
def browser_page(tmp_path):
    if CHROMIUM is None:
        pytest.skip("no chromium binary on this machine: `apt-get install -y chromium` (.ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        page.set_default_timeout(30_000)
        yield page
        browser.close()


def shoot(page, tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    path = tmp_path / f"ui-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def test_the_ui_shows_a_job_and_its_buttons_savepoint_and_stop_it(ray_cluster, tmp_path, checkpoint_dir, browser_page):
    from weir.actors.executor import ClusterJobs
    from weir.actors.ui_server import start_ui, stop_ui

    page = browser_page
    stop_ui()  # docs' examples may have started it on the default port
    out = str(tmp_path / "out")
    client = sums_job(out, checkpoint_dir, 5_000).execute_async("ui-job")  # 40 s of input: the stop comes first
    where = start_ui(ClusterJobs, port=free_port())
    try:
        page.goto(where["url"])
        if where["token_required"]:  # Ray's token authentication is on by default: the page asks for it
            assert "Log in" in page.inner_text("h1")
            page.fill("input[name=token]", cluster_token())
            page.click("button[type=submit]")
        page.wait_for_selector("#jobs tr[data-job='ui-job']")
        shoot(page, tmp_path, "jobs")

        page.click("#jobs a:text-is('ui-job')")
        page.wait_for_selector("#graph svg")
        assert ">sums</text>" in page.inner_html("#graph")  # weir's SVG of the job graph
        page.wait_for_function(  # rates need two reads a second apart; the job reads 5,000 records/s
            "[...document.querySelectorAll('#vertices td.in-rate')].some(td => td.textContent.includes('/s'))"
        )
        rates = {
            row.get_attribute("data-vertex"): per_second(row.query_selector("td.in-rate").inner_text())
            for row in page.query_selector_all("#vertices tr[data-vertex]")
        }
        assert len(rates) == 2 and max(rates.values()) > 0, rates
        tasks = {row.get_attribute("data-task") for row in page.query_selector_all("#tasks tr[data-task]")}
        assert {"sums/0", "sums/1"} < tasks and len(tasks) == 4, tasks  # and the source's two readers
        page.wait_for_function(  # a few seconds of the last minute's line (README's picture shows one)
            "document.querySelector('#vertices polyline')?.getAttribute('points').split(' ').length >= 4"
        )
        overview = shoot(page, tmp_path, "job")
        if os.environ.get("WEIR_UI_SCREENSHOT"):
            shutil.copy(overview, os.environ["WEIR_UI_SCREENSHOT"])

        client.kill_task("sums", 1)
        page.click("#tab-exceptions")
        page.wait_for_selector("#exceptions tbody tr")
        assert "sums/1" in page.inner_text("#exceptions tbody tr")
        shoot(page, tmp_path, "exceptions")

        page.click("#tab-checkpoints")
        page.wait_for_selector("#checkpoints tbody tr:has(.badge.completed)")
        completed = page.query_selector("#checkpoints tbody tr:has(.badge.completed)")
        assert int(completed.get_attribute("data-checkpoint")) > 0
        assert completed.query_selector("td.written").inner_text() != "0 B"  # it wrote state: the sums of the keys
        ack = completed.query_selector("td.acks [data-task='sums/1']")  # each subtask's trigger to ack
        assert ack and "aligned in" in ack.inner_text()  # and the time its barriers took to align
        shoot(page, tmp_path, "checkpoints")

        page.click("#tab-overview")
        page.wait_for_function("document.querySelector('.badge')?.textContent === 'RUNNING'")
        page.click("#act-savepoint")
        page.click("#confirm-ok")
        page.wait_for_selector("#notice.ok, #notice.error")
        notice = page.text_content("#notice")
        assert notice.startswith("job: ui-job   savepoint: "), notice
        assert pathlib.Path(notice.split("savepoint: ")[1].removeprefix("file://"), "_metadata").exists()

        page.click("#act-stop")
        page.fill("input[name=savepoint_path]", str(tmp_path / "stopped"))
        page.click("#confirm-ok")
        page.wait_for_selector("#notice.ok:has-text('SUSPENDED'), #notice.error")
        notice = page.text_content("#notice")
        assert "status: SUSPENDED" in notice, notice
        stopped = notice.split("savepoint: ")[1].strip()
        page.wait_for_selector("#act-stop[disabled]")  # an ended job has no buttons
        shoot(page, tmp_path, "stopped")
    finally:
        stop_ui()
        if not client.status().is_terminal:
            client.cancel()
    assert client.status() is JobStatus.SUSPENDED

    resumed = sums_job(out, checkpoint_dir, 1e9).restore_from_savepoint(stopped).execute("ui-job")
    assert resumed.status is JobStatus.FINISHED
    v = check_running_sums(map(tuple, read_committed(out)), ((i % KEYS, i) for i in range(RECORDS)))
    assert (v.lost, v.duplicated, v.keys_wrong) == (0, 0, 0), v


def test_weir_ui_starts_finds_and_stops_the_clusters_ui(ray_cluster):
    from weir.actors.ui_server import stop_ui

    stop_ui()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = weir(ray_cluster, "ui", "--port", str(port))
    assert refused.returncode == 1
    assert f"Error: the weir UI cannot listen on 127.0.0.1:{port} of the head node" in refused.stderr

    started = json.loads(weir(ray_cluster, "--json", "ui", "--port", str(port)).stdout)
    assert started["url"] == f"http://127.0.0.1:{port}/"
    assert json.loads(weir(ray_cluster, "--json", "ui").stdout) == started  # found running
    moved = weir(ray_cluster, "ui", "--port", str(port + 1))
    assert moved.returncode == 1 and f"runs already on 127.0.0.1:{port}" in moved.stderr

    jobs = urllib.request.Request(started["url"] + "api/jobs")
    if started["token_required"]:
        with pytest.raises(urllib.error.HTTPError) as refused_api:
            urllib.request.urlopen(jobs, timeout=30)
        assert refused_api.value.code == 401
        jobs.add_header("Authorization", f"Bearer {cluster_token()}")
    with urllib.request.urlopen(jobs, timeout=30) as answer:
        assert isinstance(json.load(answer), list)

    assert json.loads(weir(ray_cluster, "--json", "ui", "--stop").stdout) == {"ui": "stopped"}
    assert json.loads(weir(ray_cluster, "--json", "ui", "--stop").stdout) == {"ui": "not running"}


def test_the_ui_benchmark_prints_w1_with_the_page_open_and_closed(ray_cluster):
    """A tiny run of the command docs/benchmarks.md quotes (the figures come from full runs)."""
    from tests.integration.test_examples_and_packaging import _bench
    from weir.actors.ui_server import stop_ui

    stop_ui()
    try:
        args = ["--records", "20000", "--repeat", "1", "--settle-s", "0", "--port", str(free_port())]
        stdout = _bench(ray_cluster, "bench.ui", *args)
    finally:
        stop_ui()
    assert "W1, 20,000 records, p=2, checkpoints every 1 s, whole execute() (median, range):" in stdout
    assert "  web UI closed " in stdout and "  web UI open " in stdout and "1.00x closed" in stdout
    assert "the open page read the job's overview and checkpoints each second" in stdout
