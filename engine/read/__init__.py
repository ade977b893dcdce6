"""Reading runs: what the read commands show (``inspect``), a run's records as
typed events, following a run live, the JSON scripts get.

May import: ``human``, ``run``, ``postgres``, ``storage``, ``base``, ``bide.formats``.
"""
