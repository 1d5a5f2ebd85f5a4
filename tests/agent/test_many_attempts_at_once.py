"""Many short attempts on one VM running several at once (``max_jobs_per_vm``), with STOPs coming while they run and
after they ended, and threads switching as often as Python lets them: no GPU is ever held by two attempts at once,
every slot comes back, each attempt's reports rise in ``seq``, each attempt sends one final report, every one is
counted, and the journal of final reports is empty at the end. Real loop and runner (local mode), fake transport."""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import replace

import pytest

from tests.agent.fakes import FakeTransport
from tests.agent.test_slots import IDENTITY, SETTINGS, VM
from zen.agent.agent import Agent
from zen.agent.journal import JOURNAL_DIR
from zen.agent.slots import Capacity, Key, Slots
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat, StartMessage

JOBS = 24


class Requeued(FakeTransport):
    """A start given back (no room for its GPUs now) comes again, as Pub/Sub redelivers it."""

    def nack(self, delivery):
        super().nack(delivery)
        if delivery.offer is None:
            self.starts.append(delivery)


class Watched(Slots):
    """``Slots`` that fail any attempt given a GPU another holds (checked as each slot is taken)."""

    def __init__(self, capacity: Capacity):
        super().__init__(capacity)
        self.twice: list[tuple[Key, tuple[int, ...]]] = []
        self._mine: dict[Key, tuple[int, ...]] = {}
        self._watch = threading.Lock()

    def take(self, key, gpus):
        ids = super().take(key, gpus)
        with self._watch:
            if ids and {i for held in self._mine.values() for i in held} & set(ids):
                self.twice.append((key, ids))
            if ids is not None:
                self._mine[key] = ids
        return ids

    def give_back(self, key):
        with self._watch:
            self._mine.pop(key, None)
        super().give_back(key)


def final(message: Heartbeat) -> bool:
    return message.status not in (AgentStatus.CLAIMED, AgentStatus.RUNNING)


@pytest.fixture
def switching():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_many_short_attempts_at_once_keep_their_gpus_slots_seqs_and_final_reports(tmp_path, switching, seed):
    rnd = random.Random(seed)
    transport = Requeued(VM, virtual_time=False)
    for n in range(JOBS):
        transport.add_start(StartMessage(
            job_id=f"j{n}", attempt=1, cluster="8xa100-40gb", user_id="alice", regions=["us-central1"],
            gpus=rnd.choice([1, 1, 2, 4]), command=["sh", "-c", f"sleep 0.0{rnd.randint(0, 5)}"]))
    stopped = {f"j{n}" for n in range(JOBS) if rnd.random() < 0.3}

    def scheduler(message):  # confirms every claim; STOPs some attempts as they run, and every one as it ends
        if not isinstance(message, Heartbeat):
            return []
        action = {AgentStatus.CLAIMED: ControlAction.CONFIRM}.get(message.status, ControlAction.STOP)
        if message.status is AgentStatus.RUNNING and message.job_id not in stopped:
            return []
        return [ControlMessage(vm=VM, job_id=message.job_id, attempt=1, action=action, reason="test")]

    transport.answer = scheduler
    slots = Watched(Capacity(gpus=8, max_jobs=4))
    agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(tmp_path)), transport, local=True, slots=slots)
    deadline = time.monotonic() + 30
    transport.when_idle = lambda: (agent.jobs_run >= JOBS or time.monotonic() > deadline) and agent.request_shutdown(
        "test over")
    assert agent.run() == 0

    reports = [m for m in transport.published if isinstance(m, Heartbeat)]
    finals = Counter(m.job_id for m in reports if final(m))
    assert finals == Counter({f"j{n}": 1 for n in range(JOBS)}) and agent.jobs_run == JOBS
    assert slots.twice == []
    assert (slots.held(), slots.claiming(), slots.full()) == ([], False, False)
    seqs: dict[str, list[int]] = defaultdict(list)
    for report in reports:
        seqs[report.job_id].append(report.seq)
    assert {job_id: s for job_id, s in seqs.items() if s != sorted(set(s))} == {}
    everything = [m.seq for m in transport.published]
    assert len(set(everything)) == len(everything)
    assert os.listdir(tmp_path / JOURNAL_DIR / VM) == []
