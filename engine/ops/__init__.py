"""Keeping runs moving: ``bide watch`` (the watcher, its dispatch, schedule loop,
wake path, log and readiness) and ``bide copy``. They drive an Engine.

May import: ``api`` and everything below it.
"""
