"""bide: durable agent runs in a directory.

Checkpoints at consistent boundaries, pending writes for parallel nodes, a
write-ahead intent log for tool calls, approvals through an inbox directory.
Everything public is re-exported here; modules under ``engine`` and
``formats`` are internal.
"""

import sys as _sys

from .engine import langgraph
from .engine.api.runtime import Engine, check_run_id, open
from .engine.api.surface import read_approval_key
from .engine.base.errors import (
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
    LeaseUnproven,
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
from .engine.base.vocabulary import Decision, IntentStatus, Status
from .engine.ops.copy_home import CopyReport, copy_home
from .engine.ops.readiness import Readiness
from .engine.ops.watch_log import WatchLog
from .engine.ops.watcher import Watcher
from .engine.read.events import Event
from .engine.read.follow import Outage
from .engine.run.flow import END, Flow, append, merge
from .engine.run.policy import Policy
from .engine.run.recovery import RecoveredRun, RecoverReport
from .engine.run.runs import CheckpointInfo, Run
from .engine.run.schedules import Schedule
from .engine.run.send import Send
from .engine.run.tools import Outcome, Tool, tool
from .engine.serve.server import Server
from .engine.storage.memory_store import MemoryStore
from .engine.storage.store import Store, WriteEvent
from .engine.upkeep.compaction import CompactReport, compact
from .engine.upkeep.home_config import HomeConfig
from .engine.upkeep.home_files import HomeFiles
from .engine.upkeep.maintenance import DoctorReport, PruneReport
from .engine.upkeep.pack import PackReport, pack

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
    "LeaseUnproven",
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
