"""``bide bench``: the click command over ``bench.suite``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ..engine.base.render import to_json
from . import report, suite


@click.command("bench")
@click.argument("what", type=click.Choice((*suite.WHAT, "watch", "pg-wake", "map", "follow",
                                                  "timers", "serve", "commit", "langgraph-tools")),
                default="all")
@click.option("--quick", is_flag=True, help="Every workload and policy at small size (< 1 min).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write every measurement to this file as JSON.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Draw the trade-offs into this PNG (needs matplotlib: "
                   "pip install 'bide[plot]').")
@click.option("--home", type=click.Path(file_okay=False, path_type=Path),
              help="Where to put the bench's stores (default: a temporary directory).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for the crash moments.")
@click.option("--kills", type=click.IntRange(min=1), default=None,
              help="Crashes per (workload, policy) [default: 20, --quick 2].")
@click.option("--jobs", type=click.IntRange(min=1), default=2, show_default=True,
              help="Crash runs in parallel (timed runs are always one at a time).")
@click.option("--pg", "pg_url", metavar="URL",
              help="peers/postgres/all: measure on this PostgreSQL server (a role that may "
                   "CREATE DATABASE) instead of a throwaway server started from the local "
                   "binaries.")
@click.option("--no-pg", is_flag=True, help="peers/all: leave PostgreSQL out.")
def bench(what: str, quick: bool, json_path: Path | None, plot_path: Path | None,
          home: Path | None, seed: int, kills: int | None, jobs: int, pg_url: str | None,
          no_pg: bool) -> None:
    """Measure checkpoint granularity against write amplification and crash redo.

    WHAT is granularity (bide's policies, the raw-LMDB floor, crashes), peers
    (LangGraph on the same workloads, if installed; LangGraph's PostgresSaver and
    DBOS against bide on one PostgreSQL server, and 1/2/4 worker processes on one
    PostgreSQL home; postgres runs those alone) or all; watch measures the
    watcher (inbox latency, bursts, idle CPU) on its own; pg-wake measures its
    LISTEN/NOTIFY wake-ups on the PostgreSQL server at $BIDE_BENCH_PG; map
    measures a map of 100 items (bide.Send) against a chain of 100 steps, and a
    map whose items each pause for an approval (100 and 300 items); follow
    measures commit -> event latency across processes for ``follow`` (LMDB, and
    PostgreSQL at --pg or $BIDE_BENCH_PG, else a throwaway server unless --no-pg);
    timers measures how late an idle watcher resumes sleeping runs (LMDB, and the
    --pg home if given); serve measures bide serve (needs bide[serve]): GET
    /runs/{id} per second against the same read in-process, and decision -> running
    again over HTTP against an inbox file; commit measures one durable commit (time,
    device bytes) against the floors of a write-ahead file and of LMDB behind one;
    langgraph-tools measures bide.langgraph.durable_tool: a call wrapped against the
    same call bare, and a bide flow's ctx.tool, then LangGraph killed mid-run with and
    without bide tools (effects duplicated, questions asked).
    """
    if pg_url is not None:
        from ..engine.postgres.home import is_url

        if no_pg:
            raise click.UsageError("--pg and --no-pg exclude each other")
        if not is_url(pg_url):
            raise click.BadParameter(f"{pg_url!r} is not a postgresql:// URL", param_hint="--pg")
    if what == "watch":
        _watch(quick, json_path, home)
        return
    if what == "pg-wake":
        _pg_wake(quick, json_path, home)
        return
    if what == "map":
        _map(quick, json_path, home)
        return
    if what == "follow":
        _follow(quick, json_path, home, pg_url, no_pg)
        return
    if what == "timers":
        _timers(quick, json_path, home, pg_url)
        return
    if what == "serve":
        _serve(quick, json_path, home)
        return
    if what == "commit":
        from . import commit_path

        out = commit_path.run(quick=quick, home=home)
        click.echo(commit_path.render(out))
        if json_path is not None:
            json_path.write_text(to_json(out, indent=1) + "\n")
        return
    if what == "langgraph-tools":
        _langgraph_tools(quick, json_path, home, seed, kills, jobs)
        return
    if plot_path is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise click.UsageError("--plot needs matplotlib: pip install 'bide[plot]'") from None
    plan = suite.Plan(what, quick, kills=kills, pg=pg_url, no_pg=no_pg)
    for skipped in (plan.peer_skip, plan.pg_skip):
        if skipped:
            click.echo(skipped, err=True)
    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
    with click.progressbar(length=plan.units, label=f"bide bench {what}", file=sys.stderr,
                           show_pos=True) as bar:
        results = suite.run(plan, home=home, seed=seed, jobs=jobs, tick=bar.update)
    results["targets"] = report.targets(results)
    click.echo(report.render(results))
    click.echo(f"\n{results['meta']['seconds']:.1f} s", err=True)
    if json_path is not None:
        json_path.write_text(to_json(results, indent=1) + "\n")
        click.echo(f"wrote {json_path}", err=True)
    if plot_path is not None:
        report.plot(results, str(plot_path))
        click.echo(f"wrote {plot_path}", err=True)


def _watch(quick: bool, json_path: Path | None, home: Path | None) -> None:
    from . import watch as watching

    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
    out = watching.run(quick=quick, home=home, say=lambda line: click.echo(line, err=True))
    click.echo(watching.render(out))
    if json_path is not None:
        json_path.write_text(to_json(out, indent=1) + "\n")
        click.echo(f"wrote {json_path}", err=True)


def _pg_wake(quick: bool, json_path: Path | None, home: Path | None) -> None:
    import os

    from . import pg_wake

    url = os.environ.get("BIDE_BENCH_PG")
    if not url:
        raise click.UsageError("pg-wake needs a PostgreSQL server: set BIDE_BENCH_PG to its "
                               "URL (a scratch database is made there and dropped)")
    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
    out = pg_wake.run(url, quick=quick, home=home, say=lambda line: click.echo(line, err=True))
    click.echo(pg_wake.render(out))
    if json_path is not None:
        json_path.write_text(to_json(out, indent=1) + "\n")
        click.echo(f"wrote {json_path}", err=True)


def _map(quick: bool, json_path: Path | None, home: Path | None) -> None:
    from . import mapping

    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
    out = mapping.run(quick=quick, home=home)
    click.echo(mapping.render(out))
    if json_path is not None:
        json_path.write_text(to_json(out, indent=1) + "\n")
        click.echo(f"wrote {json_path}", err=True)


def _follow(quick: bool, json_path: Path | None, home: Path | None, pg_url: str | None,
            no_pg: bool) -> None:
    import os
    from contextlib import ExitStack

    from . import follow as following

    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        url = None if no_pg else pg_url or os.environ.get("BIDE_BENCH_PG")
        if url is not None:
            from .pg_wake import scratch_database

            url = stack.enter_context(scratch_database(url))
        elif not no_pg:
            url = _throwaway_database(stack)
        out = following.run(quick=quick, home=home, pg=url,
                            say=lambda line: click.echo(line, err=True))
    click.echo(following.render(out))
    if json_path is not None:
        json_path.write_text(to_json(out, indent=1) + "\n")
        click.echo(f"wrote {json_path}", err=True)


def _throwaway_database(stack: Any) -> str | None:
    """A database on a PostgreSQL server started from this machine's binaries, or None
    (said on stderr) when there are none or it does not start."""
    from .kit.pg_server import throwaway

    try:
        cluster = stack.enter_context(throwaway())
    except RuntimeError as exc:
        click.echo(f"PostgreSQL left out: {exc}", err=True)
        return None
    return str(cluster.url(cluster.create_database()))


def _timers(quick: bool, json_path: Path | None, home: Path | None, pg: str | None) -> None:
    from . import timers

    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
    out = timers.run(quick=quick, home=home, pg=pg)
    click.echo(timers.render(out))
    if json_path is not None:
        json_path.write_text(to_json(out, indent=1) + "\n")
        click.echo(f"wrote {json_path}", err=True)


def _serve(quick: bool, json_path: Path | None, home: Path | None) -> None:
    from . import serve as serving

    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
    out = serving.run(quick=quick, home=home, say=lambda line: click.echo(line, err=True))
    click.echo(serving.render(out))
    if json_path is not None:
        json_path.write_text(to_json(out, indent=1) + "\n")
        click.echo(f"wrote {json_path}", err=True)


def _langgraph_tools(quick: bool, json_path: Path | None, home: Path | None, seed: int,
                     kills: int | None, jobs: int) -> None:
    from . import langgraph_tools

    why = langgraph_tools.skip()
    if why is not None:
        raise click.UsageError(f"langgraph-tools needs LangGraph: {why}")
    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
    out = langgraph_tools.run(quick=quick, home=home, seed=seed, kills=kills, jobs=jobs,
                              say=lambda line: click.echo(line, err=True))
    click.echo(langgraph_tools.render(out))
    click.echo(f"\n{out['meta']['seconds']:.1f} s", err=True)
    if json_path is not None:
        json_path.write_text(to_json(out, indent=1) + "\n")
        click.echo(f"wrote {json_path}", err=True)
