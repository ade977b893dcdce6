"""A framework's own review request, decided through bide's doors: LangChain's
``HumanInTheLoopMiddleware`` (HITL).

HITL pauses an agent with ``interrupt(value)`` in one of two shapes, and reads the
resume value in the shape that goes with it:

- batched (its default): ``{"action_requests": [{name, args, description}],
  "review_configs": [{action_name, allowed_decisions}]}``, resumed with
  ``{"decisions": [one decision per action, in order]}``;
- per call: ``{"type": "tool_approval", "tool_call_id", "name", "args",
  "description"}`` with a ``response_schema`` naming the decisions allowed,
  resumed with one decision.

A HITL decision is ``{"type": "approve"}``, ``{"type": "reject", "message"?}``,
``{"type": "edit", "edited_action": {"name", "args"}}`` or ``{"type": "respond",
"message"}``. bide's doors record ``approve``, ``reject`` (with a reason) and
``answer`` (a value): this module says which of them a review allows (approve and
reject only where every action allows them), the schema an answer must match (HITL's
own response, each decision of a type its action allows: a door refuses any other,
so no decision resumes the agent into HITL's ``ValueError``), and the value each
decision resumes with. An expiry is a rejection, so a review expires only if every
action allows ``reject``.

A review is recognised from the stored request's payload (the interrupt's value),
so a request recorded before this module existed resumes the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..base.vocabulary import Decision

TYPES = ("approve", "edit", "reject", "respond")  # HITL's decision types, in its order
BATCHED, PER_CALL = "batched", "per_call"


@dataclass(frozen=True)
class Action:
    """One tool call under review: what the model asked, and what HITL lets a person do."""

    name: str
    args: dict[str, Any]
    description: str
    allowed: tuple[str, ...]

    def call(self) -> str:
        """``charge(amount=5)``: the call as a person reads it."""
        shown = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in self.args.items())
        return f"{self.name}({shown})"


@dataclass(frozen=True)
class Review:
    """A HITL request: its mode (``BATCHED`` or ``PER_CALL``) and its actions."""

    mode: str
    actions: tuple[Action, ...]

    def allows(self, kind: str) -> bool:
        return all(kind in a.allowed for a in self.actions)

    def decisions(self) -> list[str]:
        """The bide decisions that fit: approve / reject where every action allows it, and
        ``answer`` with HITL's own response (edit, respond, or a decision per action)."""
        found = [d.value for d in (Decision.APPROVE, Decision.REJECT) if self.allows(d.value)]
        return [*found, Decision.ANSWER.value]

    def can_expire(self) -> bool:
        """An expiry resumes as a rejection: only where every action takes one."""
        return self.allows("reject")

    def summary(self) -> str:
        """What is asked, in a line: ``charge(amount=5)``."""
        return "; ".join(a.call() for a in self.actions)

    def schema(self, given: dict[str, Any] | None) -> dict[str, Any] | None:
        """The JSON Schema of an answer: per call, the interrupt's own ``response_schema``
        (LangGraph checks it too); batched, HITL's response with one decision per action,
        each of a type its action allows."""
        if self.mode == PER_CALL:
            return given
        return {"type": "object", "required": ["decisions"], "properties": {"decisions": {
            "type": "array", "minItems": len(self.actions), "maxItems": len(self.actions),
            "prefixItems": [_one_of(a) for a in self.actions]}}}

    def resume(self, decision: str, reason: str | None, value: Any) -> Any:
        """The value the interrupt resumes with for a recorded decision."""
        if decision == Decision.ANSWER:
            return value
        one: dict[str, Any] = {"type": "approve"}
        if decision == Decision.REJECT:
            one = {"type": "reject"} if not reason else {"type": "reject", "message": reason}
        if self.mode == PER_CALL:
            return one
        return {"decisions": [dict(one) for _ in self.actions]}

    def edited(self, args: list[dict[str, Any] | None]) -> Any:
        """An answer that edits the calls' arguments: ``args`` holds one entry per action,
        None for an action approved as it is.

        Raises:
            ValueError: not one entry per action, or an edit (or approval) an action
                does not allow.
        """
        if len(args) != len(self.actions):
            raise ValueError(f"the review has {len(self.actions)} action(s), "
                             f"{len(args)} argument set(s) were given")
        out = []
        for action, new in zip(self.actions, args, strict=True):
            kind = "approve" if new is None else "edit"
            if kind not in action.allowed:
                raise ValueError(f"{action.name} takes {' / '.join(action.allowed)}, not {kind}")
            out.append({"type": "approve"} if new is None else
                       {"type": "edit", "edited_action": {"name": action.name, "args": new}})
        return out[0] if self.mode == PER_CALL else {"decisions": out}

    def responded(self, message: str) -> Any:
        """An answer that replies for every call with ``message`` (the tool is not run).

        Raises:
            ValueError: an action does not allow ``respond``.
        """
        if not self.allows("respond"):
            raise ValueError("not every action of the review allows respond")
        one = {"type": "respond", "message": message}
        return one if self.mode == PER_CALL else {"decisions": [dict(one) for _ in self.actions]}

    def template(self) -> Any:
        """An answer to copy and change: each call as asked, as an edit where one is
        allowed (else its first allowed decision)."""
        out = [_sample(a) for a in self.actions]
        return out[0] if self.mode == PER_CALL else {"decisions": out}

    def expected(self) -> str:
        """The answer's shape in words, for an error that refuses one."""
        kinds = {t for a in self.actions for t in a.allowed}
        one = "{\"type\": " + " | ".join(f'"{t}"' for t in TYPES if t in kinds) + ", ...}"
        if self.mode == PER_CALL:
            return f"one HITL decision, {one}"
        return (f"HITL's response, {{\"decisions\": [{len(self.actions)} decision(s) "
                f"{one}, one per action in order]}}")

    def shown(self) -> dict[str, Any]:
        """What ``bide pending``, the page and ``GET /pending`` show of the review."""
        return {"mode": self.mode, "actions": [
            {"name": a.name, "args": a.args, "description": a.description,
             "allowed": list(a.allowed), "call": a.call()} for a in self.actions]}


