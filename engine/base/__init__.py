"""The words and tools every layer shares: the error tree, the vocabulary of
statuses and decisions, fault points for crash tests, optional extras, a home's
permissions, blocking work off an event loop, and text for people.

May import: ``bide.formats`` only (and the standard library).
"""
