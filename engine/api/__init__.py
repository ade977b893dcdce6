"""The Engine: ``bide.open(home)`` and every method the public API and the CLI
call, composed from the layers below (``surface`` fronts read, upkeep and the
inbox doors).

May import: every layer below (``upkeep`` down to ``base``), ``bide.formats``.
"""
