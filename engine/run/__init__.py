"""Running flows: flows and their nodes, the executor and its supersteps, tasks
and sibling threads, ``ctx`` (tools and the intent log, held outcomes, approvals
and questions a run asks, timers, signals, child runs, sends), schedules, state
ops, policy, where a run stands (``run_view``), lease renewal and tracing.
``host`` names what this and higher layers use of the Engine, as a protocol.

May import: ``postgres``, ``storage``, ``base``, ``bide.formats``.
"""
