"""Records of LangGraph threads kept by ``bide.langgraph.BideSaver``.

A LangGraph thread is a bide run (``run_id`` is the thread id, flow ``"langgraph"``)
and its records share the log with bide's own. Channel values, checkpoints and
task writes are the bytes LangGraph's serializer made, stored with its type tag
(``"msgpack"``, ``"json"``, ``"bytes"``, ...), so this module never imports
LangGraph: ``bide log`` and ``bide doctor`` read these records without it.

Evolution rules are those of ``formats/records.py``: new fields get defaults, a
field's type never changes, a tag is never reused; a breaking change bumps
``VERSION`` and adds a migration.
"""

from __future__ import annotations

from typing import ClassVar

from .records import Record, register

# A channel version as LangGraph makes them: an int in tests, a zero-padded
# "NNN.random" string in real graphs; floats are allowed by its type.
Version = str | int | float

# One task write: (idx, channel, serializer type tag, serialized value). ``idx``
# is the write's position in its put_writes call, or LangGraph's negative index
# of a special channel (-1 error, -2 scheduled, -3 interrupt, -4 resume).
Write = tuple[int, str, str, bytes]


class LGBlob(Record, frozen=True, kw_only=True, omit_defaults=True):
    """One channel's value at one version, written once per (channel, version).

    ``base`` is -1 for a whole value. Otherwise ``value`` is a msgpack array of
    the items appended to the list stored by the ``lg_blob`` record at log seq
    ``base`` (same thread, namespace and channel): the value is that list
    followed by these items. Chains end at a whole value within a bounded length.
    """

    TYPE: ClassVar[str] = "lg_blob"
    run_id: str
    ns: str = ""
    channel: str
    version: Version
    value_type: str
    value: bytes = b""
    base: int = -1
    at: float = 0.0


class LGCheckpoint(Record, frozen=True, kw_only=True, omit_defaults=True):
    """A LangGraph checkpoint without its channel values.

    ``checkpoint`` holds the serialized checkpoint dict minus ``channel_values``
    and ``channel_versions``; the versions are ``versions`` here, and each
    channel's value is the ``LGBlob`` of (channel, version). ``metadata`` is the
    serialized metadata; ``step``, ``source`` and ``meta_run_id`` repeat what the
    indexes need from it so they can be read without LangGraph's serializer.
    ``updated`` is the checkpoint's ``updated_channels`` (None when absent).
    """

    TYPE: ClassVar[str] = "lg_checkpoint"
    run_id: str
    ns: str = ""
    checkpoint_id: str
    parent_id: str | None = None
    checkpoint_type: str
    checkpoint: bytes
    metadata_type: str
    metadata: bytes
    versions: dict[str, Version] = {}
    updated: list[str] | None = None
    step: int = 0
    source: str = ""
    meta_run_id: str | None = None
    at: float = 0.0


class LGWrites(Record, frozen=True, kw_only=True, omit_defaults=True):
    """One ``put_writes`` call: a task's writes against one checkpoint.

    ``replace`` is the SQLite saver's rule: when every write is to a special
    channel the writes replace earlier ones at the same (task, idx); otherwise
    the first write at a (task, idx) wins and later ones are ignored.
    ``error`` is a short text of an ``__error__`` write, for ``bide runs``.
    ``asks`` are the approval ids bide recorded in the same commit for the
    ``__interrupt__`` writes (``engine/langgraph/interrupts.py``) and ``waits`` the
    status they give the thread (``WAITING_INPUT``, or ``NEEDS_RECONCILIATION`` when
    one asks a person about a tool call whose outcome is unknown).
    """

    TYPE: ClassVar[str] = "lg_writes"
    run_id: str
    ns: str = ""
    checkpoint_id: str
    task_id: str
    task_path: str = ""
    writes: list[Write] = []
    replace: bool = False
    error: str | None = None
    at: float = 0.0
    asks: list[str] = []
    waits: str = ""


LANGGRAPH_RECORDS: tuple[type[Record], ...] = (LGBlob, LGCheckpoint, LGWrites)

for _cls in LANGGRAPH_RECORDS:
    register(_cls)

__all__ = ["LANGGRAPH_RECORDS", "LGBlob", "LGCheckpoint", "LGWrites", "Version", "Write"]
