"""A job's secrets are read within one budget, all of them together (``zen.agent.secrets.BUDGET_S``): Secret
Manager answering slowly, each read within the client's timeout but many of them, must not hold the attempt
past it: the attempt is given back (PREEMPTED, no attempt spent) rather than held for as long as the service is slow
(it heartbeats meanwhile: test_secrets_heartbeat.py). Real reads through the official
client against the stand-in; the service's slowness is a clock moved on by each read."""

from __future__ import annotations

import pytest

from tests.agent.test_secrets import HF, TOKEN, FakeTime, secret_manager  # noqa: F401 (a fixture)
from zen.adapters.secret_manager import CALL_TIMEOUT_S, secret_client, secret_reader
from zen.agent.secrets import BUDGET_S, SecretsFailed, resolve
from zen.core.models import AgentStatus

SLOW_READ_S = 9.0  # each read answered, within the client's 10 s timeout


def test_slow_reads_past_the_budget_requeue_the_attempt_instead_of_holding_it(secret_manager):  # noqa: F811
    time = FakeTime()
    read = secret_reader(lambda location: secret_client(secret_manager.endpoint, location))

    def slow(reference: str) -> bytes:
        data = read(reference)
        time.now += SLOW_READ_S
        return data

    references = {f"TOKEN_{n:02d}": HF for n in range(16)}
    with pytest.raises(SecretsFailed) as failed:
        resolve(references, slow, clock=time.clock, sleep=time.sleep)

    assert failed.value.status is AgentStatus.PREEMPTED
    assert time.now <= BUDGET_S + CALL_TIMEOUT_S  # one read under way as the budget ends, no more
    assert failed.value.note == (f"zen: secret TOKEN_04: {HF}: Secret Manager too slow: the job's secrets were not "
                                 f"all read within {BUDGET_S:.0f} s (requeued)")


def test_reads_within_the_budget_give_every_value(secret_manager):  # noqa: F811
    time = FakeTime()
    read = secret_reader(lambda location: secret_client(secret_manager.endpoint, location))

    def slow(reference: str) -> bytes:
        data = read(reference)
        time.now += SLOW_READ_S
        return data

    assert resolve({"A": HF, "B": HF, "C": HF}, slow, clock=time.clock, sleep=time.sleep) == {
        "A": TOKEN, "B": TOKEN, "C": TOKEN}
