"""LangGraph record formats: frozen v1 bytes and round trips.

``formats/langgraph_records.py`` never imports LangGraph, so these run without the
``langgraph`` extra (they used to sit in test_langgraph_saver.py, which skips without it).
"""

from __future__ import annotations

from typing import Any

import pytest
from bide.formats import decode, encode
from bide.formats.langgraph_records import LGBlob, LGCheckpoint, LGWrites
from hypothesis import given, settings
from hypothesis import strategies as st

V1_FIXTURES = [  # bytes written by the first version: they must always read back the same
    (LGBlob(run_id="t", channel="items", version="00000000000000000000000000000002.0.5",
            value_type="msgpack", value=b"\x91\xa1a", base=7, at=1.5),
     "62644cf10dd40001076c675f626c6f6287a672756e5f6964a174a76368616e6e656ca56974656d73a776"
     "657273696f6ed92430303030303030303030303030303030303030303030303030303030303030322e30"
     "2e35aa76616c75655f74797065a76d73677061636ba576616c7565c40391a161a46261736507a26174cb"
     "3ff8000000000000"),
    (LGCheckpoint(run_id="t", ns="sub", checkpoint_id="1f0", parent_id="1ef",
                  checkpoint_type="msgpack", checkpoint=b"\x80", metadata_type="msgpack",
                  metadata=b"\x81\xa4step\x01", versions={"items": 2, "n": "3.1"},
                  updated=["items"], step=1, source="loop", meta_run_id="run-1", at=2.5),
     "6264b66ba99d00010d6c675f636865636b706f696e748ea672756e5f6964a174a26e73a3737562ad6368"
     "65636b706f696e745f6964a3316630a9706172656e745f6964a3316566af636865636b706f696e745f74"
     "797065a76d73677061636baa636865636b706f696e74c40180ad6d657461646174615f74797065a76d73"
     "677061636ba86d65746164617461c40781a47374657001a876657273696f6e7382a56974656d7302a16e"
     "a3332e31a77570646174656491a56974656d73a47374657001a6736f75726365a46c6f6f70ab6d657461"
     "5f72756e5f6964a572756e2d31a26174cb4004000000000000"),
    (LGWrites(run_id="t", checkpoint_id="1f0", task_id="task", task_path="~a",
              writes=[(0, "items", "msgpack", b"\x91\x01"),
                      (-1, "__error__", "msgpack", b"\xa4boom")], error="boom", at=3.5),
     "626470c0ccfc0001096c675f77726974657387a672756e5f6964a174ad636865636b706f696e745f6964"
     "a3316630a77461736b5f6964a47461736ba97461736b5f70617468a27e61a6777269746573929400a569"
     "74656d73a76d73677061636bc402910194ffa95f5f6572726f725f5fa76d73677061636bc405a4626f6f"
     "6da56572726f72a4626f6f6da26174cb400c000000000000"),
]


@pytest.mark.parametrize("record,hexed", V1_FIXTURES, ids=lambda x: getattr(x, "TYPE", "bytes"))
def test_langgraph_records_of_version_1_still_read(record: Any, hexed: str):
    assert decode(bytes.fromhex(hexed)) == record
    assert encode(record).hex() == hexed


texts = st.text(alphabet=st.characters(blacklist_characters="\x00",
                                      blacklist_categories=("Cs",)), max_size=12)
versions = st.one_of(st.integers(0, 2**40), texts, st.floats(allow_nan=False))


@settings(max_examples=50)
@given(thread=texts, ns=texts, cid=texts, versions=st.dictionaries(texts, versions),
       writes=st.lists(st.tuples(st.integers(-4, 40), texts, texts, st.binary(max_size=20))))
def test_langgraph_records_round_trip(thread, ns, cid, versions, writes):
    for record in (
        LGCheckpoint(run_id=thread, ns=ns, checkpoint_id=cid, checkpoint_type="msgpack",
                     checkpoint=b"", metadata_type="msgpack", metadata=b"", versions=versions),
        LGWrites(run_id=thread, ns=ns, checkpoint_id=cid, task_id=cid, writes=writes),
        LGBlob(run_id=thread, ns=ns, channel=cid, version=next(iter(versions.values()), 1),
               value_type="bytes", value=cid.encode(), base=len(writes) - 1),
    ):
        assert decode(encode(record)) == record
