"""Two messages handled at once by two function instances, for the tests of lock orders: each delivery in a thread
of its own, through the functions under functions-framework against a real Postgres. ``cross`` runs the first until
one of the store's statements (``zen.store.db`` hooks), then the second until it waits for a lock the first holds,
then both to their end: two transactions that take the same locks in opposite orders deadlock there every time
(Postgres fails one: its function answers 500)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable


def deliver(fn, target: str, payload: dict, message_id: str, failed: list[str]) -> None:
    """One delivery to a function under functions-framework, as Eventarc makes it; one not acked (a 500: Pub/Sub
    delivers it again later) goes in ``failed`` with the function's answer."""
    response = fn.send(target, payload, message_id=message_id)
    if response.status_code != 200:
        failed.append(f"{message_id}: {response.status_code} {response.get_data(as_text=True)[:300]}")


def until_one_waits_for_a_lock(db, alive: threading.Thread) -> None:
    """Until some transaction of this database waits for a lock (or ``alive`` ends; 10 s at most)."""
    deadline = time.monotonic() + 10
    while alive.is_alive() and time.monotonic() < deadline:
        with db.transaction() as session:
            if session.sql("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                           "AND wait_event_type = 'Lock'")[0]["n"]:
                return
        time.sleep(0.02)


def cross(zen, fn, db, deliveries: dict[str, tuple[str, dict, str]], first: str, statement: str, *,
          before: bool = False, at: Callable[..., bool] = lambda *_: True) -> list[str]:
    """Deliver two messages (``deliveries``: name -> (function, payload, message id)) at once: ``first`` runs until
    the store runs ``statement`` (just ``before`` it, else just after; the first time ``at`` says yes to its
    arguments), then the other runs until some transaction waits for a lock; then both end. The deliveries not
    acked (``deliver``)."""
    failed: list[str] = []
    threads = {name: threading.Thread(target=deliver, args=(fn, target, payload, message_id, failed))
               for name, (target, payload, message_id) in deliveries.items()}
    [second] = [thread for name, thread in threads.items() if name != first]

    def start_the_second(*args: Any) -> None:
        if threading.current_thread() is threads[first] and not second.ident and at(*args):
            second.start()
            until_one_waits_for_a_lock(db, second)

    (zen.store.hooks.before if before else zen.store.hooks.after)(statement, start_the_second)
    threads[first].start()
    threads[first].join(timeout=30)  # it starts the second before it ends
    if second.ident is not None:
        second.join(timeout=30)
    zen.store.hooks.clear()
    assert second.ident is not None, f"the first delivery never ran {statement}"
    assert not any(thread.is_alive() for thread in threads.values())
    return failed
