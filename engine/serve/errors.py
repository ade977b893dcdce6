"""Errors of ``bide serve`` as JSON: ``{"error": message, "kind": stable kind}`` and a status.

A bide error's kind is its class name (as ``--json`` errors of the CLI say it); what
only HTTP can get wrong (no token, a body too large, JSON that does not parse, a
route that does not exist) has a kind of its own, listed here once.
"""

from __future__ import annotations

from typing import Any

from ..base.errors import (
    AlreadyDecided,
    ApprovalKeyError,
    BideError,
    Conflict,
    DecisionRefused,
    InvalidChild,
    NotFound,
    NotSerializable,
    RunExists,
    UnknownFlow,
    UnknownStatus,
)

UNAUTHORIZED = "Unauthorized"  # no bearer token, or not this server's
TOO_LARGE = "BodyTooLarge"
BAD_JSON = "BadJSON"  # not UTF-8, not JSON, duplicate keys, NaN...
MEDIA_TYPE = "UnsupportedMediaType"  # a body that is not application/json
BAD_REQUEST = "BadRequest"  # a field or query parameter of the wrong shape
INVALID_DECISION = "InvalidDecision"  # a decision's fields refused (as a decision file's)
NO_ROUTE = "NoSuchRoute"
METHOD = "MethodNotAllowed"
INTERNAL = "InternalError"
UNAVAILABLE = "StoreUnavailable"  # the store cannot take the write now (full disk...)

# The first row a bide error is an instance of gives its status.
STATUS: tuple[tuple[type[BideError], int], ...] = (
    (AlreadyDecided, 409),  # decided otherwise already: the caller's view is stale
    (ApprovalKeyError, 422),
    (DecisionRefused, 422),  # digest, run, expiry, schema, a decision the request refuses
    (RunExists, 409),
    (UnknownFlow, 422),  # a flow this server does not serve, named in the body
    (NotFound, 404),
    (UnknownStatus, 400),
    (InvalidChild, 422),
    (NotSerializable, 422),
    (Conflict, 409),
)


class ApiError(Exception):
    """A request refused before (or instead of) reaching the engine."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def status_of(exc: BideError) -> int:
    """The HTTP status of a bide error; 500 for one no request can cause (a corrupt record)."""
    return next((code for cls, code in STATUS if isinstance(exc, cls)), 500)


def error_doc(message: str, kind: str) -> dict[str, Any]:
    return {"error": message, "kind": kind}
