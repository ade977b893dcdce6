"""The read/write gate of a process's LMDB transactions (engine/storage/lmdb_store.py ``_Gate``):
a Ctrl-C while a map resize waits for the other threads' transactions leaves no resize
pending, so the process's next transactions (the run's INTERRUPTED record) go on."""

from __future__ import annotations

import signal
import threading

import pytest
from bide.engine.storage.lmdb_store import _Gate

DEADLINE = 10.0


def test_a_ctrl_c_while_a_resize_waits_for_readers_lets_later_transactions_in():
    gate = _Gate()
    holding, release = threading.Event(), threading.Event()

    def reads() -> None:  # another thread's read snapshot, open while the map must grow
        with gate.shared():
            holding.set()
            release.wait(DEADLINE)

    reader = threading.Thread(target=reads, daemon=True)
    reader.start()
    assert holding.wait(DEADLINE)
    main = threading.main_thread().ident
    assert threading.get_ident() == main  # the Ctrl-C lands in this thread
    ctrl_c = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGINT))
    ctrl_c.start()
    try:
        with pytest.raises(KeyboardInterrupt), gate.exclusive():
            pytest.fail("resized while another thread's transaction was open")
    finally:
        ctrl_c.join(DEADLINE)
        release.set()
        reader.join(DEADLINE)
    entered = threading.Event()

    def next_transaction() -> None:
        with gate.shared():
            entered.set()

    after = threading.Thread(target=next_transaction, daemon=True)
    after.start()
    after.join(DEADLINE)
    assert entered.is_set(), "a transaction waits for a resize the Ctrl-C abandoned"
    with gate.exclusive():  # and a later resize still gets the gate
        pass
