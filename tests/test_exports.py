"""The public surface is exactly what ``__all__`` lists, sorted (httpx's habit)."""

import bide


def test_all_is_sorted_and_complete():
    assert bide.__all__ == sorted(bide.__all__)
    public = {n for n in dir(bide) if not n.startswith("_")} - {"engine", "formats", "bench", "cli"}
    assert public == set(bide.__all__)


def test_status_values_equal_names():
    names = ["PENDING", "RUNNING", "WAITING_APPROVAL", "NEEDS_RECONCILIATION", "INTERRUPTED",
             "DONE", "FAILED", "CANCELLED"]
    assert [s.value for s in bide.Status] == names
    assert all(s.name == s.value for s in bide.Status)


def test_store_errors_are_exported_under_store_error():
    for name in ("ReadOnlyHome", "StoreFull", "DurabilityLost", "NotAHome"):
        assert name in bide.__all__ and issubclass(getattr(bide, name), bide.StoreError)
