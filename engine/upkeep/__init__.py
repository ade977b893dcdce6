"""Looking after a home from outside a worker: doctor and prune, compaction,
cancel and fork, the home's config and files, packing an app, walking the log
one run at a time.

May import: ``read``, ``human``, ``run``, ``postgres``, ``storage``, ``base``,
``bide.formats``.
"""
