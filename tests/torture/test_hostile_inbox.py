"""The hostile inbox corpus: every file rejected with a reason, nothing runs, nothing deleted,
the watcher keeps serving good files dropped between them."""

from __future__ import annotations

import json
from pathlib import Path

import bide
from bide.engine.human.inbox import Inbox, parse
from bide.tests.torture.harness.corpus import generate, read_corpus, run_corpus

CORPUS = Path(__file__).parent / "corpus"


def test_the_committed_corpus_is_what_the_generator_makes():
    seeds = read_corpus(CORPUS)
    assert len(seeds) >= 500
    assert [(s["name"], s["data"]) for s in seeds] == [(g["name"], g["data"])
                                                       for g in generate()]


def test_every_hostile_file_is_rejected_and_the_watcher_keeps_serving(tmp_path):
    result = run_corpus(tmp_path, read_corpus(CORPUS))
    assert result["violations"] == [], result["violations"][:10]
    assert result["watcher_crashes"] == 0
    assert result["hostile_rejected"] == result["hostile_total"] >= 500
    assert {"truncated", "oversize", "deep-nesting", "duplicate-keys", "nan-infinity",
            "huge-int", "invalid-utf8", "wrong-type", "unknown-field", "path-traversal-name",
            "replay", "stale-state", "other-run", "signature", "expired"} <= set(
                result["categories"])


# -- regressions: hostile files that got through or crashed the watcher -----------------------
def test_a_name_too_long_for_its_reason_file_does_not_crash_the_watcher(tmp_path):
    """A 245-byte name plus '.error.json' exceeded NAME_MAX: writing the reason raised
    OSError out of Watcher.once, killing `bide watch`."""
    with bide.open(tmp_path / "h", durability="fast") as eng:
        name = "x" * 240 + ".json"
        (eng.home / "inbox" / name).write_text("{")
        (res,) = Inbox(eng).process()
        assert not res.accepted
        folder = eng.home / "inbox" / "rejected"
        (reason,) = [p for p in folder.iterdir() if p.name.endswith(".error.json")]
        assert (folder / name).exists() and json.loads(reason.read_text())["file"] == name


def test_a_file_named_like_a_reason_file_is_never_overwritten(tmp_path):
    """Rejecting 'x.json' wrote 'x.json.error.json' with os.replace, replacing a hostile
    file of that name rejected earlier: a file was deleted."""
    with bide.open(tmp_path / "h", durability="fast") as eng:
        inbox = eng.home / "inbox"
        (inbox / "x.json.error.json").write_text("[1]")
        Inbox(eng).process()
        (inbox / "x.json").write_text("{")
        Inbox(eng).process()
        files = sorted(p.name for p in (inbox / "rejected").iterdir())
        assert len(files) == 4 and (inbox / "rejected" / "x.json.error.json").read_text() == "[1]"


def test_huge_integers_and_results_on_approvals_are_refused():
    """A 400-digit 'result' on an 'approve' was accepted and recorded."""
    body = {"approval_id": "a-1", "decision": "approve"}
    for extra in ('"result": 1', '"result": ' + "9" * 400, '"by": 1' + "0" * 30):
        try:
            parse(json.dumps(body)[:-1].encode() + b", " + extra.encode() + b"}")
        except Exception as exc:  # noqa: BLE001 - Refused is what we expect
            assert type(exc).__name__ == "Refused", exc
        else:
            raise AssertionError(f"accepted {extra[:30]}")
    assert parse(b'{"approval_id": "a-1", "decision": "mark_done", "result": 5}')["result"] == 5
