"""What scripts get from the CLI: absolute times in JSON, errors as one JSON object.

Pure functions of their arguments, so the CLI stays a thin layer and what a script can rely
on (the shape of ``--json`` output and of errors) is tested without a terminal.
"""

from __future__ import annotations

import datetime
import getpass
from typing import Any

# Keys that hold an epoch time in the engine's JSON-ready rows (``*_at`` too).
TIME_KEYS = frozenset({"at", "until", "next_due", "last_due", "due", "ts"})
# Keys whose values are the user's data (state, tool results, inputs): never rewritten, even
# when the user named a field ``created_at``.
USER_KEYS = frozenset({"state", "value", "values", "result", "input", "payload", "data",
                       "args", "kwargs", "output", "pending_writes", "before", "after",
                       "answer"})


def iso(ts: float) -> str:
    """An epoch time as ISO-8601 in UTC with its offset: ``2026-12-01T09:30:00.250000+00:00``."""
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).isoformat()


def is_time_key(key: Any) -> bool:
    return isinstance(key, str) and (key in TIME_KEYS or key.endswith("_at"))


def iso_times(doc: Any) -> Any:
    """``doc`` with every epoch time (a number under a time key) as an ISO-8601 string.

    Scripts get one absolute, readable form of time in every ``--json`` output; the user's
    own data (under ``USER_KEYS``) is left as it was stored.
    """
    if isinstance(doc, dict):
        return {k: v if k in USER_KEYS else
                iso(v) if is_time_key(k) and _is_number(v) else iso_times(v)
                for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [iso_times(v) for v in doc]
    return doc


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def error_doc(message: str, kind: str, exit_code: int) -> dict[str, Any]:
    """The one shape of an error under ``--json`` (printed on stderr, the exit code unchanged):
    ``{"error": message, "kind": exception class name, "exit_code": n}``."""
    return {"error": message, "kind": kind, "exit_code": exit_code}


def wants_json(args: list[str]) -> bool:
    """Whether a command line asks for JSON: ``--json`` among its options (before ``--``)."""
    options = args[:args.index("--")] if "--" in args else args
    return "--json" in options


def who() -> str:
    """Who decides when ``--by`` is not given: the login name, or a placeholder that says
    the name could not be found (no ``$USER``/``$LOGNAME`` and no password entry)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # neither the environment nor the password database knows
        return "unknown-user"
