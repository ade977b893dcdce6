"""Run the agent of ``apps/lg_agent_app.py`` as its script does, choosing LangGraph's
``durability`` and, to reproduce a bug on purpose, a slow checkpoint write.

usage: lg_crash_kit.py HOME EFFECTS start|resume THREAD DURABILITY SLOW_PUT

DURABILITY is LangGraph's ``invoke(durability=...)`` ("sync", "async", "exit") or
"default" (not passed: LangGraph's default, "async"). SLOW_PUT delays every checkpoint
put after the graph's input by that many seconds (0: none), as a slow disk or a busy
machine does; under "async" the next step's tools then run before the checkpoint
their LangGraph task ids are derived from is durable (tests/test_langgraph_crash.py,
``test_bug_*``). Prints ``STOPPED <status>`` as the app does.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import lg_agent_app
from bide.langgraph import BideSaver


class SlowSaver(BideSaver):
    """A BideSaver whose checkpoints after the input land ``delay`` seconds late."""

    delay = 0.0

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if self.delay and (metadata or {}).get("step", -1) >= 1:
            time.sleep(self.delay)
        return super().put(config, checkpoint, metadata, new_versions)


def main(argv: list[str]) -> int:
    home, effects, mode, thread, durability, slow = argv[1:7]
    lg_agent_app.EFFECTS = effects  # where the app's tools append their effects
    SlowSaver.delay = float(slow)
    config = {"configurable": {"thread_id": thread}}
    options = {} if durability == "default" else {"durability": durability}
    with SlowSaver.from_home(home) as saver:
        graph = lg_agent_app.agent.copy(update={"checkpointer": saver})
        what = {"messages": [("user", "charge 5, refund 2")]} if mode == "start" else None
        graph.invoke(what, config, **options)
        with saver.threads.store.reader() as r:
            head = r.head(thread)
        print("STOPPED", head.status if head else None, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
