"""bide: durable agent runs in a directory.

Checkpoints at consistent boundaries, pending writes for parallel nodes, a
write-ahead intent log for tool calls, approvals through an inbox directory.
Everything public is re-exported here; modules under ``engine`` and
``formats`` are internal.
"""

import sys as _sys

from .engine import langgraph
from .engine.compaction import CompactReport, compact
from .engine.copy_home import CopyReport, copy_home
from .engine.errors import (
    AlreadyDecided,
    ApprovalError,
    ApprovalKeyError,
    BideError,
    ChildFailed,
    CompactFailed,
    ConfigError,
    Conflict,
    ContextClosed,
    CopyRefused,
    CorruptIndex,
    CorruptRecord,
    DecisionNotAllowed,
    DecisionRefused,
    DurabilityLost,
    FlowError,
    FlowMismatch,
    FollowTimeout,
    InvalidAnswer,
    InvalidChild,
    InvalidSchedule,
    InvalidTimer,
    LangGraphThread,
    LogUnreadable,
    MissingExtra,
    NewerSchema,
    NewerStore,
    NodeFailed,
    Nondeterminism,
    NotAHome,
    NotALangGraphThread,
    NotATool,
    NotCancellable,
    NotFound,
    NotSerializable,
    PackError,
    QuestionExpired,
    QuestionRejected,
    ReadOnlyHome,
    ReconciliationAborted,
    RecordError,
    ReducerConflict,
    RunError,
    RunExists,
    RunNotResumable,
    ScheduleError,
    ServeError,
    SignalRefused,
    StaleLease,
    StateNotSerializable,
    StoreBusy,
    StoreError,
    StoreFull,
    ToolError,
    ToolFailed,
    ToolNeedsAwait,
    ToolOutsideNode,
    UnknownApproval,
    UnknownFlow,
    UnknownKey,
    UnknownRecordType,
    UnknownRun,
    UnknownSchedule,
    UnknownStatus,
    UnknownVersion,
)
from .engine.events import Event
from .engine.flow import END, Flow, append, merge
from .engine.follow import Outage
from .engine.home_config import HomeConfig
from .engine.home_files import HomeFiles
from .engine.maintenance import DoctorReport, PruneReport
from .engine.memory_store import MemoryStore
from .engine.pack import PackReport, pack
from .engine.policy import Policy
from .engine.readiness import Readiness
from .engine.recovery import RecoveredRun, RecoverReport
from .engine.runs import CheckpointInfo, Run
from .engine.runtime import Engine, check_run_id, open
from .engine.schedules import Schedule
from .engine.send import Send
from .engine.server import Server
from .engine.store import Store, WriteEvent
from .engine.surface import read_approval_key
from .engine.tools import Outcome, Tool, tool
from .engine.vocabulary import Decision, IntentStatus, Status
from .engine.watch_log import WatchLog
from .engine.watcher import Watcher

# ``bide.langgraph`` with no module at the fixed top level: the subpackage is cheap to
# import (it loads LangGraph only when BideSaver is used), so alias it as a submodule.
_sys.modules[f"{__name__}.langgraph"] = langgraph

__version__ = "0.1.0"

__all__ = [
    "AlreadyDecided",
    "ApprovalError",
    "ApprovalKeyError",
    "BideError",
    "CheckpointInfo",
    "ChildFailed",
    "CompactFailed",
    "CompactReport",
    "ConfigError",
    "Conflict",
    "ContextClosed",
    "CopyRefused",
    "CopyReport",
    "CorruptIndex",
    "CorruptRecord",
    "Decision",
    "DecisionNotAllowed",
    "DecisionRefused",
    "DoctorReport",
    "DurabilityLost",
    "END",
    "Engine",
    "Event",
    "Flow",
    "FlowError",
    "FlowMismatch",
    "FollowTimeout",
    "HomeConfig",
    "HomeFiles",
    "IntentStatus",
    "InvalidAnswer",
    "InvalidChild",
    "InvalidSchedule",
    "InvalidTimer",
    "LangGraphThread",
    "LogUnreadable",
    "MemoryStore",
    "MissingExtra",
    "NewerSchema",
    "NewerStore",
    "NodeFailed",
    "Nondeterminism",
    "NotAHome",
    "NotALangGraphThread",
    "NotATool",
    "NotCancellable",
    "NotFound",
    "NotSerializable",
    "Outage",
    "Outcome",
    "PackError",
    "PackReport",
    "Policy",
    "PruneReport",
    "QuestionExpired",
    "QuestionRejected",
    "ReadOnlyHome",
    "Readiness",
    "ReconciliationAborted",
    "RecordError",
    "RecoverReport",
    "RecoveredRun",
    "ReducerConflict",
    "Run",
    "RunError",
    "RunExists",
    "RunNotResumable",
    "Schedule",
    "ScheduleError",
    "Send",
    "ServeError",
    "Server",
    "SignalRefused",
    "StaleLease",
    "StateNotSerializable",
    "Status",
    "Store",
    "StoreBusy",
    "StoreError",
    "StoreFull",
    "Tool",
    "ToolError",
    "ToolFailed",
    "ToolNeedsAwait",
    "ToolOutsideNode",
    "UnknownApproval",
    "UnknownFlow",
    "UnknownKey",
    "UnknownRecordType",
    "UnknownRun",
    "UnknownSchedule",
    "UnknownStatus",
    "UnknownVersion",
    "WatchLog",
    "Watcher",
    "WriteEvent",
    "append",
    "check_run_id",
    "compact",
    "copy_home",
    "merge",
    "open",
    "pack",
    "read_approval_key",
    "tool",
]
