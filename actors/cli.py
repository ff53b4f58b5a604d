"""The ``weir`` command: jobs on the Ray cluster from a shell.

    weir list                      weir status JOB          weir checkpoints JOB
    weir savepoint JOB [--path P]  weir stop JOB [--savepoint-path P] [--drain]
    weir scale JOB OP=N [OP=N...]  weir cancel JOB                weir kill JOB VERTEX SUBTASK
    weir run [--from-savepoint P] [--allow-non-restored-state] [--parallelism N] job.py [ARGS...]
    weir ui [--host H] [--port N] [--stop]

Human tables by default, ``--json`` for scripts. The cluster is the one in
``RAY_ADDRESS`` (or ``--address``), else the one running on this machine.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from weir.actors import control
from weir.runtime.errors import WeirError


def _emit(ctx: click.Context, data: Any, columns: list[str] | None = None, title: str | None = None) -> None:
    if ctx.obj["json"]:
        click.echo(json.dumps(data, indent=1, default=str))
        return
    rows = data if isinstance(data, list) else [data]
    columns = columns or (list(rows[0].keys()) if rows else [])
    table = Table(title=title)
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*[_cell(r.get(c)) for c in columns])
    Console().print(table)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def _client(ctx: click.Context, job: str) -> Any:
    from weir.actors.executor import RayJobClient

    return RayJobClient.attach(job, ctx.obj["address"])


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--address",
    envvar="RAY_ADDRESS",
    default=None,
    help="Ray cluster address (default: RAY_ADDRESS, else the local cluster).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def cli(ctx: click.Context, address: str | None, as_json: bool) -> None:
    ctx.obj = {"address": address, "json": as_json}


@cli.command("list")
@click.pass_context
def list_cmd(ctx: click.Context) -> None:
    """Jobs whose coordinator is alive on the cluster (running or recently ended)."""
    from weir.actors.executor import list_jobs

    _emit(
        ctx,
        list_jobs(ctx.obj["address"]),
        ["job", "status", "restarts", "completed_checkpoints", "duration_s"],
        "weir jobs",
    )


@cli.command()
@click.argument("job")
@click.pass_context
def status(ctx: click.Context, job: str) -> None:
    """A job's status, restarts and tasks."""
    client = _client(ctx, job)
    info = client.info()
    if ctx.obj["json"]:
        _emit(ctx, {**info, "tasks": client.metrics()})
        return
    _emit(
        ctx, info, ["job", "status", "restarts", "restarting_tasks", "attempt", "completed_checkpoints", "duration_s"]
    )
    _emit(ctx, client.metrics(), ["task", "state", "records_in", "records_out", "backpressured_s", "node_ip"], "tasks")


@cli.command()
@click.argument("job")
@click.pass_context
def checkpoints(ctx: click.Context, job: str) -> None:
    """Every checkpoint of a job: id, status, duration, size, reason."""
    _emit(
        ctx,
        _client(ctx, job).checkpoints(),
        ["checkpoint_id", "status", "duration_ms", "size_bytes", "reason", "location"],
        f"checkpoints of {job}",
    )


@cli.command()
@click.argument("job")
@click.option(
    "--path",
    default=None,
    help="Folder or pyarrow.fs URI for the savepoint (default: savepoints/ beside the job's checkpoint runs).",
)
@click.option("--timeout", "timeout_s", default=120.0, show_default=True, help="Seconds to wait for it.")
@click.pass_context
def savepoint(ctx: click.Context, job: str, path: str | None, timeout_s: float) -> None:
    """Take a savepoint; the job goes on. Prints where it is."""
    _emit(ctx, control.savepoint(_client(ctx, job), path, timeout_s))


@cli.command()
@click.argument("job")
@click.option("--savepoint-path", default=None, help="Folder or pyarrow.fs URI (default: a final retained checkpoint).")
@click.option("--drain", is_flag=True, help="End the input (fire everything, finish) instead of suspending.")
@click.option("--timeout", "timeout_s", default=120.0, show_default=True, help="Seconds to wait for it.")
@click.pass_context
def stop(ctx: click.Context, job: str, savepoint_path: str | None, drain: bool, timeout_s: float) -> None:
    """Stop with a savepoint: SUSPENDED (resume with `weir run --from-savepoint`), or FINISHED with --drain."""
    _emit(ctx, control.stop(_client(ctx, job), savepoint_path, drain, timeout_s))


@cli.command()
@click.argument("job")
@click.argument("changes", nargs=-1, required=True)
@click.option("--timeout", "timeout_s", default=120.0, show_default=True, help="Seconds to wait for it.")
@click.pass_context
def scale(ctx: click.Context, job: str, changes: tuple[str, ...], timeout_s: float) -> None:
    """Change operators' parallelism while the job runs: weir scale JOB enrich=4 totals=2."""
    _emit(ctx, control.rescale(_client(ctx, job), control.parse_parallelism(changes), timeout_s))


