"""The ``bide`` command line: a thin layer over the library.

Each command parses its arguments, calls one library function, and prints a
table for people or JSON with ``--json``. Exit codes: 0 ok, 1 the thing asked
about is in a bad state (e.g. ``doctor`` found problems, a resumed run failed),
2 usage error, 3 not found (run, version, approval, home); ``bide run``: 4 the run
waits for a person; 130 Ctrl-C (``bide run``, ``bide log --follow``). Reading commands
open the home with ``create=False`` and only read, so they work while a
watcher or an app is writing.

It calls only ``bide``'s public surface (root names and ``Engine`` methods); the one
internal module it uses is ``engine.base.render`` (text for people: tables, ages, sizes),
besides the entries of the demo, bench and torture tools (tests/test_surface.py checks).
"""

from __future__ import annotations

import datetime
import errno
import importlib
import inspect
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from . import (
    ApprovalKeyError,
    BideError,
    ConfigError,
    CopyReport,
    Decision,
    DecisionNotAllowed,
    DecisionRefused,
    Engine,
    Event,
    Flow,
    FollowTimeout,
    HomeConfig,
    HomeFiles,
    IntentStatus,
    InvalidSchedule,
    LangGraphThread,
    NotFound,
    Outage,
    PackError,
    Readiness,
    RunExists,
    Server,
    Status,
    UnknownKey,
    UnknownStatus,
    Watcher,
    WatchLog,
    check_run_id,
    copy_home,
    pack,
    read_approval_key,
)
from . import compact as compact_home
from . import open as open_home
from .engine.base.render import (  # text for people
    ago,
    clip,
    due_text,
    expiry_text,
    fields,
    first_line,
    parse_age,
    plural,
    preview,
    size,
    table,
    to_json,
)
from .engine.read.scripting import error_doc, iso_times, wants_json, who  # what scripts get

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK, EXIT_BAD_STATE, EXIT_USAGE, EXIT_NOT_FOUND = 0, 1, 2, 3
# The one map from error categories to exit codes: the first row an error is an instance of.
EXIT_CODES: tuple[tuple[type[BideError], int], ...] = (
    (ConfigError, EXIT_USAGE),
    (NotFound, EXIT_NOT_FOUND),
    (BideError, EXIT_BAD_STATE),
)


def exit_code(exc: BideError) -> int:
    return next(code for category, code in EXIT_CODES if isinstance(exc, category))


# `bide --help` is the map: every command under what a person does with it, in one line
# (tests/test_cli_help.py checks that each command is here exactly once)
COMMAND_MAP: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("Run", (
        ("demo", "Watch a crash, a resume and an approval happen, for real."),
        ("run", "Start a run of FLOW in this process and print its records live."),
        ("submit", "Record a pending run and return; `bide watch` runs it."),
        ("resume", "Continue a run from its latest checkpoint, in this process."),
        ("recover", "Resume every pending, interrupted, decided or orphaned run."),
        ("fork", "Start a new run from another run's state at a version."),
        ("cancel", "Stop a run for good."),
    )),
    ("Decide", (
        ("pending", "Decisions waiting for a person: approvals and questions."),
        ("approve", "Approve or reject a pause (a decision file into the inbox)."),
        ("answer", "Answer a question a run asked, with a JSON value."),
        ("signal", "Send a named signal to a run that waits for it."),
        ("inbox", "Decision files the inbox rejected, and why."),
    )),
    ("Inspect", (
        ("runs", "List runs, newest first."),
        ("show", "One run: status, version, what it waits on, its tool calls."),
        ("log", "A run's timeline: every record in order."),
        ("state", "A run's state, at its latest checkpoint or at a version."),
        ("diff", "Which state keys changed between two versions."),
        ("checkpoints", "A run's checkpoints, with sizes."),
        ("intents", "A run's tool calls: status, attempts, idempotency keys."),
        ("export", "Everything stored about a run, as one JSON document."),
        ("stats", "Store size, map usage, records by type, runs by status."),
    )),
    ("Operate", (
        ("watch", "Take decisions from the inbox and resume runs, until stopped."),
        ("schedule", "Record (or replace) a schedule that starts runs."),
        ("schedules", "The home's schedules and when each fires next."),
        ("unschedule", "Remove a schedule (its runs stay)."),
        ("config", "Each effective setting and where it came from."),
        ("doctor", "Check every checksum and every derived table against a replay."),
        ("prune", "Remove old checkpoints and finished runs, as named."),
        ("compact", "Rewrite the store without its free pages."),
        ("copy", "Copy a home record by record (LMDB <-> PostgreSQL)."),
        ("pack", "Pack bide, your app and their dependencies into one file."),
    )),
    ("Serve", (
        ("serve", "An HTTP API and approvals page; keeps runs going like watch."),
    )),
    ("Measure", (
        ("bench", "Benchmarks: granularity, concurrency, peers, PostgreSQL, ..."),
        ("torture", "Crash bide at every fault point and at random; check each run."),
    )),
)


class BideGroup(click.Group):
    """Turns bide's errors into a message on stderr and a stable exit code; under
    ``--json``, usage errors too, as one JSON object (``error``, ``kind``, ``exit_code``)."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands grouped as COMMAND_MAP groups them; one not in it under Other."""
        mapped = {name for _, rows in COMMAND_MAP for name, _ in rows}
        sections = [(title, [(n, h) for n, h in rows if n in self.commands])
                    for title, rows in COMMAND_MAP]
        other = [(n, self.commands[n].get_short_help_str(60)) for n in self.list_commands(ctx)
                 if n not in mapped and not self.commands[n].hidden]
        groups = [*sections, ("Other", other)]
        width = max(len(n) for _, rows in groups for n, _ in rows)
        for title, rows in groups:
            if rows:  # one name column for every section, so the map reads as one table
                with formatter.section(f"{title} commands"):
                    formatter.write_dl([(n.ljust(width), h) for n, h in rows], col_spacing=2)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        name = next((a for a in args if not a.startswith("-")), None)
        cmd = self.commands.get(name or "")
        ctx.meta["bide.json"] = cmd is not None and wants_json(args) and any(
            isinstance(p, click.Option) and p.is_flag and "--json" in p.opts for p in cmd.params)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        as_json = bool(ctx.meta.get("bide.json"))
        try:
            return super().invoke(ctx)
        except BideError as exc:
            _fail(str(exc), type(exc).__name__, exit_code(exc), as_json)
        except OSError as exc:  # a read-only home's inbox, or a directory we may not write
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            _fail(f"cannot write {exc.filename}: {exc.strerror}", "OSError", EXIT_BAD_STATE,
                  as_json)
        except click.ClickException as exc:  # bad usage: click's own message unless --json
            if not as_json:
                raise
            _fail(exc.format_message(), type(exc).__name__, exc.exit_code, as_json)


def _fail(message: str, kind: str, code: int, as_json: bool) -> None:
    if as_json:
        click.echo(to_json(error_doc(message, kind, code), indent=None), err=True)
    else:
        click.echo(f"error: {message}", err=True)
    raise click.exceptions.Exit(code)


class HomeParam(click.ParamType):
    """A home directory, or a URL (``postgresql://...``) kept as text for ``bide.open`` to
    judge: a Path would fold its ``//``."""

    name = "HOME"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Path | str:
        return value if "://" in str(value) else Path(value)


HOME = HomeParam()


def common_options(fn: F) -> F:
    """``--home`` and ``--json``, shared by every command."""
    fn = click.option("--json", "as_json", is_flag=True,
                      help="Print JSON instead of a table.")(fn)
    fn = click.option("--home", type=HOME, envvar="BIDE_HOME",
                      default=".bide", show_default=True, show_envvar=True,
                      help="The bide home directory, or a postgresql:// URL.")(fn)
    return fn


def _engine(home: Path, *, configured: bool = False) -> Engine:
    """Open an existing home (never create one) and close it when the command ends;
    ``configured``: with the durability and lease TTL its config gives (a command that
    runs nodes)."""
    engine = open_home(home, create=False, **(_configured(home) if configured else {}))
    click.get_current_context().call_on_close(engine.close)
    return engine


def _configured(home: Path | str) -> dict[str, Any]:
    """Durability and lease TTL from $BIDE_* and HOME/bide.toml (or $BIDE_CONFIG), read as
    `bide watch` reads them: every command that runs nodes honours one config."""
    cfg = HomeConfig.load(home)
    return {"durability": cfg["durability"], "lease_ttl": cfg["lease_ttl"]}


def _out(as_json: bool, data: Any, human: Callable[[], str]) -> None:
    click.echo(to_json(iso_times(data)) if as_json else human())


