"""Drift check: the bytes of every record type at its current version are frozen.

The examples live in tests/fixtures/make_golden_records.py, which wrote
tests/fixtures/golden_records.json once. A failure here means a record's wire
format changed: add a new VERSION and a migration (formats/migrations.py) rather
than regenerating the golden bytes.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import msgspec
import pytest
from bide.formats import RECORD_TYPES, decode, encode

FIXTURES = Path(__file__).parent / "fixtures"


def _load_examples():
    spec = importlib.util.spec_from_file_location("make_golden_records",
                                                  FIXTURES / "make_golden_records.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


MAKER = _load_examples()
GOLDEN: dict[str, dict] = json.loads((FIXTURES / "golden_records.json").read_text())
EXAMPLES = {r.TYPE: r for r in MAKER.EXAMPLES}


def test_every_record_type_has_golden_bytes_and_an_example():
    assert sorted(GOLDEN) == sorted(RECORD_TYPES)
    assert sorted(EXAMPLES) == sorted(RECORD_TYPES)
    assert len(MAKER.EXAMPLES) == len(EXAMPLES)


@pytest.mark.parametrize("tag", sorted(GOLDEN))
def test_golden_bytes_are_the_current_version(tag: str):
    assert GOLDEN[tag]["version"] == RECORD_TYPES[tag].VERSION


@pytest.mark.parametrize("tag", sorted(GOLDEN))
def test_encode_gives_the_golden_bytes_exactly(tag: str):
    assert encode(EXAMPLES[tag]).hex() == GOLDEN[tag]["hex"]


@pytest.mark.parametrize("tag", sorted(GOLDEN))
def test_golden_bytes_decode_to_the_example(tag: str):
    record = decode(bytes.fromhex(GOLDEN[tag]["hex"]))
    assert type(record) is RECORD_TYPES[tag]
    assert record == EXAMPLES[tag]


@pytest.mark.parametrize("tag", sorted(EXAMPLES))
def test_every_field_of_an_example_is_set_to_a_non_default(tag: str):
    record = EXAMPLES[tag]
    for field in msgspec.structs.fields(record):
        if field.default is not msgspec.NODEFAULT:
            assert getattr(record, field.name) != field.default, field.name
        if field.default_factory is not msgspec.NODEFAULT:
            assert getattr(record, field.name) != field.default_factory(), field.name


def test_maker_refuses_to_overwrite_without_force(capsys):
    assert MAKER.main([]) == 1
    assert "--force" in capsys.readouterr().err
