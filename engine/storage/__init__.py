"""The store: the ``Store`` seam every backend implements, and everything folded
inside one commit — the derived tables (index, latest state, call references,
attention, schedules, LangGraph threads), a run's lease rules, the change feed,
wake-ups — with the LMDB backend (its layout, hot cache and group commit) and the
in-memory one.

May import: ``base``, ``bide.formats``.
"""
