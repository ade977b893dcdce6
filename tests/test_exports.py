"""The public surface is exactly what ``__all__`` lists, sorted (httpx's habit)."""

import subprocess
import sys

import bide
import pytest
from extras import need


def test_all_is_sorted_and_complete():
    assert bide.__all__ == sorted(bide.__all__)
    # tests: the torture harness, a subpackage once a test imports it
    subpackages = {"engine", "formats", "bench", "cli", "langgraph", "tests"}
    public = {n for n in dir(bide) if not n.startswith("_")} - subpackages
    assert public == set(bide.__all__)


def test_status_values_equal_names():
    names = ["PENDING", "RUNNING", "WAITING_APPROVAL", "WAITING_INPUT", "SLEEPING",
             "WAITING_SIGNAL", "WAITING_CHILD",
             "NEEDS_RECONCILIATION",
             "INTERRUPTED", "DONE", "FAILED", "CANCELLED"]
    assert [s.value for s in bide.Status] == names
    assert all(s.name == s.value for s in bide.Status)


def test_intent_status_and_decision_words_are_pinned():
    assert [s.value for s in bide.IntentStatus] == [
        "prepared", "completed", "failed", "unknown", "resolved"]
    assert [d.value for d in bide.Decision] == ["approve", "reject", "mark_done", "retry", "abort",
                                                "answer", "elapsed"]
    assert all(m.name == m.value.upper() for m in (*bide.IntentStatus, *bide.Decision))


def test_issue_11_names_are_public_in_their_branch_of_the_tree():
    from bide.engine.base import errors

    branches = {"ContextClosed": bide.ToolError, "ToolNeedsAwait": bide.ToolError,
                "UnknownStatus": bide.RunError, "UnknownVersion": bide.RunError,
                "InvalidTimer": bide.RunError}
    for name, branch in branches.items():
        assert name in bide.__all__ and issubclass(getattr(bide, name), branch)
        assert name in errors.__doc__  # drawn in the tree
    assert issubclass(bide.UnknownStatus, ValueError)
    assert callable(bide.Engine.astart) and callable(bide.Engine.aresume)
    assert callable(bide.Engine.adecide) and callable(bide.Engine.asubmit)


def test_a_missing_extra_is_a_bide_error_and_an_import_error():
    err = bide.MissingExtra("a PostgreSQL home", extra="postgres", module="psycopg")
    assert isinstance(err, bide.BideError) and isinstance(err, ImportError)
    assert err.name == "psycopg" and err.extra == "postgres"
    assert str(err) == ("a PostgreSQL home needs the 'postgres' extra (psycopg is not "
                        "installed): pip install 'bide[postgres]'")


def test_record_errors_are_exported_under_record_error():
    for cls in (bide.CorruptRecord, bide.CorruptIndex, bide.NewerSchema):
        assert issubclass(cls, bide.RecordError) and issubclass(cls, bide.BideError)
    assert issubclass(bide.StateNotSerializable, bide.NotSerializable)


def test_store_errors_are_exported_under_store_error():
    for name in ("ReadOnlyHome", "StoreFull", "DurabilityLost", "NotAHome"):
        assert name in bide.__all__ and issubclass(getattr(bide, name), bide.StoreError)


