"""What every benchmark area uses: the workloads and policies it runs, the baselines it
measures against (a flow run in memory, a bare LMDB loop), the crash kit that kills
workers and counts effects outside the store, and the throwaway PostgreSQL server.

The areas themselves are the modules of ``bide.bench`` (one per ``bide bench`` area or
``python -m bide.bench.<name>`` measurement); they import from here, never the reverse.
"""
