"""The torture harness: crash bide on purpose, recover, count what broke.

Test infrastructure, not product: ``torture`` (the fork pool, trials, invariants,
the tally), ``workloads`` (the flows, the operator that drives a run to its end)
and ``corpus`` (hostile inbox files). ``bide torture`` reaches it lazily from a
source checkout, as ``bide.tests.torture.harness``.
"""