def test_bide_langgraph_is_a_submodule_that_loads_langgraph_only_when_used():
    code = ("import sys, bide, bide.langgraph\n"
            "assert 'langgraph' not in sys.modules, 'import bide loaded LangGraph'\n"
            "assert bide.langgraph.__all__ == ['BideSaver', 'BideTool', 'CallInfo', "
            "'GraphDriver', 'current_call', 'durable_tool', 'durable_tools', 'serve_graphs', "
            "'thread_checkpoints', 'thread_export', 'thread_state']\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


def test_from_bide_langgraph_import_bidesaver():
    need("langgraph.checkpoint.base")
    from bide.engine.langgraph.saver import BideSaver as same  # where the alias points
    from bide.langgraph import BideSaver

    assert BideSaver is same and BideSaver.__name__ == "BideSaver"


def test_the_old_langgraph_path_still_works_with_a_deprecation_warning():
    need("langgraph.checkpoint.base")
    sys.modules.pop("bide.engine.langgraph_saver", None)
    with pytest.warns(DeprecationWarning, match="from bide.langgraph import BideSaver"):
        from bide.engine.langgraph_saver import BideSaver
    assert BideSaver is bide.langgraph.BideSaver


def test_issue_12_surface_names_are_public(tmp_path):
    """Everything the CLI does is reachable from the root (issue 12, item 2)."""
    for name in ("CompactReport", "DoctorReport", "PruneReport", "RecoverReport",
                 "RecoveredRun", "UnknownKey", "Watcher", "check_run_id", "compact",
                 "read_approval_key"):
        assert name in bide.__all__, name
    for method in ("cancel", "fork", "doctor", "prune", "stats", "show", "log", "diff",
                   "export", "run_rows", "checkpoint_rows", "state_at", "intent_rows",
                   "drop_decision", "recover"):
        assert callable(getattr(bide.Engine, method)), method
    with bide.open(tmp_path / "home", durability="fast") as engine:
        assert not hasattr(engine, "skipped")  # recover's report replaced the side channel
    assert issubclass(bide.UnknownKey, bide.RunError)


def test_store_seam_names_are_public():
    assert {"MemoryStore", "Store", "WriteEvent"} <= set(bide.__all__)
    assert "store" in bide.Engine.__init__.__code__.co_varnames  # bide.open(home, store=...)
    store = bide.MemoryStore()
    assert isinstance(store.on_commit(lambda event: None), type(lambda: None))
    store.close()


def test_issue_14_copy_names_are_public():
    """``bide copy`` from Python: ``copy_home``, its report, and its refusal in the tree."""
    assert {"CopyRefused", "CopyReport", "copy_home"} <= set(bide.__all__)
    assert issubclass(bide.CopyRefused, bide.StoreError) and issubclass(bide.CopyRefused,
                                                                         bide.Conflict)
    assert callable(bide.Store.restore) and callable(bide.Store.copy_marker)


def test_issue_15_send_is_public():
    """``bide.Send(node, arg)``: a route's map over items known only at run time."""
    assert "Send" in bide.__all__
    send = bide.Send("search", {"query": "q"})
    assert (send.node, dict(send.arg)) == ("search", {"query": "q"})


def test_issue_15_follow_names_are_public():
    assert {"Event", "FollowTimeout"} <= set(bide.__all__)
    assert issubclass(bide.FollowTimeout, bide.RunError)
    assert "FollowTimeout" in bide.engine.base.errors.__doc__  # drawn in the tree
    assert callable(bide.Engine.follow) and callable(bide.Engine.afollow)
    assert {"seq", "kind", "at", "node", "task", "status", "record"} <= set(
        bide.Event.__dataclass_fields__)


def test_signal_names_are_public():
    assert "SignalRefused" in bide.__all__
    assert issubclass(bide.SignalRefused, bide.RunError)
    assert issubclass(bide.SignalRefused, bide.Conflict)
    assert bide.Status.WAITING_SIGNAL in bide.Status


def test_schedule_names_are_public():
    assert {"Schedule", "ScheduleError", "InvalidSchedule", "UnknownSchedule"} <= set(
        bide.__all__)
    assert issubclass(bide.InvalidSchedule, bide.ScheduleError)
    assert issubclass(bide.InvalidSchedule, ValueError)
    assert issubclass(bide.UnknownSchedule, bide.NotFound)
    assert callable(bide.Engine.schedule) and callable(bide.Engine.unschedule)
    assert {"name", "flow", "spec", "input", "catch_up", "next_due", "last_slot"} <= set(
        bide.Schedule.__dataclass_fields__)


def test_child_run_names_are_public_in_their_branch_of_the_tree():
    from bide.engine.base import errors

    for name in ("ChildFailed", "InvalidChild"):
        assert name in bide.__all__ and issubclass(getattr(bide, name), bide.RunError)
        assert name in errors.__doc__  # drawn in the tree
    assert issubclass(bide.InvalidChild, ValueError)
    assert bide.Status.WAITING_CHILD in bide.Status
    assert callable(bide.engine.run.context.NodeContext.child)


def test_issue_17_pack_names_are_public():
    """bide pack (engine/upkeep/pack.py): the function, its report and its error."""
    from bide.engine.base import errors

    assert {"pack", "PackReport", "PackError"} <= set(bide.__all__)
    assert issubclass(bide.PackError, bide.BideError) and "PackError" in errors.__doc__


def test_issue_18_serve_names_are_public():
    """bide serve (engine/serve/server.py): the server, its error, and 409's error."""
    from bide.engine.base import errors

    assert {"Server", "ServeError", "AlreadyDecided"} <= set(bide.__all__)
    assert issubclass(bide.ServeError, bide.ConfigError) and "ServeError" in errors.__doc__
    assert issubclass(bide.AlreadyDecided, bide.DecisionRefused)
    assert "AlreadyDecided" in errors.__doc__
    assert callable(bide.Server.start) and callable(bide.Server.run)