@cli.command()
@click.argument("job")
@click.pass_context
def cancel(ctx: click.Context, job: str) -> None:
    """End a job now (operators only close; nothing is flushed)."""
    _emit(ctx, control.cancel(_client(ctx, job)))


@cli.command()
@click.argument("job")
@click.option("-o", "--output", default=None, help="SVG file to write (default: JOB.svg here).")
@click.pass_context
def graph(ctx: click.Context, job: str, output: str | None) -> None:
    """Draw a job's graph as it runs now: vertices, chains, parallelism, partitioners (SVG)."""
    path = output or f"{job}.svg"
    with open(path, "w") as f:
        f.write(_client(ctx, job).graph_svg())
    _emit(ctx, {"job": job, "graph": os.path.abspath(path)})


@cli.command()
@click.argument("job")
@click.argument("vertex")
@click.argument("subtask", type=int)
@click.pass_context
def kill(ctx: click.Context, job: str, vertex: str, subtask: int) -> None:
    """Kill one task actor, to rehearse failover."""
    _emit(ctx, {"killed": _client(ctx, job).kill_task(vertex, subtask)})


@cli.command()
@click.argument("action", type=click.Choice(["show", "start", "stop"]), default="show")
@click.pass_context
def pool(ctx: click.Context, action: str) -> None:
    """The cluster's pool of started task actors and job coordinators: show it,
    start it with the processes a first job takes, up when this returns (in a
    cluster's start commands), or stop it (after upgrading weir; it refuses
    while jobs run)."""
    import ray

    from weir.actors.pool import get_pool, warm_pool

    handle = get_pool(ctx.obj["address"], create=action == "start")
    if handle is None:
        _emit(ctx, {"pool": "not started"})
        return
    stats = warm_pool(ctx.obj["address"]) if action == "start" else ray.get(handle.stats.remote())
    if action == "stop":
        running = ray.get(handle.running_jobs.remote())
        if running:
            raise click.ClickException(f"jobs are running on the pool: {', '.join(running)}; stop or cancel them first")
        ray.kill(handle, no_restart=True)
        _emit(ctx, {"pool": "stopped"})
        return
    if ctx.obj["json"]:
        _emit(ctx, stats)
        return
    _emit(ctx, stats["shapes"], ["shape", "fresh", "idle", "starting", "leased"], "task actors")
    _emit(ctx, {k: stats[k] for k in ("idle_coordinators", "applications", "jobs", "created", "settings")})


@cli.command()
@click.option(
    "--host",
    default=None,
    help="Address it binds on the head node (default 127.0.0.1: reachable from the head node only; "
    "0.0.0.0: from every network it is on).",
)
@click.option("--port", type=int, default=None, help="Port on the head node (default 8290).")
@click.option("--stop", "stop_it", is_flag=True, help="End the cluster's UI.")
@click.pass_context
def ui(ctx: click.Context, host: str | None, port: int | None, stop_it: bool) -> None:
    """The cluster's web UI for every job on it: start it on the head node (or
    find it running) and print its address."""
    from weir.actors.executor import ClusterJobs
    from weir.actors.ui_server import start_ui, stop_ui

    if stop_it:
        _emit(ctx, {"ui": "stopped" if stop_ui(ctx.obj["address"]) else "not running"})
        return
    where = start_ui(ClusterJobs, ctx.obj["address"], host, port)
    _emit(ctx, where)
    if where["token_required"] and not ctx.obj["json"]:
        click.echo("Ray's token authentication is on: log in with the token `ray get-auth-token` prints.")


@cli.command(context_settings={"ignore_unknown_options": True})
@click.option("--parallelism", type=int, default=None, help="Default parallelism for the job's environment.")
@click.option("--from-savepoint", "savepoint", default=None, help="Start from this savepoint or retained checkpoint.")
@click.option(
    "--allow-non-restored-state", is_flag=True, help="Drop savepoint state of operators the job no longer has."
)
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run(
    ctx: click.Context,
    parallelism: int | None,
    savepoint: str | None,
    allow_non_restored_state: bool,
    script: str,
    args: tuple[str, ...],
) -> None:
    """Run a job script (it calls env.execute()) against the cluster."""
    from weir.actors.cluster import ensure_ray
    from weir.runtime.storage import find_restore_point, read_metadata

    if parallelism is not None:
        os.environ["WEIR_DEFAULT_PARALLELISM"] = str(parallelism)
    if savepoint is not None:
        read_metadata(find_restore_point(savepoint))  # a missing or broken savepoint fails here, before anything starts
        os.environ["WEIR_RESTORE_FROM"] = savepoint
        os.environ["WEIR_ALLOW_NON_RESTORED_STATE"] = "1" if allow_non_restored_state else ""
    ensure_ray(ctx.obj["address"])
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


def main() -> None:
    try:
        cli(standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        sys.exit(1)
    except (WeirError, TimeoutError) as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
