"""A list value grown from its items' encodings packs to ``pack_value``'s exact bytes.

The latest-state index appends to a list's tail without decoding it
(formats/packed_list.py); its bytes must stay a function of the items alone,
as a rebuild writes them.
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from bide.formats import CorruptIndex, check_serializable, pack_value
from bide.formats.packed_list import PackedList
from hypothesis import given
from hypothesis import strategies as st

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False), st.text(max_size=20), st.binary(max_size=20),
    st.datetimes(), st.dates(), st.times(), st.uuids(),
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner),
    st.dictionaries(st.text(max_size=8), inner, max_size=4),
    st.frozensets(st.integers(min_value=-(2**63), max_value=2**63), max_size=4)), max_leaves=12)


def grown(items: list, cut: int) -> bytes:
    """Pack ``items[:cut]``, read that back as a PackedList, add the rest, pack again."""
    first = PackedList()
    for item in items[:cut]:
        first.add(check_serializable(item, "x"))
    again = PackedList.unpacked(first.packed(), table="state", key=b"k")
    for item in items[cut:]:
        again.add(check_serializable(item, "x"))
    return again.packed()


@given(st.lists(values, max_size=40), st.integers(min_value=0, max_value=40))
def test_a_grown_list_packs_as_pack_value_packs_it(items, cut):
    assert grown(items, min(cut, len(items))) == pack_value(items)


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 65535, 65536, 70000])
def test_every_array_header_size_round_trips(n):
    items = list(range(n))
    assert grown(items, n // 2) == pack_value(items)


def test_kept_types_keep_their_encodings():
    items = [(1, 2), {3}, dt.datetime(2026, 1, 2, 3, 4, 5), Decimal("1.5"), uuid.UUID(int=7),
             {"a": [b"x", dt.timedelta(seconds=3)]}]
    assert grown(items, 3) == pack_value(items)


@pytest.mark.parametrize("raw", [pack_value({"a": 1}), pack_value("text"), b"", b"\xc1\x00"])
def test_a_value_that_is_not_a_list_is_damage(raw):
    with pytest.raises(CorruptIndex):
        PackedList.unpacked(raw, table="state", key=b"k")


def test_a_flipped_bit_is_damage():
    raw = bytearray(pack_value(["a", "b"]))
    raw[-1] ^= 1
    with pytest.raises(CorruptIndex, match="checksum"):
        PackedList.unpacked(bytes(raw), table="state", key=b"k")
