"""Decoded objects kept from one commit to the next, each with the exact bytes it stands for.

A commit decoded again, at every superstep, what the run's last commit had just
written (its head, its latest-state directory, a list's open tail). Kept here, an
object is handed out only when the bytes stored now are the ones it was made from,
and taken out when handed (the caller changes it; a commit that raises leaves nothing
behind). A write the cache did not see, a rollback, another home with the same keys:
the bytes differ and the caller decodes as before. Bounded by a number of entries
and, optionally, by their stored bytes; past either bound all go.

``Memo`` is the simpler kind: a pure function's answers by key (the keys a commit
makes at every step), bounded by a number of keys.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class KeptByBytes(Generic[T]):
    """Objects by key, each with the bytes it decodes from (see the module docstring)."""

    def __init__(self, most: int, budget: int | None = None) -> None:
        self.most, self.budget = most, budget
        self._kept: dict[bytes, tuple[bytes, T]] = {}
        self.bytes = 0  # the stored bytes of what is kept

    def take(self, key: bytes, raw: bytes | None) -> T | None:
        """The object kept for ``key`` if ``raw`` is exactly its bytes (else None); taken
        out either way."""
        kept = self._kept.pop(key, None)
        if kept is None:
            return None
        self.bytes -= len(kept[0])
        return kept[1] if kept[0] == raw else None

    def keep(self, key: bytes, raw: bytes, found: T) -> None:
        """Keep ``found``, what ``raw`` (just stored at ``key``) decodes to."""
        if key in self._kept:
            self.bytes -= len(self._kept.pop(key)[0])
        if len(self._kept) >= self.most or (
                self.budget is not None and self.bytes + len(raw) > self.budget):
            self.clear()
        self._kept[key] = (raw, found)
        self.bytes += len(raw)

    def clear(self) -> None:
        self._kept.clear()
        self.bytes = 0

    def values(self) -> Iterator[tuple[bytes, T]]:
        return iter(self._kept.values())

    def __contains__(self, key: object) -> bool:
        return key in self._kept

    def __len__(self) -> int:
        return len(self._kept)


class Memo(dict[K, T]):
    """A pure function's answers, kept: a key asked again is a dict lookup in C (no
    Python call), ``memo[key]``; past ``most`` keys all go. For the keys made at every
    step (a run's state keys, its head's, its latest values')."""

    def __init__(self, rule: Callable[[K], T], most: int) -> None:
        super().__init__()
        self.rule, self.most = rule, most

    def __missing__(self, key: K) -> T:
        if len(self) >= self.most:
            self.clear()
        found = self[key] = self.rule(key)
        return found
