"""The ran log (zen.agent.ranlog) on a VM running several jobs at once: two attempts confirmed as the file is due for
its rewrite are both kept. Copied under the slots' lock but written after it, the first thread's rewrite (its copy
without the second attempt) replaced the file after the second thread's line, and an agent restarted then claimed a
copy of the second's start."""

from __future__ import annotations

import os
import threading
import time

from zen.agent import ranlog
from zen.agent.slots import RAN_KEPT, Capacity, Slots


def test_two_attempts_confirmed_at_a_rewrite_are_both_kept(tmp_path, monkeypatch):
    path = ranlog.path_for(tmp_path, "vm-a")
    slots = Slots(Capacity(gpus=2, max_jobs=2))
    slots.remember_in(path)
    for n in range(2 * RAN_KEPT - 1):  # the next attempt confirmed rewrites the file
        slots.running((f"old-{n}", 1))
        slots.ended((f"old-{n}", 1))
    replace = os.replace

    def late(src, dst):  # the first thread's replace comes a little late (a busy disk's fsync, a thread switch)
        if threading.current_thread().name == "A":
            time.sleep(0.3)
        replace(src, dst)

    monkeypatch.setattr(os, "replace", late)
    first = threading.Thread(target=slots.running, args=(("job-a", 1),), name="A")
    first.start()
    time.sleep(0.05)
    second = threading.Thread(target=slots.running, args=(("job-b", 1),), name="B")
    second.start()
    first.join()
    second.join()
    monkeypatch.setattr(os, "replace", replace)
    restarted = Slots()
    restarted.remember_in(path)
    assert restarted.ran(("job-a", 1)) and restarted.ran(("job-b", 1))
