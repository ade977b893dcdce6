"""The public surface is exactly what ``__all__`` lists, sorted (httpx's habit)."""

import bide


def test_all_is_sorted_and_complete():
    assert bide.__all__ == sorted(bide.__all__)
    subpackages = {"engine", "formats", "bench", "cli", "tests"}  # tests: the torture harness
    public = {n for n in dir(bide) if not n.startswith("_")} - subpackages
    assert public == set(bide.__all__)


def test_status_values_equal_names():
    names = ["PENDING", "RUNNING", "WAITING_APPROVAL", "NEEDS_RECONCILIATION", "INTERRUPTED",
             "DONE", "FAILED", "CANCELLED"]
    assert [s.value for s in bide.Status] == names
    assert all(s.name == s.value for s in bide.Status)


def test_issue_11_names_are_public_in_their_branch_of_the_tree():
    from bide.engine import errors

    branches = {"ContextClosed": bide.ToolError, "ToolNeedsAwait": bide.ToolError,
                "UnknownStatus": bide.RunError, "UnknownVersion": bide.RunError}
    for name, branch in branches.items():
        assert name in bide.__all__ and issubclass(getattr(bide, name), branch)
        assert name in errors.__doc__  # drawn in the tree
    assert issubclass(bide.UnknownStatus, ValueError)
    assert callable(bide.Engine.astart) and callable(bide.Engine.aresume)
    assert callable(bide.Engine.adecide) and callable(bide.Engine.asubmit)


def test_record_errors_are_exported_under_record_error():
    for cls in (bide.CorruptRecord, bide.CorruptIndex, bide.NewerSchema):
        assert issubclass(cls, bide.RecordError) and issubclass(cls, bide.BideError)
    assert issubclass(bide.StateNotSerializable, bide.NotSerializable)


def test_store_errors_are_exported_under_store_error():
    for name in ("ReadOnlyHome", "StoreFull", "DurabilityLost", "NotAHome"):
        assert name in bide.__all__ and issubclass(getattr(bide, name), bide.StoreError)