class RunId(click.ParamType):
    """A run id, checked by the engine's own rule (``check_run_id``) before anything runs."""

    name = "RUN"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        try:
            return check_run_id(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


RUN_ID = RunId()


class AgeParam(click.ParamType):
    """An age (``90s``, ``15m``, ``12h``, ``7d``, ``2w``) as seconds; a bad or negative one is
    a usage error naming the option."""

    name = "AGE"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return parse_age(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


AGE = AgeParam()


@click.group(cls=BideGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="bide")
def main() -> None:
    """bide: durable agent runs in a directory.

    The home is --home, else $BIDE_HOME, else ./.bide. Exit codes: 0 ok, 1 bad state,
    2 usage, 3 not found, 4 (bide run) waits for a person, 130 Ctrl-C. With --json,
    an error is one JSON object on stderr: {"error", "kind", "exit_code"}.
    `bide COMMAND --help` gives each command's options.
    """


# -- reading --------------------------------------------------------------------------
@main.command()
@common_options
@click.option("--status", help="Only runs with this status (e.g. WAITING_APPROVAL).")
@click.option("--flow", help="Only runs of this flow.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many (newest first).")
def runs(home: Path, as_json: bool, status: str | None, flow: str | None,
         limit: int | None) -> None:
    """List runs, newest first."""
    try:
        wanted = None if status is None else Status.of(status)
    except UnknownStatus as exc:
        raise click.BadParameter(str(exc), param_hint="--status") from None
    rows = _engine(home).run_rows(status=wanted, flow=flow, limit=limit)
    now = time.time()
    _out(as_json, rows, lambda: table(
        ["RUN", "FLOW", "STATUS", "VER>", "STEP>", "WAITING ON~", "UPDATED"],
        [[r["run_id"], r["flow"], r["status"], r["state_version"], r["superstep"],
          r["waiting_on"], ago(r["updated_at"], now)] for r in rows],
    ) if rows else "no runs")


@main.command()
@common_options
@click.argument("run_id", metavar="RUN", type=RUN_ID)
def show(home: Path, as_json: bool, run_id: str) -> None:
    """A run's snapshot: status, version, what it waits on, its pending writes."""
    doc = _engine(home).show(run_id)
    _out(as_json, doc, lambda: _show_text(doc, time.time()))


def _show_text(d: dict[str, Any], now: float) -> str:
    lease = d["lease"]
    lease_text = "none"
    if lease is not None:
        when = ago(lease["expires_at"], now)
        until = f"expires {when}" if lease["expires_at"] > now else f"expired {when}"
        until += "" if lease["owner_alive"] else "; its process is gone"
        lease_text = f"{lease['owner']} (token {lease['token']}, {until})"
    waiting = d["waiting"]
    waiting_text = "-" if not waiting else (  # a LangGraph thread's interrupts: their requests
        f"interrupt: {', '.join(waiting.get('approval_ids') or [])} (bide pending)"
    ) if waiting.get("type") == "interrupt" else (
        f"{' '.join(filter(None, (waiting.get('type'), waiting.get('approval_id'))))} in node "
        f"{waiting.get('item') or waiting.get('node_id')}"  # a Send task: search[3]
        + (f": {waiting['question']}" if waiting.get("question") else "")
        + (f": {waiting['tool']}({waiting['args_preview']})"  # a call in doubt
           if waiting.get("args_preview") is not None else "")
        + (f": {waiting['name']!r}" if waiting.get("name") else "")  # a signal
        + (f": run {waiting['run_id']}" if waiting.get("type") == "child" else "")
        + (f" {due_text(waiting['until'], now)}" if waiting.get("until") else ""))
    pending = "\n".join(f"{node}: {text}" for node, text in d["pending_writes"].items())
    return fields([
        ("run", d["run_id"]),
        ("flow", f"{d['flow']} ({d['fingerprint']})"),
        ("status", d["status"] + (f" ({d['reason']})" if d["reason"] else "")),
        ("state_version", f"{d['state_version']} (superstep {d['superstep']})"),
        ("committed", ", ".join(d["committed"]) or "-"),
        ("pending writes", pending or "-"),
        ("waiting", waiting_text),
        ("lease", lease_text),
        ("error", first_line(d["error"], 80) or None),
        ("parent", f"{d['parent']} at version {d['parent_version']}" if d["parent"] else None),
        *_family(d),
        ("policy", ", ".join(f"{k}={v}" for k, v in d["policy"].items())),
        ("created", ago(d["created_at"], now)),
        ("updated", ago(d["updated_at"], now)),
        ("records", f"{d['records']} ({size(d['bytes'])})"),
    ])


def _family(d: dict[str, Any]) -> list[tuple[str, Any]]:
    """``bide show``'s lines for ctx.child links, only for a run that has them."""
    kids = "\n".join(f"{c['run_id']} {c['status']} (flow {c['flow']}, node {c['node']})"
                     for c in d.get("children", []))
    return ([("child of", d["child_of"])] if d.get("child_of") else []) + (
        [("children", kids)] if kids else [])


@main.command()
@common_options
@click.argument("run_id", metavar="RUN", type=RUN_ID)
@click.option("-f", "--follow", "follow", is_flag=True,
              help="Print the records as they are committed, until the run finishes or "
                   "pauses. Ctrl-C stops: exit 130.")
@click.option("--through-pauses", is_flag=True,
              help="With --follow: go on while the run waits for a person, until it finishes.")
def log(home: Path, as_json: bool, run_id: str, follow: bool, through_pauses: bool) -> None:
    """The run's timeline: every record in order, with sizes (JSON lines with --json)."""
    engine = _engine(home)
    if follow or through_pauses:
        _follow(engine, run_id, as_json, through_pauses=through_pauses)
        return
    entries = engine.log(run_id)
    if as_json:
        for entry in entries:
            click.echo(to_json(iso_times(entry), indent=None))
        return
    now = time.time()
    click.echo(table(["SEQ>", "TYPE", "BYTES>", "AGE", "WHAT~"],
                     [[e["seq"], e["type"], size(e["bytes"]), ago(e["at"], now), e["summary"]]
                      for e in entries]))


EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it


FOLLOW_RETRY = (0.1, 5.0)  # seconds: first and longest pause while the store is away


def _follow(engine: Engine, run_id: str, as_json: bool, *, through_pauses: bool) -> None:
    """Print the run's events as they are committed (``Engine.follow``); Ctrl-C exits 130.

    The store away (a PostgreSQL outage longer than its reconnect time: ``StoreError``)
    does not end it: it says so on stderr once per outage and follows again from the
    last event printed, with no gap and no repeat (``Engine.follow``'s ``outage``).
    """
    outage = Outage(
        *FOLLOW_RETRY,
        away=lambda exc: click.echo(f"log: cannot read the store now ({exc}); trying again",
                                    err=True),
        back=lambda: click.echo("log: the store is back; following on", err=True))
    events = None
    try:
        events = engine.follow(run_id, through_pauses=through_pauses, outage=outage)
        for event in events:
            _print_event(event, as_json)
    except KeyboardInterrupt:
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
    finally:
        if events is not None:
            events.close()


def _print_event(event: Event, as_json: bool) -> None:
    """One event on stdout, flushed at once (a follower reads it as it comes)."""
    click.echo(_event_line(event, as_json))
    sys.stdout.flush()


def _event_line(event: Event, as_json: bool) -> str:
    """One event: its ``bide log --json`` object, or ``seq  time  type  what`` for people."""
    if as_json:
        return to_json(iso_times(event.to_dict()), indent=None)
    when = time.strftime("%H:%M:%S", time.localtime(event.at)) if event.at else "--:--:--"
    return f"{event.seq:>6}  {when}  {event.kind:<16}  {event.summary}"


@main.command()
@common_options
@click.argument("run_id", metavar="RUN", type=RUN_ID)
def checkpoints(home: Path, as_json: bool, run_id: str) -> None:
    """The run's checkpoints: version, superstep, status, committed nodes, bytes."""
    engine = _engine(home)
    try:
        rows = engine.checkpoint_rows(run_id)
    except LangGraphThread:
        thread_rows = _thread_view(engine, run_id, "checkpoints")
        _out(as_json, thread_rows, lambda: table(
            ["VER>", "STEP>", "SOURCE", "CHECKPOINT", "WRITES>", "NOTE", "AGE"],
            [[c["version"], c["step"], c["source"] or "-", c["checkpoint_id"], c["writes"],
              "interrupt" if c["interrupted"] else "error" if c["error"] else "-",
              ago(c["at"], time.time())] for c in thread_rows]))
        return
    now = time.time()
    notes = [f"* {c['note']} (seq {c['seq']})" for c in rows if c["note"]]
    _out(as_json, rows, lambda: "\n\n".join([table(
        ["VER>", "STEP>", "STATUS", "KIND", "COMMITTED~", "NEXT~", "BYTES>", "AGE"],
        [[f"{c['version']}{'*' if c['note'] else ''}", c["superstep"], c["status"],
          "full" if c["full"] else "delta", ",".join(c["committed"]) or "-",
          ",".join(c["next"]) or "-", size(c["bytes"]), ago(c["at"], now)] for c in rows]),
        *(["\n".join(notes)] if notes else [])]))


@main.command()
@common_options
@click.argument("run_id", metavar="RUN", type=RUN_ID)
@click.option("--version", "version", type=click.IntRange(min=0),
              help="A checkpoint's state_version "
              "(default: the latest).")
@click.option("--key", help="Print only this state key's value.")
def state(home: Path, as_json: bool, run_id: str, version: int | None, key: str | None) -> None:
    """The run's state at its latest checkpoint or at --version (a LangGraph thread's:
    its channels)."""
    engine = _engine(home)
    try:
        found, values = engine.state_at(run_id, version)
    except LangGraphThread:
        found, values = _thread_view(engine, run_id, "state", version)
    if key is not None:
        if key not in values:
            raise UnknownKey(run_id, key, found)
        doc = {"run_id": run_id, "version": found, "key": key, "value": values[key]}
        _out(as_json, doc, lambda: to_json(values[key]))
        return
    doc = {"run_id": run_id, "version": found, "state": values}
    _out(as_json, doc, lambda: f"{run_id} at version {found}\n" + table(
        ["KEY", "TYPE", "SIZE>", "VALUE~"],
        [[k, type(v).__name__, size(len(to_json(v, indent=None))), preview(v, 200)]
         for k, v in values.items()]))


@main.command()
@common_options
@click.argument("run_id", metavar="RUN", type=RUN_ID)
@click.argument("v1", type=click.IntRange(min=0))
@click.argument("v2", type=click.IntRange(min=0))
def diff(home: Path, as_json: bool, run_id: str, v1: int, v2: int) -> None:
    """Which state keys changed between versions V1 and V2, and how."""
    rows = _engine(home).diff(run_id, v1, v2)
    doc = {"run_id": run_id, "from": v1, "to": v2, "changes": rows}
    _out(as_json, doc, lambda: table(
        ["KEY", "CHANGE", "DETAIL~", "BEFORE~", "AFTER~"],
        [[r["key"], r["change"], r["detail"] or "-",
          "-" if r["change"] == "added" else preview(r["before"], 30),
          "-" if r["change"] == "removed" else preview(r["after"], 30)] for r in rows],
    ) if rows else f"no state keys changed between versions {v1} and {v2}")


@main.command()
@common_options
@click.argument("run_id", metavar="[RUN]", type=RUN_ID, required=False)
@click.option("--unknown", is_flag=True, help="Only calls in doubt (prepared with no outcome, "
              "or waiting for a human), across all runs unless RUN is given.")
def intents(home: Path, as_json: bool, run_id: str | None, unknown: bool) -> None:
    """Tool calls of a run: status, attempts, idempotency keys, results."""
    if run_id is None and not unknown:
        raise click.UsageError("give a RUN, or --unknown for calls in doubt across all runs")
    rows = _engine(home).intent_rows(run_id, unknown=unknown)

    def human() -> str:
        if not rows:
            return "no tool calls in doubt" if unknown else f"{run_id} made no tool calls"
        shown = [[i["run_id"], i["key"], i["tool"], i["status"], i["attempts"],
                  i["idempotency_key"], _outcome(i)] for i in rows]
        headers = ["RUN", "CALL", "TOOL", "STATUS", "TRY>", "IDEMPOTENCY KEY", "OUTCOME~"]
        if run_id is not None:  # one run: its id on every line says nothing
            headers, shown = headers[1:], [row[1:] for row in shown]
        return table(headers, shown)

    _out(as_json, rows, human)


def _outcome(i: dict[str, Any]) -> str:
    if i["status"] == IntentStatus.FAILED:
        return f"{i.get('error_type')}: {first_line(i.get('error'), 40)}"
    if i["status"] == IntentStatus.UNKNOWN:
        return f"ask {i.get('approval_id')}"
    if i["status"] == IntentStatus.RESOLVED:
        return f"{i.get('decision')} by {i.get('by') or '?'}"
    if i["status"] == IntentStatus.PREPARED:
        return "no outcome recorded"
    return preview(i.get("result"), 40)


# -- acting on runs ---------------------------------------------------------------------
def app_option(fn: F) -> F:
    return click.option("--app", "app", required=True, metavar="MODULE:ATTR",
                        help="Where the flows are: a Flow, or a list or tuple of Flows "
                             "(imported from the current directory too).")(fn)


def load_flows(spec: str) -> list[Flow]:
    """Import ``MODULE:ATTR`` and return the flows it names.

    ATTR must hold a Flow, or a list or tuple of Flows. Nothing found there is
    called: ``--app myapp:send_email`` must not send an email.
    """
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise click.BadParameter(f"{spec!r} is not MODULE:ATTR", param_hint="--app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"cannot load {spec!r}: {exc}", param_hint="--app") from None
    if isinstance(obj, Flow):
        return [obj]
    if isinstance(obj, (list, tuple)) and obj and all(isinstance(f, Flow) for f in obj):
        return list(obj)
    if _is_graph_app(obj):
        return [_Graphs(obj)]  # type: ignore[list-item]
    raise click.BadParameter(f"{spec!r} is {_what(obj)}, not a Flow, a list or tuple of "
                             "Flows, or a LangGraph graph", param_hint="--app")


class _Graphs:
    """What ``--app`` named when it named LangGraph graphs: served, not registered."""

    def __init__(self, graphs: Any) -> None:
        self.graphs = graphs


def _is_graph_app(obj: Any) -> bool:
    """A compiled LangGraph graph, a ``StateGraph``, a function taking ``checkpointer=``
    (called with the home's saver), or a dict of names to them."""
    if isinstance(obj, dict) and obj:
        return all(_is_graph_app(v) for v in obj.values())
    if type(obj).__module__.startswith("langgraph."):
        return hasattr(obj, "invoke") or hasattr(obj, "compile")
    if callable(obj) and not isinstance(obj, type):
        try:
            return "checkpointer" in inspect.signature(obj).parameters
        except (TypeError, ValueError):
            return False
    return False


def install(engine: Any, loaded: list[Any]) -> None:
    """Register the flows ``load_flows`` found; serve the LangGraph graphs it found."""
    flows = [f for f in loaded if isinstance(f, Flow)]
    engine.register(*flows)
    for found in loaded:
        if isinstance(found, _Graphs):
            from .engine.langgraph import serve_graphs  # LangGraph is loaded only when named

            serve_graphs(engine, found.graphs)


def _what(obj: Any) -> str:
    """What ``--app`` found instead of flows, in a few words: ``the function app.effect``."""
    if isinstance(obj, (list, tuple)):
        if not obj:
            return f"an empty {type(obj).__name__}"
        at, bad = next((i, f) for i, f in enumerate(obj) if not isinstance(f, Flow))
        return f"a {type(obj).__name__} whose item {at} is {_what(bad)}"
    name = getattr(obj, "__qualname__", None)
    if isinstance(name, str):
        return f"the {type(obj).__name__} {getattr(obj, '__module__', '?')}.{name}"
    return f"of type {type(obj).__name__} ({clip(repr(obj), 40)})"


@main.command()
@common_options
@app_option
@click.argument("run_id", metavar="RUN", type=RUN_ID)
def resume(home: Path, as_json: bool, app: str, run_id: str) -> None:
    """Continue a run from its latest checkpoint, in this process. Exit 1 if it fails."""
    flows = load_flows(app)
    engine = _engine(home, configured=True)
    install(engine, flows)
    before = engine.get(run_id).status
    run = engine.resume(run_id)
    doc = engine.show(run_id)
    _out(as_json, doc, lambda: f"{run_id}: {before} -> {run.status} "
         f"(state_version {run.state_version})" + (
             f"\nerror: {first_line(run.error)}" if run.error else ""))
    if run.status == Status.FAILED:
        raise click.exceptions.Exit(EXIT_BAD_STATE)


@main.command()
@common_options
@app_option
@click.option("--max-orphan-age", type=AGE, default="1d", show_default=True,
              help="An orphan idle for longer than this is FAILED as expired, not resumed "
                   "(the name `bide watch` uses too).")
@click.option("--max-age", "old_max_age", type=AGE, hidden=True,
              help="The old name of --max-orphan-age, kept for scripts.")
@click.option("--max-attempts", type=click.IntRange(min=1), default=5, show_default=True,
              help="An orphan whose workers died this often is FAILED, not retried.")
def recover(home: Path, as_json: bool, app: str, max_orphan_age: float, max_attempts: int,
            old_max_age: float | None = None) -> None:
    """Resume every pending, interrupted, decided or orphaned run. Exit 1 if any fails."""
    age = max_orphan_age if old_max_age is None else old_max_age
    flows = load_flows(app)
    engine = _engine(home, configured=True)
    install(engine, flows)
    report = engine.recover(max_age=age, max_attempts=max_attempts)
    rows = [{"run_id": e.run_id, "was": e.was, "status": e.status,
             "error": e.reason and first_line(e.reason, 200) if e.outcome == "advanced"
             else e.reason} for e in report.entries]
    _out(as_json, rows, lambda: table(
        ["RUN", "WAS", "NOW", "ERROR~"],
        [[r["run_id"], r["was"], r["status"], r["error"] or "-"] for r in rows],
    ) if rows else "nothing to recover")
    if any(r["error"] or r["status"] == Status.FAILED for r in rows):
        raise click.exceptions.Exit(EXIT_BAD_STATE)


@main.command()
@common_options
@click.argument("run_id", metavar="RUN", type=RUN_ID)
@click.option("--reason", help="Why (recorded with the cancellation).")
def cancel(home: Path, as_json: bool, run_id: str, reason: str | None) -> None:
    """Stop a run for good. Its records are kept; a worker holding it is fenced out."""
    done = _engine(home).cancel(run_id, reason)
    doc = {"run_id": run_id, "cancelled": done, "status": Status.CANCELLED}
    _out(as_json, doc, lambda: f"cancelled {run_id}" if done
         else f"{run_id} was already cancelled")


@main.command()
@common_options
@click.argument("run_id", metavar="RUN", type=RUN_ID)
@click.option("--version", "version", type=click.IntRange(min=0), required=True,
              help="The checkpoint's state_version to start from.")
@click.option("--as", "new_id", metavar="NEW", type=RUN_ID,
              help="The new run's id (default: RUN-fork-xxxxxx).")
def fork(home: Path, as_json: bool, run_id: str, version: int, new_id: str | None) -> None:
    """Start a new run from the state of RUN at --version (time travel). It is PENDING."""
    try:
        new = _engine(home).fork(run_id, version, new_id=new_id)
    except ValueError as exc:  # an unusable --as id
        raise click.BadParameter(str(exc), param_hint="--as") from None
    doc = {"run_id": new, "parent": run_id, "parent_version": version, "status": Status.PENDING}
    _out(as_json, doc, lambda: f"forked {run_id} at version {version} as {new} (PENDING)\n"
         f"run it with: bide resume {new} --app MODULE:ATTR")


# -- the store ---------------------------------------------------------------------------
@main.command()
@common_options
@click.option("--rebuild", is_flag=True, help="Rewrite the indexes from the log first.")
def doctor(home: Path, as_json: bool, rebuild: bool) -> None:
    """Check every record's checksum and that the indexes match the log. Exit 1 on a problem.

    Also lists orphaned runs (RUNNING, no live worker) and rejected inbox files.
    """
    engine = _engine(home)
    report = engine.doctor(rebuild=rebuild)

    def human() -> str:
        head = "rebuilt the indexes from the log; " if rebuild else ""
        if report.ok:
            return (f"{head}ok: {report.records} records, {report.runs} runs; every checksum "
                    "holds and the indexes match the log")
        hint = "" if any(p.table == "log" for p in report.problems) else \
            "\nthe log is intact: `bide doctor --rebuild` rewrites the indexes from it"
        return (table(["PROBLEM", "TABLE", "KEY", "DETAIL~"],
                      [[p.kind, p.table, p.key, p.detail] for p in report.problems])
                + f"\n{len(report.problems)} problem(s) in {report.records} records{hint}")

    files = HomeFiles(engine)
    # orphans are read through the indexes: only once the doctor found them sound
    orphans, refused = files.orphans() if report.ok else [], files.rejected()
    notes = ([f"orphaned: {plural(len(orphans), 'RUNNING run')} with no live worker "
              f"({clip(', '.join(orphans), 200)}): `bide watch` or `bide recover` resumes "
              "them"] if orphans else []) + \
        ([f"inbox: {plural(len(refused), 'rejected file')} (`bide inbox` lists them with "
          "their reasons)"] if refused else [])
    _out(as_json, {**report.to_dict(), "orphaned_runs": orphans,
                   "rejected_files": [r.name for r in refused]},
         lambda: "\n".join([human(), *notes]))
    if not as_json:  # under --json they are in the object's "warnings"
        for warning in report.warnings:
            click.echo(f"warning: {warning}", err=True)
    if not report.ok:
        raise click.exceptions.Exit(EXIT_BAD_STATE)


@main.command()
@common_options
def inbox(home: Path, as_json: bool) -> None:
    """List the decision files the inbox rejected, with why, oldest first."""
    refused = HomeFiles(_engine(home)).rejected()
    now = time.time()
    _out(as_json, [{**r.to_dict(), "at": _iso(r.at)} for r in refused],
         lambda: table(["FILE", "WHEN", "REASON~"],
                       [[r.name, ago(r.at, now) if r.at else "-", r.reason or "-"]
                        for r in refused]) if refused else "no rejected files")


def _iso(at: float | None) -> str | None:
    return None if at is None else \
        datetime.datetime.fromtimestamp(at, datetime.timezone.utc).isoformat()


@main.command()
@click.argument("source", metavar="SRC", type=HOME)
@click.argument("destination", metavar="DST", type=HOME)
@click.option("--resume", is_flag=True, help="Finish a copy from SRC that was interrupted.")
@click.option("--source-local", type=click.Path(file_okay=False, path_type=Path),
              help="This host's directory of a postgresql:// SRC (default .bide).")
@click.option("--destination-local", type=click.Path(file_okay=False, path_type=Path),
              help="This host's directory of a postgresql:// DST (default .bide).")
@click.option("--batch-records", type=click.IntRange(min=1), default=500, show_default=True,
              help="Records per transaction in DST.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def copy(source: Path | str, destination: Path | str, resume: bool,
         source_local: Path | None, destination_local: Path | None, batch_records: int,
         as_json: bool) -> None:
    """Copy the home SRC record by record into the empty DST, then verify both ends.

    SRC and DST are home directories or postgresql:// URLs (LMDB to PostgreSQL and
    back). Exit 1 when DST is not empty, or when the doctor or the comparison of the
    two ends finds a difference (named).
    """
    report = copy_home(source, destination, resume=resume, source_local=source_local,
                       destination_local=destination_local, batch_records=batch_records)
    _out(as_json, report.to_dict(), lambda: _copy_text(report))
    if not report.ok:
        raise click.exceptions.Exit(EXIT_BAD_STATE)


def _copy_text(r: CopyReport) -> str:
    runs = ", ".join(f"{status} {n}" for status, n in r.runs.items()) or "none"
    resumed = f", resumed at seq {r.resumed_from}" if r.resumed_from is not None else ""
    lines = [f"copied {plural(r.records, 'record')} ({size(r.bytes)}) in "
             f"{plural(r.batches, 'transaction')}{resumed}: {r.source} -> {r.destination} "
             f"({r.seconds:.1f}s)", f"runs: {runs}", *r.notes]
    for end, doc in ((r.source, r.source_doctor), (r.destination, r.destination_doctor)):
        lines.append(f"doctor {end}: " + ("ok" if doc.ok else "problems found") +
                     f", {doc.records} records, {doc.runs} runs")
        lines += [f"  {p}" for p in doc.problems[:10]]
    if r.differences:
        lines.append("verification failed: the two ends differ")
        lines += [f"  {d}" for d in r.differences]
    elif r.ok:
        lines.append("verified: the same records at the same seqs, byte for byte, and every "
                     "derived table equal (runs, statuses, latest states, intents, approvals)")
    return "\n".join(lines)


@main.command()
@common_options
@click.option("--keep", type=click.IntRange(min=1), default=1, show_default=True,
              help="Checkpoints to keep per run, with what they are read from.")
@click.option("--finished-older-than", "older", type=AGE,
              help="Remove DONE/FAILED/CANCELLED runs idle for longer than AGE (e.g. 30d) whole.")
@click.option("--files-older-than", "files_older", type=AGE,
              help="Also remove files older than AGE (e.g. 30d): request files of decided "
                   "or finished runs, inbox/processed and inbox/rejected; never a request "
                   "that still waits.")
@click.option("--dry-run", is_flag=True, help="Only report what would be removed.")
def prune(home: Path, as_json: bool, keep: int, older: float | None, dry_run: bool,
          files_older: float | None = None) -> None:
    """Remove old checkpoints and old finished runs; never what a run needs to resume."""
    engine = _engine(home)
    report = engine.prune(keep=keep, finished_older_than=older, dry_run=dry_run)
    if files_older is not None:
        files = HomeFiles(engine).prune(files_older, dry_run=dry_run)
        _out(as_json, {**report.to_dict(), "files": files.to_dict()},
             lambda: _prune_text(report, dry_run) + "\n" + _files_text(files, dry_run))
        return
    _out(as_json, report.to_dict(), lambda: _prune_text(report, dry_run))


def _files_text(files: Any, dry_run: bool) -> str:
    verb = "would remove" if dry_run else "removed"
    text = f"{verb} {plural(len(files.removed), 'file')} ({size(files.bytes)})"
    if files.waiting:
        text += f"; kept {plural(len(files.waiting), 'request file')} still waiting"
    if files.unknown:
        text += (f"; left {plural(len(files.unknown), 'request file')} the store does not "
                 "know: " + clip(", ".join(files.unknown), 200))
    return text


def _prune_text(report: Any, dry_run: bool) -> str:
    verb = "would remove" if dry_run else "removed"
    text = (f"{verb} {plural(report.records, 'record')} ({size(report.bytes)}) from "
            f"{plural(len(report.runs_trimmed), 'run')}; kept {report.kept}")
    if report.runs_removed:
        text += f"\n{verb} {plural(len(report.runs_removed), 'finished run')} whole: " + \
            clip(", ".join(report.runs_removed), 200)
    if report.removed:
        text += "\n" + table(["TYPE", "RECORDS>"], sorted(report.removed.items()))
    if report.records and not dry_run:
        text += "\nthe file keeps its size (LMDB reuses the pages); `bide compact` shrinks it"
    return text


@main.command()
@common_options
@click.option("--keep-old", is_flag=True, help="Keep the old data file beside the store.")
def compact(home: Path, as_json: bool, keep_old: bool) -> None:
    """Rewrite the store without free pages; refuses while any process has it open."""
    report = compact_home(home, keep_old=keep_old)
    before, after = report.before, report.after
    saved = 100 * (before - after) / before if before else 0.0
    _out(as_json, report.to_dict(), lambda: (
        f"compacted {home / 'store'}: {size(before)} -> {size(after)} "
        f"({saved:.0f}% smaller, {report.records} records verified)"
        + (f"\nold data kept at {report.kept_old}" if report.kept_old else "")))


@main.command()
@common_options
@click.argument("run_id", metavar="RUN", type=RUN_ID)
@click.option("--format", "fmt", type=click.Choice(["json"]), default="json", show_default=True)
@click.option("-o", "--output", type=click.File("w"), default="-", help="Write here (default: "
              "stdout).")
def export(home: Path, as_json: bool, run_id: str, fmt: str, output: Any) -> None:
    """Everything stored about a run, as one JSON document (for a bug report).

    The document is JSON with or without --json; --json is accepted (old scripts pass it)
    and makes errors JSON objects too, as on every command.
    """
    engine = _engine(home)
    try:
        doc = engine.export(run_id)
    except LangGraphThread:
        doc = _thread_view(engine, run_id, "export")
    output.write(to_json(iso_times(doc)) + "\n")


def _thread_view(engine: Any, run_id: str, what: str, *args: Any) -> Any:
    """A LangGraph thread's view (``bide.langgraph``'s views): with the extra installed;
    else the LangGraphThread error stands."""
    try:
        from .engine.langgraph import thread_checkpoints, thread_export, thread_state

        view: Any = {"checkpoints": thread_checkpoints, "state": thread_state,
                     "export": thread_export}[what]
    except ImportError:  # no langgraph extra here
        raise LangGraphThread(run_id, what) from None
    return view(engine, run_id) if what == "export" else view(engine.store, run_id, *args)


@main.command()
@common_options
def stats(home: Path, as_json: bool) -> None:
    """Store size and map usage, records by type, runs by status."""
    doc = _engine(home).stats()
    _out(as_json, doc, lambda: _stats_text(doc))


def _stats_text(d: dict[str, Any]) -> str:
    s = d["store"]
    head = fields([
        ("home", d["home"]),
        ("file", f"{size(s['file_bytes'])} ({size(s['used_bytes'])} used; map "
                 f"{size(s['map_size'])}, {100 * s['map_used']:.1f}% used)"),
        ("records", f"{d['total_records']} ({size(d['total_bytes'])})"),
        ("runs", d["total_runs"]),
        ("in doubt", plural(d["intents_in_doubt"], "tool call")),
        ("waiting", plural(d["approvals_waiting"], "decision")),
    ])
    kinds = table(["RECORD TYPE", "COUNT>", "BYTES>"],
                  [[t, v["count"], size(v["bytes"])] for t, v in d["records"].items()])
    statuses = table(["STATUS", "RUNS>"], list(d["runs"].items()))
    return f"{head}\n\n{kinds}\n\n{statuses}"


# -- approvals, inbox, watcher, demo -------------------------------------------


@main.command()
@common_options
def pending(home: Path, as_json: bool) -> None:
    """Decisions waiting: approvals, questions (kind input: answer them with `bide
    answer`) and reconciliations nobody has decided yet; runs waiting for a signal
    (kind signal: send it with `bide signal RUN NAME`; `expires` is its timeout)."""
    rows = _engine(home).pending()
    now = time.time()
    _out(as_json, rows, lambda: table(
        ["approval", "run", "kind", "node", "action~", "asked", "expires"],
        [[r["approval_id"] or "-", r["run_id"], r["kind"], r["node"], _action(r),
          ago(r["requested_at"], now), _expires(r, now)] for r in rows]) + _reviews(rows)
        if rows else "nothing waits")


def _reviews(rows: list[dict[str, Any]]) -> str:
    """Each HITL review's calls in full, with the decisions each takes."""
    lines = [f"  {r['approval_id']}: {a['call']}  [{' / '.join(a['allowed'])}]"
             + (f"  ({a['description'].strip().splitlines()[0]})"
                if a["description"].strip() else "")
             for r in rows if r.get("review") for a in r["review"]["actions"]]
    return "\n\nreviews (bide approve [--reject], or bide answer --edit/--respond):\n" \
        + "\n".join(lines) if lines else ""


def _action(row: dict[str, Any]) -> str:
    """What is asked; for a call in doubt, with the call's arguments (``charge(5)``)."""
    shown = row.get("args_preview")
    return clip(row["action"], 30) + (f" ({shown})" if shown else "")


def _expires(row: dict[str, Any], now: float) -> str:
    """A request's deadline, absolute and relative (EXPIRED once past); a timer's due time."""
    if row.get("until") is not None:
        return due_text(row["until"], now).partition(" (")[2].rstrip(")")
    return expiry_text(row["expires_at"], now)


@main.command()
@click.argument("approval_id", metavar="APPROVAL")
@click.option("--home", type=HOME, envvar="BIDE_HOME", default=".bide",
              show_default=True, show_envvar=True,
              help="The bide home directory, or a postgresql:// URL.")
@click.option("--reject", is_flag=True, help="Reject instead of approve.")
@click.option("--decision", type=click.Choice([d.value for d in Decision
                                               if d not in (Decision.ANSWER,
                                                            Decision.ELAPSED)]),
              help="Any allowed decision: approve/reject for an approval, "
                   "mark_done/retry/abort for a reconciliation (a question: bide answer, "
                   "or --reject to decline it).")
@click.option("--by", default=who, show_default="your login name",
              help="Who decides (recorded).")
@click.option("--reason", help="Why (recorded).")
@click.option("--result", help="JSON result for mark_done (what the node receives).")
@click.option("--approval-key-file", "--key-file", "key_file",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Sign the decision with this HMAC key (needed when the home requires "
                   "signed decisions).")
@click.option("--inbox", type=click.Path(file_okay=False, path_type=Path),
              help="Drop the decision file into this directory (the one a watcher serves "
                   "with --inbox); with a postgresql:// home, a file there instead of a "
                   "record in the database.")
@click.option("--json", "as_json", is_flag=True, help="Print the recorded decision as JSON.")
def approve(approval_id: str, home: Path, reject: bool, decision: str | None, by: str,
            reason: str | None, result: str | None, key_file: Path | None,
            inbox: Path | None, as_json: bool) -> None:
    """Decide: drop a decision file into the inbox (the same door people and programs
    use), or, on a postgresql:// home, record the decision in the database at once.

    The decision is checked against the store first (the request exists, takes this
    decision, is neither decided nor expired; the key when the home requires one),
    so no file is written that the watcher would refuse, and nothing is recorded
    that a decision file could not record.
    """
    if reject and decision not in (None, Decision.REJECT):
        raise click.UsageError(f"--reject conflicts with --decision {decision}")
    chosen = decision or (Decision.REJECT if reject else Decision.APPROVE)
    if result is not None and chosen != Decision.MARK_DONE:
        raise click.UsageError(f"--result goes with --decision mark_done only, not {chosen}")
    value = None if result is None else _json_arg(result)
    _deliver(home, inbox, approval_id, chosen, by=by, reason=reason, result=value,
             key_file=key_file, as_json=as_json)


def _deliver(home: Path, inbox: Path | None, approval_id: str, decision: str, *,
             by: str, reason: str | None, result: Any, key_file: Path | None,
             as_json: bool) -> None:
    """``approve`` and ``answer``: a checked decision file dropped into the inbox, or on
    a postgresql:// home (without --inbox) the decision recorded in the database."""
    eng = open_home(home, create=False, inbox=inbox)
    click.get_current_context().call_on_close(eng.close)
    key = read_approval_key(key_file) if key_file else None
    how: dict[str, Any] = {"by": by, "reason": reason,
                           "result": result, "key": key}
    try:
        done = eng.deliver_decision(approval_id, decision, **how) if inbox is None else \
            {"file": str(eng.drop_decision(approval_id, decision, **how))}
    except (ApprovalKeyError, DecisionNotAllowed) as exc:
        raise click.UsageError(str(exc)) from None
    doc = {"approval_id": approval_id, "decision": decision, "by": by, "reason": reason,
           "run_id": done.get("run_id"), "file": done["file"], "home": done.get("home")}
    _out(as_json, doc, lambda: f"{decision} for {approval_id} dropped into the inbox: "
         f"{Path(done['file']).name}" if done["file"] is not None else
         f"{decision} for {approval_id} recorded in {done['home']}: a watcher "
         f"resumes run {done['run_id']}")


@main.command()
@click.argument("approval_id", metavar="QUESTION")
@click.argument("value_json", metavar="VALUE_JSON", required=False)
@click.option("--edit", "edits", multiple=True, metavar="ARGS_JSON",
              help="A HITL review: run its call with these arguments instead (once per call "
                   "under review, in order; null approves that call as it is).")
@click.option("--respond", metavar="TEXT",
              help="A HITL review: reply TEXT in place of every call under review (the tool "
                   "is not run).")
@click.option("--home", type=HOME, envvar="BIDE_HOME", default=".bide",
              show_default=True, show_envvar=True,
              help="The bide home directory, or a postgresql:// URL.")
@click.option("--by", default=who, show_default="your login name",
              help="Who answers (recorded).")
@click.option("--reason", help="Why (recorded).")
@click.option("--approval-key-file", "--key-file", "key_file",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Sign the answer with this HMAC key (needed when the home requires "
                   "signed decisions).")
@click.option("--inbox", type=click.Path(file_okay=False, path_type=Path),
              help="Drop the answer file into this directory (the one a watcher serves "
                   "with --inbox).")
@click.option("--json", "as_json", is_flag=True, help="Print the recorded answer as JSON.")
def answer(approval_id: str, value_json: str | None, edits: tuple[str, ...],
           respond: str | None, home: Path, by: str, reason: str | None,
           key_file: Path | None, inbox: Path | None, as_json: bool) -> None:
    """Answer a question a run asked (ctx.ask) with a JSON value: an answer file dropped
    into the inbox, or, on a postgresql:// home, recorded in the database at once.

    The value is checked against the question's schema first (no --app needed: the
    question stores it as JSON Schema); one that does not match is refused with the
    reason and nothing is written. To decline a question: bide approve ID --reject.

    A review by LangChain's HumanInTheLoopMiddleware takes HITL's own response as
    VALUE_JSON, or --edit / --respond, which build it.
    """
    if sum(x is not None and x != () for x in (value_json, edits, respond)) != 1:
        raise click.UsageError("give one of VALUE_JSON, --edit or --respond")
    if value_json is not None:
        value = _json_arg(value_json)
    else:
        eng = open_home(home, create=False)
        try:
            value = eng.review_answer(approval_id, respond=respond, edit=None if not edits
                                      else [_json_arg(e) for e in edits])
        except DecisionRefused as exc:
            raise click.UsageError(str(exc)) from None
        finally:
            eng.close()
    _deliver(home, inbox, approval_id, Decision.ANSWER, by=by, reason=reason,
             result=value, key_file=key_file, as_json=as_json)


@main.command("signal")
@click.argument("run_id", metavar="RUN")
@click.argument("name", metavar="NAME")
@click.option("--data", "data_json", metavar="JSON", help="The signal's data (JSON; "
              "default null): what ctx.wait_for(NAME) returns.")
@click.option("--home", type=HOME, envvar="BIDE_HOME", default=".bide",
              show_default=True, show_envvar=True,
              help="The bide home directory, or a postgresql:// URL.")
@click.option("--by", default=who, show_default="your login name",
              help="Who sends it (recorded).")
@click.option("--approval-key-file", "--key-file", "key_file",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Sign the signal file with this HMAC key (needed when the home requires "
                   "signed decisions).")
@click.option("--inbox", type=click.Path(file_okay=False, path_type=Path),
              help="Drop the signal file into this directory (the one a watcher serves "
                   "with --inbox).")
@click.option("--json", "as_json", is_flag=True, help="Print the recorded signal as JSON.")
def signal_cmd(run_id: str, name: str, data_json: str | None, home: Path, by: str,
               key_file: Path | None, inbox: Path | None, as_json: bool) -> None:
    """Send signal NAME to a run (ctx.wait_for): a signal file dropped into the inbox, or,
    on a postgresql:// home, recorded in the database at once. A run not waiting yet
    keeps it for its next wait; a DONE or CANCELLED run refuses it."""
    data = None if data_json is None else _json_arg(data_json)
    eng = open_home(home, create=False, inbox=inbox)
    click.get_current_context().call_on_close(eng.close)
    key = read_approval_key(key_file) if key_file else None
    try:
        done = eng.deliver_signal(run_id, name, data, by=by, key=key)
    except ApprovalKeyError as exc:
        raise click.UsageError(str(exc)) from None
    doc = {"run_id": run_id, "signal": name, "by": by, "file": done["file"],
           "home": done.get("home")}
    _out(as_json, doc, lambda: f"signal {name!r} for run {run_id} dropped into the inbox: "
         f"{Path(done['file']).name}" if done["file"] is not None else
         f"signal {name!r} recorded for run {run_id} in {done['home']}")


@main.command("schedule")
@common_options
@click.argument("name")
@click.argument("flow_name", metavar="FLOW")
@click.option("--every", type=click.IntRange(min=1), metavar="SECONDS",
              help="Start a run every SECONDS (slots aligned to the epoch).")
@click.option("--cron", metavar="EXPR", help="Start a run at each time a cron expression "
              "names, e.g. '*/5 * * * *' (UTC unless --tz).")
@click.option("--tz", metavar="ZONE", help="The time zone of --cron (an IANA name).")
@click.option("--input", "input_json", metavar="JSON", help="Each run's input (a JSON object).")
@click.option("--catch-up", is_flag=True, help="After downtime start every missed slot "
              "(oldest first), not only the latest.")
@click.option("--app", "app", metavar="MODULE:ATTR",
              help="Check that FLOW is among these flows before recording.")
def schedule_cmd(home: Path, as_json: bool, name: str, flow_name: str, every: int | None,
                 cron: str | None, tz: str | None, input_json: str | None, catch_up: bool,
                 app: str | None) -> None:
    """Record (or replace) schedule NAME: `bide watch` starts one run of FLOW per slot."""
    data = {} if input_json is None else _json_arg(input_json)
    if not isinstance(data, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--input")
    engine = _engine(home)
    if app is not None:
        engine.register(*(f for f in load_flows(app) if isinstance(f, Flow)))
    try:
        made = engine.schedule(name, flow_name, every=every, cron=cron, tz=tz, input=data,
                               catch_up=catch_up, check_flow=app is not None)
    except InvalidSchedule as exc:  # what was typed is wrong: a usage error (exit 2)
        raise click.UsageError(str(exc)) from None
    _out(as_json, made.to_dict(), lambda: f"schedule {name}: {flow_name} {made.spec}, next "
         f"{due_text(made.next_due, time.time()).removeprefix('until ')}")


@main.command("schedules")
@common_options
def schedules_cmd(home: Path, as_json: bool) -> None:
    """The home's schedules: what each starts, when next, and the last slot started."""
    found = _engine(home).schedules()
    now = time.time()
    _out(as_json, [s.to_dict() for s in found], lambda: table(
        ["name", "flow", "spec", "next", "last run"],
        [[s.name, s.flow, s.spec + (" +catch-up" if s.catch_up else ""),
          due_text(s.next_due, now).removeprefix("until "), s.last_run or "-"]
         for s in found]) if found else "no schedules")


@main.command("unschedule")
@common_options
@click.argument("name")
def unschedule_cmd(home: Path, as_json: bool, name: str) -> None:
    """Remove schedule NAME (its runs stay). Exit 3 if there is none."""
    _engine(home).unschedule(name)
    _out(as_json, {"name": name, "removed": True}, lambda: f"schedule {name} removed")


def _json_arg(text: str) -> Any:
    import json

    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}") from None


@main.command()
@click.argument("flow_name", metavar="FLOW")
@click.option("--home", type=HOME, envvar="BIDE_HOME", default=".bide",
              show_default=True, show_envvar=True,
              help="The bide home directory (created if missing).")
@click.option("--input", "input_json", default="{}", help="The run's input, as a JSON object.")
@click.option("--run-id", type=RUN_ID, help="The run id (generated when absent).")
@click.option("--app", "apps", multiple=True, required=True, metavar="MODULE:ATTR",
              help="Where the flow is defined (a Flow, or a list or tuple of Flows).")
@click.option("--json", "as_json", is_flag=True, help="Print the run id and status as JSON.")
def submit(flow_name: str, home: Path, input_json: str, run_id: str | None,
           apps: tuple[str, ...], as_json: bool) -> None:
    """Record a PENDING run and return at once; `bide watch` runs it. Prints its id.

    Exit 3 when no --app defines FLOW.
    """
    data = _input_object(input_json)
    with open_home(home, **_configured(home)) as eng:
        for spec in apps:
            install(eng, load_flows(spec))
        new = eng.submit(flow_name, input=data, run_id=run_id)
        doc = {"run_id": new, "flow": flow_name, "status": Status.PENDING}
        _out(as_json, doc, lambda: new)


def _input_object(text: str) -> dict[str, Any]:
    """``--input``: a JSON object (``submit`` and ``run`` take the same)."""
    data = _json_arg(text)
    if not isinstance(data, dict):
        raise click.BadParameter("--input must be a JSON object")
    return data


EXIT_PAUSED = 4  # bide run: the run waits for a person (decide, then resume or watch)
RUNNER_CHECK = 1.0  # bide run: seconds until a follow sees that the run's thread ended


@main.command("run")
@click.argument("flow_name", metavar="FLOW")
@click.option("--home", type=HOME, envvar="BIDE_HOME", default=".bide",
              show_default=True, show_envvar=True,
              help="The bide home directory (created if missing), or a postgresql:// URL.")
@click.option("--input", "input_json", default="{}", help="The run's input, as a JSON object.")
@click.option("--run-id", type=RUN_ID, help="The run id (generated when absent).")
@click.option("--app", "apps", multiple=True, required=True, metavar="MODULE:ATTR",
              help="Where the flow is defined (a Flow, or a list or tuple of Flows).")
@click.option("--json", "as_json", is_flag=True,
              help="Events as JSON lines, then the outcome as one JSON object.")
def run_flow(flow_name: str, home: Path, input_json: str, run_id: str | None,
             apps: tuple[str, ...], as_json: bool) -> None:
    """Start a run in this process, print its records live, end with its final state.

    Exit 0 when it is DONE; 4 when it waits for a person (printed: what, and how to
    decide) or sleeps on a durable timer (printed: until when); 1 when it FAILED or
    was cancelled; 130 on Ctrl-C (the run stays resumable).
    """
    data = _input_object(input_json)
    with open_home(home, **_configured(home)) as eng:
        for spec in apps:
            install(eng, load_flows(spec))
        if flow_name not in eng._graphs():
            eng.flow(flow_name)  # UnknownFlow before anything is written
        if run_id is not None and _exists(eng, run_id):
            raise RunExists(run_id)
        try:
            run, stopped = _run_followed(eng, flow_name, data, run_id, as_json)
        except KeyboardInterrupt:  # the second Ctrl-C: leave now, the run stays resumable
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
        doc = {"run_id": run.run_id, "status": run.status, "state_version": run.state_version,
               "state": run.state, "waiting": run.waiting, "error": run.error}
        click.echo(to_json(iso_times(doc), indent=None) if as_json else _outcome_text(doc))
    if stopped:
        raise click.exceptions.Exit(EXIT_INTERRUPTED)
    if run.status == Status.DONE:
        return
    if run.status.waiting:
        click.echo(_how_to_decide(run.run_id, run.waiting or {}), err=True)
        raise click.exceptions.Exit(EXIT_PAUSED)
    if run.status == Status.SLEEPING:
        until = (run.waiting or {}).get("until")
        click.echo(f"{run.run_id} sleeps in node {(run.waiting or {}).get('node_id')} "
                   f"{due_text(until, time.time())}: `bide watch --app ...` resumes "
                   "it when due", err=True)
        raise click.exceptions.Exit(EXIT_PAUSED)
    raise click.exceptions.Exit(EXIT_BAD_STATE)


def _run_followed(eng: Engine, flow_name: str, data: dict[str, Any], run_id: str | None,
                  as_json: bool) -> tuple[Any, bool]:
    """``eng.start`` in a thread of its own while this one prints its events (so Ctrl-C
    lands here). Returns the run once it finished or paused and every event is out, and
    whether Ctrl-C stopped it (at the next boundary: INTERRUPTED, resumable)."""
    run_id = run_id or f"r-{uuid.uuid4().hex[:12]}"
    outcome: dict[str, Any] = {}
    ended = threading.Event()  # the runner returned or raised

    def start() -> None:
        try:
            outcome["run"] = eng.start(flow_name, input=data, run_id=run_id)
        except BaseException as exc:  # handed to the main thread, raised there
            outcome["error"] = exc
        finally:
            ended.set()

    runner = threading.Thread(target=start, name=f"bide-run-{run_id}", daemon=True)
    runner.start()
    stopped = False
    try:
        while not _exists(eng, run_id) and runner.is_alive():  # start's first commit
            runner.join(0.01)
        if _exists(eng, run_id):
            _print_events(eng, run_id, ended, as_json)
    except KeyboardInterrupt:
        eng.stopping.set()
        stopped = True
        click.echo("stopping at the next boundary (Ctrl-C again leaves at once); the run "
                   "stays resumable", err=True)
    runner.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["run"], stopped


def _print_events(eng: Engine, run_id: str, ended: threading.Event, as_json: bool) -> None:
    """Print the run's events until it finishes or pauses, or until its runner ended
    without either (``start`` raised: a store error, a ``SystemExit`` in a node): the run
    is left RUNNING, so the follow would wait for ever. ``ended`` stops it (within
    ``RUNNER_CHECK`` s); then what the runner committed last is read once more. One
    follow for the whole run: on PostgreSQL each one is a connection of its own."""
    since: int | None = None
    for event in eng.follow(run_id, fallback=RUNNER_CHECK, stop=ended):
        _print_event(event, as_json)
        since = event.seq
    try:  # (the run finished or paused: nothing more, and the read ends at once)
        for event in eng.follow(run_id, since=since, timeout=0):
            _print_event(event, as_json)
    except FollowTimeout:
        pass


def _exists(eng: Engine, run_id: str) -> bool:
    try:
        eng.get(run_id)
    except NotFound:
        return False
    return True


def _outcome_text(doc: dict[str, Any]) -> str:
    head = f"{doc['run_id']}: {doc['status']} (state_version {doc['state_version']})"
    if doc["error"]:
        head += f"\nerror: {first_line(doc['error'])}"
    return f"{head}\n{to_json(doc['state'])}"


def _how_to_decide(run_id: str, waiting: dict[str, Any]) -> str:
    """What the paused run waits for and the commands that decide and continue it."""
    if waiting.get("type") == "child":  # the child paused itself (it runs in this worker)
        return (f"{run_id} waits for its child run {waiting.get('run_id')} (node "
                f"{waiting.get('node_id')}), which paused: `bide pending` lists what it waits "
                f"for; then `bide resume {run_id} --app ...` runs the child on and the parent, "
                "or let `bide watch` continue them")
    approval = waiting.get("approval_id", "?")
    how = f"answer with `bide answer {approval} VALUE_JSON`" if waiting.get("type") == "input" \
        else f"decide with `bide approve {approval}` (or --reject)"
    return (f"{run_id} waits for {waiting.get('type', 'a decision')} {approval} in node "
            f"{waiting.get('node_id')}: {how} (`bide pending` lists what waits), then "
            f"`bide resume {run_id} --app ...` or let `bide watch` continue it")


# -- settings: flags over $BIDE_* over HOME/bide.toml over defaults ---------------------
SETTING_FLAGS = {  # option parameter -> setting key (engine/upkeep/home_config.py)
    "durability": "durability", "lease_ttl": "lease_ttl",
    "approval_key_file": "approval_key_file", "inbox_max_bytes": "inbox_max_bytes",
    "workers": "watch.workers", "overlap_after": "watch.overlap_after",
    "max_orphan_age": "watch.max_orphan_age",
    "max_attempts": "watch.max_attempts", "rescan": "watch.rescan", "poll": "watch.poll",
}


def setting_options(fn: F) -> F:
    """The options bide.toml can set too; none has a default here: an option not given
    is taken from the environment, the file, or the setting's default (`bide config`)."""
    for decorator in reversed((
        click.option("--config", "config_file", metavar="FILE",
                     type=click.Path(dir_okay=False, path_type=Path), envvar="BIDE_CONFIG",
                     show_envvar=True, help="Read settings from this file  [default: "
                     "HOME/bide.toml; a postgresql:// home has none unless named]"),
        click.option("--durability", type=click.Choice(["durable", "fast"]),
                     help="[default: durable]"),
        click.option("--lease-ttl", type=click.FloatRange(min=0, min_open=True),
                     help="Lease seconds  [default: 30]"),
        click.option("--approval-key-file", "--key-file", "approval_key_file",
                     type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="Accept only decision files signed with this HMAC key; the home "
                          "then requires it of every process."),
        click.option("--inbox-max-bytes", type=click.IntRange(1, HomeConfig.MAX_INBOX_BYTES),
                     help="Reject decision files larger "
                     "than this  [default: 65536]"),
        click.option("--workers", type=click.IntRange(min=1),
                     help="Runs resumed at once (worker threads)  [default: 4]"),
        click.option("--overlap-after", type=click.FloatRange(min=0), metavar="SECONDS",
                     help="A resume runs alone until it has taken this long; then one more "
                          "worker starts beside it (0: every worker at once)  "
                          "[default: 0.025]"),
        click.option("--max-orphan-age", metavar="AGE", help="Fail orphaned runs older than "
                     "this instead of resuming them  [default: 24h]"),
        click.option("--max-attempts", type=click.IntRange(min=1),
                     help="Fail a run whose worker died this many times  [default: 5]"),
        click.option("--rescan", type=click.FloatRange(min=0, min_open=True),
                     help="Seconds between rescans for runs to resume  [default: 1; 30 on "
                          "a PostgreSQL home, whose commits announce runs]"),
        click.option("--poll", is_flag=True, default=None,
                     help="Poll the inbox (filesystems without events)."),
    )):
        fn = decorator(fn)
    return fn


def _settings(home: Path | str, config_file: Path | None, flags: dict[str, Any]
              ) -> HomeConfig:
    """The effective settings; a key file named only by bide.toml must exist too."""
    given = {SETTING_FLAGS[name]: value for name, value in flags.items()}
    cfg = HomeConfig.load(home, config_file=config_file, flags=given)
    key_file = cfg.values["approval_key_file"]
    if key_file.value is not None and not Path(key_file.value).is_file():
        raise ConfigError(key_file.where or key_file.source,
                          f"approval_key_file {key_file.value}: no such file",
                          key="approval_key_file")
    return cfg


@main.command("config")
@click.option("--home", type=HOME, envvar="BIDE_HOME", default=".bide", show_default=True,
              show_envvar=True, help="The bide home directory, or a postgresql:// URL.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@setting_options
def config_cmd(home: Path | str, as_json: bool, config_file: Path | None,
               **flags: Any) -> None:
    """Print each effective setting and where it came from (default, bide.toml, env, flag).

    `bide watch` with the same flags uses these values; `run`, `submit`, `resume` and
    `recover` use its durability and lease_ttl. HOME/bide.toml (or --config
    FILE, or $BIDE_CONFIG) holds: durability, lease_ttl, approval_key_file,
    inbox_max_bytes and, in a [watch] table, workers, max_orphan_age, max_attempts,
    rescan, poll. Each can also be set by an environment variable: BIDE_LEASE_TTL,
    BIDE_WATCH_WORKERS...
    """
    cfg = _settings(home, config_file, flags)
    doc = {"file": None if cfg.path is None else str(cfg.path), "note": cfg.note,
           "settings": {k: {"value": str(v.value) if isinstance(v.value, Path) else v.value,
                            "source": v.source, "where": v.where}
                        for k, v in cfg.values.items()}}

    def human() -> str:
        head = f"config file: {cfg.path}" if cfg.path else \
            f"config file: none ({cfg.note or 'no ' + str(Path(str(home)) / 'bide.toml')})"
        rows = [[k, "-" if v.value is None else str(v.value), v.source,
                 f"line {(v.where or '').rpartition(':')[2]}" if v.source == "bide.toml"
                 else v.where or ""] for k, v in cfg.values.items()]
        return head + "\n" + table(["setting", "value", "source", "where"], rows)

    _out(as_json, doc, human)


def _flow_limits(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
                 ) -> dict[str, int]:
    """``--limit FLOW=N`` options as ``{flow: n}``; a clear error for a malformed one."""
    limits: dict[str, int] = {}
    for text in values:
        flow, sep, n = text.rpartition("=")
        if not sep or not flow or not n.strip().isdigit() or int(n) < 1:
            raise click.BadParameter(f"{text!r} is not FLOW=N with N a whole number of at "
                                     "least 1 (e.g. --limit triage=2)", param=param)
        if flow in limits:
            raise click.BadParameter(f"flow {flow!r} is limited twice", param=param)
        limits[flow] = int(n)
    return limits


@main.command()
@click.option("--home", type=HOME, envvar="BIDE_HOME", default=".bide",
              show_default=True, show_envvar=True,
              help="The bide home directory (created if missing).")
@click.option("--app", "apps", multiple=True, required=True, metavar="MODULE:ATTR",
              help="Flows to run (a Flow, or a list or tuple of Flows); repeat for more.")
@click.option("--once", is_flag=True, help="Process what is there now, then exit.")
@setting_options
@click.option("--limit", "limits", multiple=True, metavar="FLOW=N", callback=_flow_limits,
              help="At most N runs of FLOW at once; repeat for more flows.")
@click.option("--inbox", type=click.Path(file_okay=False, path_type=Path),
              help="Take decision files from this directory  [default: HOME/inbox; with a "
                   "postgresql:// home, .bide/inbox]")
@click.option("--requests", type=click.Path(file_okay=False, path_type=Path),
              help="Write request files to this directory  [default: HOME/requests; with a "
                   "postgresql:// home, none]")
@click.option("--log-json", "--json", "log_json", is_flag=True,
              help="Log one JSON object per line (ts, event, "
              "run_id, flow, status, reason...).")
@click.option("--ready-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write this file once serving (removed when stopping); with "
                   "$NOTIFY_SOCKET set, systemd is told READY=1 and STOPPING=1 too.")
def watch(home: Path, apps: tuple[str, ...], once: bool, limits: dict[str, int],
          inbox: Path | None, requests: Path | None, log_json: bool = False,
          ready_file: Path | None = None, config_file: Path | None = None,
          **flags: Any) -> None:
    """Take decisions from the inbox and resume runs under leases until stopped.

    The inbox is served on its own loop while up to --workers runs execute, so a
    decision for an idle run is acted on while other runs' nodes are busy. With a
    postgresql:// home, each host's watcher serves its own inbox directory; `bide
    approve` records decisions in the database without one. It logs a line per
    run started, resumed, paused, finished, failed, fenced off or skipped; a second
    Ctrl-C exits at once (runs in progress are then recovered as orphans). Settings
    not given as flags come from $BIDE_* variables, then HOME/bide.toml (see `bide
    config`).
    """
    cfg = _settings(home, config_file, flags)
    key_file = cfg["approval_key_file"]
    key = read_approval_key(key_file) if key_file else None
    with open_home(home, durability=cfg["durability"], lease_ttl=cfg["lease_ttl"],
                   approval_key=key, inbox=inbox, requests=requests) as eng:
        for spec in apps:
            install(eng, load_flows(spec))
        watcher = _watcher(eng, cfg, limits, log_json, ready_file)
        if once:
            watcher.once()
        else:
            watcher.serve()


def _watcher(eng: Engine, cfg: HomeConfig, limits: dict[str, int], log_json: bool,
             ready_file: Path | None) -> Watcher:
    """The watcher `bide watch` and `bide serve` run, with the settings in ``cfg``."""
    return Watcher(eng, poll=cfg["watch.poll"], max_orphan_age=cfg["watch.max_orphan_age"],
                   max_attempts=cfg["watch.max_attempts"], workers=cfg["watch.workers"],
                   overlap_after=cfg["watch.overlap_after"], limits=limits,
                   rescan=cfg["watch.rescan"], inbox_max_bytes=cfg["inbox_max_bytes"],
                   events=WatchLog(click.echo, as_json=log_json),
                   readiness=Readiness(ready_file))


@main.command()
@click.option("--home", type=HOME, envvar="BIDE_HOME", default=".bide",
              show_default=True, show_envvar=True,
              help="The bide home directory (created if missing), or a postgresql:// URL.")
@click.option("--app", "apps", multiple=True, required=True, metavar="MODULE:ATTR",
              help="Flows to run (a Flow, or a list or tuple of Flows); repeat for more.")
@click.option("--host", default=Server.DEFAULT_HOST, show_default=True,
              help="The address to listen on (another than 127.0.0.1 lets other machines "
                   "in: put TLS in front).")
@click.option("--port", type=click.IntRange(0, 65535), default=Server.DEFAULT_PORT,
              show_default=True, help="The port (0: any free one; the log says which).")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path),
              help="The bearer token every request needs, created owner-only with a random "
                   "token when missing  [default: HOME/serve.token]")
@setting_options
@click.option("--limit", "limits", multiple=True, metavar="FLOW=N", callback=_flow_limits,
              help="At most N runs of FLOW at once; repeat for more flows.")
@click.option("--inbox", type=click.Path(file_okay=False, path_type=Path),
              help="Take decision files from this directory too  [default: HOME/inbox]")
@click.option("--log-json", "--json", "log_json", is_flag=True,
              help="Log one JSON object per line.")
@click.option("--ready-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write this file once serving HTTP and runs (removed when stopping).")
def serve(home: Path, apps: tuple[str, ...], host: str, port: int, token_file: Path | None,
          limits: dict[str, int], inbox: Path | None, log_json: bool = False,
          ready_file: Path | None = None, config_file: Path | None = None,
          **flags: Any) -> None:
    """Serve an HTTP API for runs and decisions, and keep runs moving (`bide watch`'s work
    in the same process). Needs bide[serve]. Every route but / and /openapi.json needs
    'Authorization: Bearer TOKEN', the token in --token-file.
    """
    Server.check_extra()  # before a home is made
    cfg = _settings(home, config_file, flags)
    key_file = cfg["approval_key_file"]
    key = read_approval_key(key_file) if key_file else None
    with open_home(home, durability=cfg["durability"], lease_ttl=cfg["lease_ttl"],
                   approval_key=key, inbox=inbox) as eng:
        for spec in apps:
            install(eng, load_flows(spec))
        watcher = _watcher(eng, cfg, limits, log_json, ready_file)
        server = Server(eng, watcher=watcher, token_file=token_file, host=host, port=port,
                        max_body=cfg["inbox_max_bytes"], log=watcher.log)
        server.run()


@main.command()
@click.option("--home", type=click.Path(path_type=Path), help="Where to put the demo's home "
              "(default: a new temporary directory).")
def demo(home: Path | None) -> None:
    """Run the incident story: crash, resume, approval via the inbox, outcome unknown."""
    from .bench.demo import run_demo

    raise click.exceptions.Exit(run_demo(home, say=click.echo))


@main.command("pack")
@click.argument("out", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--src", "sources", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="A module file or package directory of your app (repeatable).")
@click.option("--with", "distributions", multiple=True, metavar="DIST",
              help="An installed distribution to add, with its dependencies (repeatable).")
@click.option("--python", default="/usr/bin/env python3", show_default=True,
              help="The file's #! line.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def pack_command(out: Path, sources: tuple[Path, ...], distributions: tuple[str, ...],
                 python: str, as_json: bool) -> None:
    """Pack bide, your app and their dependencies as installed here into one file OUT
    that runs offline: `python3 OUT watch --app mod:flows` (needs bide[pack]).
    It uses no home: $BIDE_HOME does not apply."""
    try:
        report = pack(out, sources=sources, distributions=distributions, python=python)
    except PackError as exc:
        _fail(str(exc), type(exc).__name__, 2, as_json)
    data = {"path": str(report.path), "size": report.size, "python": report.python,
            "distributions": report.distributions, "sources": report.sources}
    _out(as_json, data, lambda: (
        f"wrote {report.path} ({report.size / 1e6:.1f} MB) for {report.python}: "
        f"{len(report.distributions)} distributions, {len(report.sources)} sources\n"
        f"run it with: python3 {report.path} watch --app MODULE:flows"))


from .bench.command import bench  # noqa: E402 - registered last, after every command above

main.add_command(bench)

from .bench.torture import torture  # noqa: E402 - registered last, like bench

main.add_command(torture)

NO_HOME_ENV = ("It does not read $BIDE_HOME: the directories it uses are named on its "
               "command line (or are temporary).")
for _command in main.commands.values():  # every --help says how BIDE_HOME applies
    if not any(getattr(p, "envvar", None) == "BIDE_HOME" for p in _command.params):
        _command.epilog = NO_HOME_ENV


if __name__ == "__main__":
    main()
