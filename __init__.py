"""bide: durable agent runs in a directory.

Checkpoints at consistent boundaries, pending writes for parallel nodes, a
write-ahead intent log for tool calls, approvals through an inbox directory.
Everything public is re-exported here; modules under ``engine`` and
``formats`` are internal.
"""

from .engine.errors import (
    ApprovalError,
    ApprovalKeyError,
    BideError,
    ContextClosed,
    CorruptIndex,
    CorruptRecord,
    DecisionNotAllowed,
    DecisionRefused,
    DurabilityLost,
    FlowError,
    FlowMismatch,
    NewerSchema,
    NewerStore,
    NodeFailed,
    Nondeterminism,
    NotAHome,
    NotATool,
    NotSerializable,
    ReadOnlyHome,
    ReconciliationAborted,
    RecordError,
    ReducerConflict,
    RunError,
    RunExists,
    RunNotResumable,
    StaleLease,
    StateNotSerializable,
    StoreError,
    StoreFull,
    ToolError,
    ToolFailed,
    ToolNeedsAwait,
    ToolOutsideNode,
    UnknownApproval,
    UnknownFlow,
    UnknownRun,
    UnknownStatus,
    UnknownVersion,
)
from .engine.flow import END, Flow, append, merge
from .engine.memory_store import MemoryStore
from .engine.policy import Policy
from .engine.runs import CheckpointInfo, Run, Status
from .engine.runtime import Engine, open
from .engine.store import Store, WriteEvent
from .engine.tools import Outcome, Tool, tool

__version__ = "0.1.0"

__all__ = [
    "ApprovalError",
    "ApprovalKeyError",
    "BideError",
    "CheckpointInfo",
    "ContextClosed",
    "CorruptIndex",
    "CorruptRecord",
    "DecisionNotAllowed",
    "DecisionRefused",
    "DurabilityLost",
    "END",
    "Engine",
    "Flow",
    "FlowError",
    "FlowMismatch",
    "MemoryStore",
    "NewerSchema",
    "NewerStore",
    "NodeFailed",
    "Nondeterminism",
    "NotAHome",
    "NotATool",
    "NotSerializable",
    "Outcome",
    "Policy",
    "ReadOnlyHome",
    "ReconciliationAborted",
    "RecordError",
    "ReducerConflict",
    "Run",
    "RunError",
    "RunExists",
    "RunNotResumable",
    "StaleLease",
    "StateNotSerializable",
    "Status",
    "Store",
    "StoreError",
    "StoreFull",
    "Tool",
    "ToolError",
    "ToolFailed",
    "ToolNeedsAwait",
    "ToolOutsideNode",
    "UnknownApproval",
    "UnknownFlow",
    "UnknownRun",
    "UnknownStatus",
    "UnknownVersion",
    "WriteEvent",
    "append",
    "merge",
    "open",
    "tool",
]
