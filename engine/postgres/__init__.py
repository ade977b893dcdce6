"""The PostgreSQL backend behind the same ``Store`` seam: URLs, connections, the
store and its reader, ``LISTEN``/``NOTIFY`` wake-ups, following a run, opening a
home. Imported only where a ``postgresql://`` home is used (the ``postgres`` extra).

May import: ``storage``, ``base``, ``bide.formats``.
"""
