"""The HTTP API of ``bide serve``, as a Starlette app: ``make_app(engine, token)``.

Every route answers JSON (errors as ``{"error", "kind"}``, see ``serve_errors``) and
needs ``Authorization: Bearer <token>``, except ``/`` (the approvals page: a shell
that holds no data and fetches everything with the token) and ``/openapi.json``.
No CORS headers are ever sent, so a page of another site cannot send the header:
that is the CSRF defence. Bodies are JSON, at most ``max_body`` bytes.

Engine calls block (store reads, commits): they run in Starlette's thread pool. A
decision goes through ``Inbox.take``: the checks and the commit of a decision file.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..api.runtime import Engine
from ..base.errors import BideError
from ..base.optional import extra
from ..base.render import to_json
from ..base.vocabulary import Status
from ..human.inbox import MAX_BYTES, Inbox, Refused, strict_json
from ..read.scripting import iso_times
from ..run.runs import check_run_id
from . import errors as kinds
from .errors import ApiError, error_doc, status_of
from .events import FALLBACK, KEEPALIVE, home_messages, relay, run_messages
from .openapi import openapi
from .runs import submit_once

if TYPE_CHECKING:
    from starlette import applications, concurrency, exceptions, responses, routing
    from starlette.requests import Request
    from starlette.responses import Response

    Endpoint = Callable[[Request], Awaitable[Response]]
else:  # the serve extra, imported when the first app is made
    applications, concurrency, exceptions, responses, routing = (
        extra(f"starlette.{name}", "serve", "bide serve") for name in
        ("applications", "concurrency", "exceptions", "responses", "routing"))

PAGE = Path(__file__).with_name("page.html")
# no other site may frame the page (a framed page could be tricked into a click); a
# <meta> CSP cannot say frame-ancestors, so the header does, beside the page's own check
PAGE_HEADERS = {"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                "Content-Security-Policy": "frame-ancestors 'none'",
                "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


def make_app(engine: Engine, token: str, *, inbox: Inbox | None = None,
             offer: Callable[[str, str], None] | None = None, max_body: int = MAX_BYTES,
             keepalive: float = KEEPALIVE, fallback: float = FALLBACK,
             closing: threading.Event | None = None) -> applications.Starlette:
    """The app serving ``engine`` to callers holding ``token``.

    Args:
        inbox: the inbox whose checks and commit decisions go through (a watcher's, so
            it resumes a decided run at once); by default one of the engine's own.
        offer: told ``(run_id, flow)`` of each run submitted (a watcher's dispatcher
            offer, so it runs at once, not at the next rescan).
        max_body: the largest request body taken (413 above it).
        keepalive: seconds of silence before an SSE stream sends a comment.
        fallback: seconds between the SSE streams' re-reads when no wake-up comes.
        closing: set when the server stops: open event streams end (by default the
            engine's ``stopping``, which SIGTERM sets).
    """
    api = _Api(engine, inbox or Inbox(engine), offer, max_body, keepalive, fallback,
               closing or engine.stopping)
    guard = _Guard(token)
    routes = [
        routing.Route("/", _page, methods=["GET"]),
        routing.Route("/openapi.json", _openapi, methods=["GET"]),
        routing.Route("/runs", guard(api.submit), methods=["POST"]),
        routing.Route("/runs", guard(api.runs), methods=["GET"]),
        routing.Route("/runs/{run_id}", guard(api.show), methods=["GET"]),
        routing.Route("/runs/{run_id}/state", guard(api.state), methods=["GET"]),
        routing.Route("/runs/{run_id}/events", guard(api.run_events), methods=["GET"]),
        routing.Route("/runs/{run_id}/cancel", guard(api.cancel), methods=["POST"]),
        routing.Route("/pending", guard(api.pending), methods=["GET"]),
        routing.Route("/decisions/{approval_id}", guard(api.decide), methods=["POST"]),
        routing.Route("/events", guard(api.home_events), methods=["GET"]),
    ]
    handlers: dict[Any, Callable[..., Any]] = {
        ApiError: _api_error, BideError: _bide_error, exceptions.HTTPException: _http_error,
        Exception: _internal_error}
    return applications.Starlette(routes=routes, exception_handlers=handlers)


def _threaded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
    """``fn(*args)`` in Starlette's thread pool (engine calls block on the store)."""
    return concurrency.run_in_threadpool(fn, *args, **kwargs)


def json_response(doc: Any, status: int = 200) -> Response:
    """``doc`` as the CLI's ``--json`` prints it (times as ISO-8601), compact."""
    return responses.Response(to_json(iso_times(doc), indent=None), status_code=status,
                    media_type="application/json")


class _Guard:
    """Wraps endpoints that need the bearer token (compared in constant time)."""

    def __init__(self, token: str) -> None:
        self.expected = f"Bearer {token}".encode()

    def __call__(self, endpoint: Endpoint) -> Endpoint:
        async def guarded(request: Request) -> Response:
            given = request.headers.get("authorization", "").encode("latin-1", "replace")
            if not hmac.compare_digest(given, self.expected):
                raise ApiError(401, kinds.UNAUTHORIZED, "this route needs the header "
                               "'Authorization: Bearer <token>' with the server's token "
                               "(its --token-file, by default HOME/serve.token)")
            return await endpoint(request)

        guarded.__name__ = getattr(endpoint, "__name__", "endpoint")
        return guarded


class _Api:
    """The guarded routes: each reads its request, calls the engine in a thread, answers."""

    def __init__(self, engine: Engine, inbox: Inbox, offer: Callable[[str, str], None] | None,
                 max_body: int, keepalive: float, fallback: float,
                 closing: threading.Event) -> None:
        self.engine, self.inbox, self.offer, self.max_body = engine, inbox, offer, max_body
        self.keepalive, self.fallback, self.closing = keepalive, fallback, closing

    # -- runs ---------------------------------------------------------------------
    async def submit(self, request: Request) -> Response:
        body = _object(await self._json(request), "a run")
        _only(body, {"flow", "input", "run_id"}, "a run")
        flow, data, run_id = body.get("flow"), body.get("input", {}), body.get("run_id")
        if not isinstance(flow, str) or not flow:
            raise ApiError(400, kinds.BAD_REQUEST, "field 'flow' is required: the name of "
                           "a flow this server serves")
        if not isinstance(data, dict):
            raise ApiError(400, kinds.BAD_REQUEST, "field 'input' must be a JSON object")
        if run_id is not None:
            run_id = _run_id(run_id)
        doc, created = await _threaded(submit_once, self.engine, flow, data, run_id)
        if created and self.offer is not None:
            self.offer(doc["run_id"], flow)
        return json_response(doc, 202 if created else 200)

    async def runs(self, request: Request) -> Response:
        status = request.query_params.get("status")
        flow = request.query_params.get("flow")
        limit = _count(request.query_params.get("limit"), "limit", least=1)
        wanted = None if status is None else Status.of(status)  # UnknownStatus: 400
        rows = await _threaded(self.engine.run_rows, status=wanted, flow=flow,
                                       limit=limit)
        return json_response({"runs": rows})

    async def show(self, request: Request) -> Response:
        run_id = _run_id(request.path_params["run_id"])
        return json_response(await _threaded(self.engine.show, run_id))

    async def state(self, request: Request) -> Response:
        run_id = _run_id(request.path_params["run_id"])
        version = _count(request.query_params.get("version"), "version", least=0)
        found, values = await _threaded(self.engine.state_at, run_id, version)
        return json_response({"run_id": run_id, "version": found, "state": values})

    async def cancel(self, request: Request) -> Response:
        run_id = _run_id(request.path_params["run_id"])
        raw = await self._body(request, required=False)
        body = _object(_parse(raw), "a cancellation") if raw else {}
        _only(body, {"reason"}, "a cancellation")
        reason = body.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise ApiError(400, kinds.BAD_REQUEST, "field 'reason' must be a string")
        done = await _threaded(self.engine.cancel, run_id, reason)
        return json_response({"run_id": run_id, "cancelled": done,
                              "status": Status.CANCELLED})

    async def run_events(self, request: Request) -> Response:
        run_id = _run_id(request.path_params["run_id"])
        since = _last_event_id(request)
        produce = await _threaded(run_messages, self.engine.store, run_id, since,
                                          self.fallback)
        return _sse(relay(produce, keepalive=self.keepalive, closing=self.closing,
                          name=f"bide-serve-sse-{run_id}"))

    # -- decisions ----------------------------------------------------------------
    async def pending(self, request: Request) -> Response:
        return json_response({"pending": await _threaded(self.engine.pending)})

    async def decide(self, request: Request) -> Response:
        approval_id = request.path_params["approval_id"]
        raw = await self._body(request)
        body = _object(_parse(raw), "a decision")
        if body.setdefault("approval_id", approval_id) != approval_id:
            raise ApiError(422, kinds.INVALID_DECISION, f"the body's approval_id "
                           f"{body['approval_id']!r} is not the one in the URL "
                           f"({approval_id!r})")
        return json_response(await _threaded(self._decide, approval_id, body, raw))

    def _decide(self, approval_id: str, body: dict[str, Any], raw: bytes) -> dict[str, Any]:
        """Record the decision as the inbox records a file's; the decision as recorded."""
        try:
            req, again = self.inbox.take(body, raw, via=f"POST /decisions/{approval_id}")
        except Refused as exc:
            raise ApiError(422, kinds.INVALID_DECISION, str(exc)) from None
        with self.engine.store.reader() as r:
            now = r.approval(approval_id) or req
        return {"approval_id": approval_id, "run_id": now.run_id, "decision": now.decision,
                "by": now.by, "reason": now.reason, "result": now.result,
                "decided_at": now.decided_at, "duplicate": again}

    async def home_events(self, request: Request) -> Response:
        since = _last_event_id(request)
        produce = await _threaded(home_messages, self.engine.store, since,
                                          self.fallback)
        return _sse(relay(produce, keepalive=self.keepalive, closing=self.closing,
                          name="bide-serve-sse-home"))

    # -- bodies -------------------------------------------------------------------
    async def _json(self, request: Request) -> Any:
        return _parse(await self._body(request))

    async def _body(self, request: Request, *, required: bool = True) -> bytes:
        """The body, if JSON and at most ``max_body`` bytes (read no further than that)."""
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            raise _too_large(self.max_body)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body:
                raise _too_large(self.max_body)
            chunks.append(chunk)
        raw = b"".join(chunks)
        if not raw and not required:
            return raw
        media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media != "application/json":
            raise ApiError(415, kinds.MEDIA_TYPE, f"the body must be JSON with "
                           f"'Content-Type: application/json', not {media or 'none'!r}")
        return raw


def _too_large(limit: int) -> ApiError:
    return ApiError(413, kinds.TOO_LARGE, f"the body is larger than the {limit} byte limit")


def _parse(raw: bytes) -> Any:
    """Strict JSON, as decision files are read (no duplicate keys, no NaN)."""
    try:
        return strict_json(raw)
    except Refused as exc:
        raise ApiError(400, kinds.BAD_JSON, f"the body is not usable JSON: {exc}") from None


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ApiError(400, kinds.BAD_REQUEST, f"{what} is one JSON object, not "
                       f"{type(value).__name__}")
    return value


def _only(body: dict[str, Any], fields: set[str], what: str) -> None:
    unknown = set(body) - fields
    if unknown:
        raise ApiError(400, kinds.BAD_REQUEST, f"unknown field(s) in {what}: "
                       f"{', '.join(sorted(unknown))} (it takes {', '.join(sorted(fields))})")


def _run_id(value: Any) -> str:
    try:
        return check_run_id(value)
    except ValueError as exc:
        raise ApiError(400, kinds.BAD_REQUEST, str(exc)) from None


def _count(text: str | None, name: str, *, least: int) -> int | None:
    """A whole-number query parameter (None when absent)."""
    if text is None:
        return None
    if not text.isdigit() or len(text) > 18 or int(text) < least:
        raise ApiError(400, kinds.BAD_REQUEST, f"query parameter {name!r} must be a whole "
                       f"number of at least {least}, not {text[:40]!r}")
    return int(text)


def _last_event_id(request: Request) -> int | None:
    """Where a reconnecting SSE client goes on: after the seq it saw last."""
    text = request.headers.get("last-event-id")
    if text is None or text == "":
        return None
    if not text.isdigit() or len(text) > 18:
        raise ApiError(400, kinds.BAD_REQUEST, f"Last-Event-ID must be a record seq (a "
                       f"whole number), not {text[:40]!r}")
    return int(text)


def _sse(messages: Any) -> responses.StreamingResponse:
    return responses.StreamingResponse(messages, media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


# -- unguarded ----------------------------------------------------------------------
async def _page(request: Request) -> Response:
    return responses.FileResponse(PAGE, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)


async def _openapi(request: Request) -> Response:
    return responses.Response(to_json(openapi(), indent=None), media_type="application/json")


# -- errors -------------------------------------------------------------------------
def _error(status: int, kind: str, message: str) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return responses.Response(to_json(error_doc(message, kind), indent=None), status_code=status,
                    media_type="application/json", headers=headers)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return _error(exc.status, exc.kind, exc.message)


async def _bide_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BideError)
    return _error(status_of(exc), type(exc).__name__, str(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, exceptions.HTTPException)
    kind = {404: kinds.NO_ROUTE, 405: kinds.METHOD}.get(exc.status_code, kinds.BAD_REQUEST)
    message = {404: f"no route {request.url.path!r} (see /openapi.json)",
               405: f"{request.method} is not a method of {request.url.path!r}"}.get(
                   exc.status_code, str(exc.detail))
    return _error(exc.status_code, kind, message)


async def _internal_error(request: Request, exc: Exception) -> Response:
    return _error(500, kinds.INTERNAL, f"{type(exc).__name__}: {exc}")
