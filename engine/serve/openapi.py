"""The OpenAPI 3.1 description of ``bide serve``'s routes, served at ``/openapi.json``.

Written out here (one table of routes), not generated from the app: the app has no
schema machinery to generate it from, and a test checks that the two list the same
routes.
"""

from __future__ import annotations

from typing import Any

from .errors import (
    BAD_JSON,
    BAD_REQUEST,
    INVALID_DECISION,
    MEDIA_TYPE,
    TOO_LARGE,
    UNAUTHORIZED,
)

_OBJECT: dict[str, Any] = {"type": "object"}
_RUN_ID = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
_SSE = {"200": {"description": "Server-Sent Events: `id:` is the record's log seq (send it "
                "back as `Last-Event-ID` to go on after it); a `: keepalive` comment every "
                "15 s of silence.", "content": {"text/event-stream": {"schema":
                                                                      {"type": "string"}}}}}
_LAST_EVENT_ID = {"name": "Last-Event-ID", "in": "header", "required": False,
                  "schema": {"type": "integer", "minimum": 0}}
_DECISION_BODY = {
    "type": "object", "additionalProperties": False, "required": ["decision"],
    "properties": {
        "decision": {"type": "string", "description": "approve, reject, answer, mark_done, "
                     "retry or abort: one the request allows"},
        "by": {"type": "string"}, "reason": {"type": "string"},
        "value": {"description": "an answer's value (decision answer), checked against the "
                  "question's schema"},
        "result": {"description": "what a mark_done decision hands the node"},
        "run_id": {"type": "string", "description": "refused unless it is the request's run"},
        "digest": {"type": "string", "description": "refused unless it is the request's "
                   "digest (the action and payload approved)"},
        "sig": {"type": "string", "description": "HMAC of the decision, when the home "
                "requires signed decisions (as in a decision file)"},
        "approval_id": {"type": "string", "description": "optional: the one in the URL"},
    }}

# (method, path, summary, parameters, request body schema or None, responses)
ROUTES: list[tuple[str, str, str, list[dict[str, Any]], dict[str, Any] | None,
                   dict[str, Any]]] = [
    ("get", "/", "The approvals page (HTML; no token: it holds no data).", [], None,
     {"200": {"description": "the page", "content": {"text/html": {}}}}),
    ("get", "/openapi.json", "This description (no token).", [], None,
     {"200": {"description": "OpenAPI 3.1"}}),
    ("post", "/runs", "Submit a run: 202 with its id; the same run_id, flow and input "
     "again: 200 with the run; another flow or input under that id: 409.", [],
     {"type": "object", "required": ["flow"], "additionalProperties": False,
      "properties": {"flow": {"type": "string"}, "input": _OBJECT,
                     "run_id": {"type": "string"}}},
     {"202": {"description": "created: {run_id, flow, status}"},
      "200": {"description": "already there: {run_id, flow, status}"},
      "409": {"description": "RunExists"}, "422": {"description": "UnknownFlow"}}),
    ("get", "/runs", "Runs, newest first (the rows of `bide runs --json`).",
     [{"name": "status", "in": "query", "schema": {"type": "string"}},
      {"name": "flow", "in": "query", "schema": {"type": "string"}},
      {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1}}], None,
     {"200": {"description": "{runs: [...]}"}, "400": {"description": "UnknownStatus"}}),
    ("get", "/runs/{run_id}", "The run (`bide show --json`).", [_RUN_ID], None,
     {"200": {"description": "the run"}, "404": {"description": "UnknownRun"}}),
    ("get", "/runs/{run_id}/state", "Its state at the latest checkpoint or at ?version=.",
     [_RUN_ID, {"name": "version", "in": "query", "schema": {"type": "integer",
                                                              "minimum": 0}}], None,
     {"200": {"description": "{run_id, version, state}"},
      "404": {"description": "UnknownRun, UnknownVersion"}}),
    ("get", "/runs/{run_id}/events", "Its records as they are committed (`bide log --follow "
     "--through-pauses --json`), then an `end` event once it finished.",
     [_RUN_ID, _LAST_EVENT_ID], None, {**_SSE, "404": {"description": "UnknownRun"}}),
    ("post", "/runs/{run_id}/cancel", "Cancel the run for good.", [_RUN_ID],
     {"type": "object", "additionalProperties": False,
      "properties": {"reason": {"type": "string"}}},
     {"200": {"description": "{run_id, cancelled, status}"},
      "409": {"description": "NotCancellable"}}),
    ("get", "/pending", "What waits for a person: each item as one of `bide pending --json`.",
     [], None, {"200": {"description": "{pending: [...]}"}}),
    ("post", "/decisions/{approval_id}", "Decide: the fields and checks of a decision file.",
     [{"name": "approval_id", "in": "path", "required": True, "schema": {"type": "string"}}],
     _DECISION_BODY,
     {"200": {"description": "the decision as recorded (duplicate: true for a repeat)"},
      "404": {"description": "UnknownApproval"},
      "409": {"description": "AlreadyDecided: decided otherwise already"},
      "422": {"description": f"{INVALID_DECISION}, DecisionRefused, DecisionNotAllowed, "
              "InvalidAnswer, ApprovalKeyError: nothing was recorded"}}),
    ("get", "/events", "One event per record any run commits (`event:` its type, `data:` "
     "{run_id, kind, seq, status?}): a page refetches what it shows.", [_LAST_EVENT_ID],
     None, _SSE),
]
OPEN = {"/", "/openapi.json"}  # routes that need no token

_ERRORS = {
    "400": {"description": f"{BAD_JSON}, {BAD_REQUEST}"},
    "401": {"description": UNAUTHORIZED},
    "413": {"description": TOO_LARGE},
    "415": {"description": MEDIA_TYPE},
}


def openapi() -> dict[str, Any]:
    """The document: every route, its token, its body and its answers."""
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, params, body, answers in ROUTES:
        op: dict[str, Any] = {"summary": summary, "parameters": params,
                              "responses": {**answers, **({} if path in OPEN else _ERRORS)}}
        if path in OPEN:
            op["security"] = []
        if body is not None:
            op["requestBody"] = {"required": not path.endswith("/cancel"),
                                 "content": {"application/json": {"schema": body}}}
        paths.setdefault(path, {})[method] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "bide serve", "version": "1",
                 "description": "Submit and watch durable runs; decide what waits. Every "
                 "error is {error, kind}."},
        "components": {
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": {"type": "object", "required": ["error", "kind"],
                                  "properties": {"error": {"type": "string"},
                                                 "kind": {"type": "string"}}}}},
        "security": [{"token": []}],
        "paths": paths,
    }
