"""One function instance's memory over many submissions (``make bench-control``'s last rows).

Run as a process of its own by ``ControlBench.memory``, so its heap holds what an instance's does and
nothing of the bench's: ``functions/main.py`` loaded by functions-framework as Cloud Functions loads
it (its lazy ``zen()``, ``Zen.from_env``, the freeze after startup), and each submission posted to it
as Eventarc posts one (a structured CloudEvent), from ``threads`` threads at once, each envelope built
just before it is posted. The environment says where Postgres and the Pub/Sub stand-in are
(``ZEN_DATABASE_URL``, ``PUBSUB_EMULATOR_HOST``, ``ZEN_PROJECT``; ``ZEN_SCALING=off``).

Prints one JSON object: the resident set after the first ``warm`` submissions and after all of them,
and the peak (``VmHWM``), in MB.

Usage: python -m benchmarks.memory SUBMISSIONS THREADS [WARM]
"""

from __future__ import annotations

import itertools
import json
import sys
import threading

import functions_framework

from benchmarks.control import submit_event
from zen.core import eventarc
from zen_dev.local.invoke import FUNCTIONS_MAIN


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no {field} in /proc/self/status")


def main(argv: list[str]) -> int:
    total, threads = int(argv[0]), int(argv[1])
    warm = int(argv[2]) if len(argv) > 2 else 1000
    app = functions_framework.create_app("on_job_submitted", str(FUNCTIONS_MAIN), "cloudevent")
    ids, lock = itertools.count(), threading.Lock()
    after_warm: list[float] = []
    failures: list[str] = []

    def post_until_done() -> None:
        client = app.test_client()
        while True:
            with lock:
                n = next(ids)
                if n == warm:
                    after_warm.append(_status_mb("VmRSS"))
            if n >= total:
                return
            body, headers = eventarc.structured_request(submit_event(f"mem-{n}"))
            response = client.post("/", data=body, headers=headers)
            if response.status_code != 200:
                failures.append(f"mem-{n}: {response.status_code}")

    workers = [threading.Thread(target=post_until_done) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(json.dumps({"submissions": total, "threads": threads, "warm": warm,
                      "rss_after_warm_mb": after_warm[0] if after_warm else None,
                      "rss_after_all_mb": _status_mb("VmRSS"), "peak_mb": _status_mb("VmHWM"),
                      "failures": failures[:5], "failed": len(failures)}))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
