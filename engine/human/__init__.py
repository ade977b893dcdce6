"""Where people come in: decision and signal files in the inbox (and waiting for
them), signed decisions, delivering a decision from outside a worker, what a
decider sees of a tool call in doubt.

May import: ``run``, ``postgres``, ``storage``, ``base``, ``bide.formats``.
"""