def review_of(value: Any, schema: dict[str, Any] | None = None) -> Review | None:
    """The HITL review ``value`` is (with ``schema``, its interrupt's ``response_schema``),
    or None: a value of any other shape is a plain interrupt."""
    if not isinstance(value, dict):
        return None
    if value.get("type") == "tool_approval":
        return _per_call(value, schema)
    if "action_requests" in value and "review_configs" in value:
        return _batched(value)
    return None


def _batched(value: dict[str, Any]) -> Review | None:
    requests, configs = value["action_requests"], value["review_configs"]
    if not (isinstance(requests, list) and isinstance(configs, list)) or not requests \
            or len(requests) != len(configs):
        return None
    actions = []
    for req, config in zip(requests, configs, strict=True):
        allowed = config.get("allowed_decisions") if isinstance(config, dict) else None
        action = _action(req, allowed)
        if action is None:
            return None
        actions.append(action)
    return Review(BATCHED, tuple(actions))


def _per_call(value: dict[str, Any], schema: dict[str, Any] | None) -> Review | None:
    allowed = _schema_types(schema) if schema is not None else list(TYPES)
    action = _action(value, allowed)
    return None if action is None else Review(PER_CALL, (action,))


def _action(req: Any, allowed: Any) -> Action | None:
    if not isinstance(req, dict) or not isinstance(req.get("name"), str) \
            or not isinstance(req.get("args"), dict):
        return None
    if not isinstance(allowed, list) or not allowed or any(t not in TYPES for t in allowed):
        return None
    description = req.get("description")
    return Action(req["name"], req["args"], description if isinstance(description, str) else "",
                  tuple(t for t in TYPES if t in allowed))


def _schema_types(schema: dict[str, Any]) -> list[str]:
    """The decision types a per-call ``response_schema`` admits (the ``const`` of each
    branch's ``type``); a schema that names none admits whatever LangGraph accepts."""
    defs = schema.get("$defs", {})
    branches = schema.get("oneOf") or schema.get("anyOf") or [schema]
    found = []
    for branch in branches:
        if isinstance(branch, dict) and "$ref" in branch:
            branch = defs.get(str(branch["$ref"]).removeprefix("#/$defs/"), {})
        kind = (branch.get("properties", {}).get("type", {}) if isinstance(branch, dict)
                else {}).get("const")
        if kind in TYPES:
            found.append(kind)
    return found or list(TYPES)


def _sample(action: Action) -> dict[str, Any]:
    if "edit" in action.allowed:
        return {"type": "edit", "edited_action": {"name": action.name, "args": action.args}}
    kind = action.allowed[0]
    return {"type": kind, "message": "TEXT"} if kind == "respond" else {"type": kind}


def _one_of(action: Action) -> dict[str, Any]:
    """The schema of one batched decision about ``action``: a type it allows."""
    forms: dict[str, dict[str, Any]] = {
        "approve": {},
        "reject": {"message": {"type": "string"}},
        "respond": {"message": {"type": "string"}},
        "edit": {"edited_action": {
            "type": "object", "required": ["name", "args"],
            "properties": {"name": {"const": action.name}, "args": {"type": "object"}}}},
    }
    required = {"respond": ["message"], "edit": ["edited_action"]}
    return {"anyOf": [
        {"type": "object", "required": ["type", *required.get(kind, [])],
         "properties": {"type": {"const": kind}, **forms[kind]}}
        for kind in action.allowed]}
