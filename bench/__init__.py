"""``bide bench``: what bide's durability costs, measured against baselines in one run.

- ``kit/``: what every area uses — workloads, policies, the in-memory and bare-LMDB
  baselines, the crash kit, the throwaway PostgreSQL server;
- one module per ``bide bench`` area: ``suite`` (granularity, and ``all``), ``peers``
  (LangGraph on the same workloads), ``layout`` (``reads`` and ``physical``),
  ``postgres`` (PostgresSaver and DBOS on one server; ``pg_throughput``), ``watch``,
  ``pg_wake``, ``mapping`` (``map``), ``follow``, ``timers``, ``serve``;
- measurements run with ``python -m bide.bench.<name>``: ``concurrency``,
  ``tool_calls``, ``latency``, ``children``, ``gil_handoff``, ``maintenance_memory``,
  ``tracing_cost``;
- ``command`` (the click command) and ``report`` (its tables, verdicts and plot),
  ``demo``/``demo_app`` (``bide demo``), ``torture``.

Each module says at its top what it measures and against what; areas import the
kit, never the reverse (``tests/test_layers.py``).
"""
