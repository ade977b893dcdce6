"""Versioned record formats: the bytes bide keeps, and how old bytes are read."""

from .codec import check_serializable, decode, encode, pack, record_type, unpack
from .errors import (
    BideError,
    CorruptRecord,
    NewerSchema,
    NotSerializable,
    RecordError,
    UnknownRecordType,
)
from .records import (
    RECORD_TYPES,
    ApprovalDecided,
    ApprovalRequested,
    Checkpoint,
    IntentCompleted,
    IntentPrepared,
    LeaseAcquired,
    LeaseReleased,
    PendingWrite,
    Record,
    RunCreated,
    StatusChanged,
    register,
)

__all__ = [
    "RECORD_TYPES",
    "ApprovalDecided",
    "ApprovalRequested",
    "BideError",
    "Checkpoint",
    "CorruptRecord",
    "IntentCompleted",
    "IntentPrepared",
    "LeaseAcquired",
    "LeaseReleased",
    "NewerSchema",
    "NotSerializable",
    "PendingWrite",
    "Record",
    "RecordError",
    "RunCreated",
    "StatusChanged",
    "UnknownRecordType",
    "check_serializable",
    "decode",
    "encode",
    "pack",
    "record_type",
    "register",
    "unpack",
]
