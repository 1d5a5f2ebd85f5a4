"""A VM kept busy with short jobs that stage inputs and upload outputs: each attempt's Cloud Storage client is closed
with its directory (``AttemptData.cleanup``). Left to the garbage collector, its connections stayed open until a full
collection happened to run: a few sockets more per attempt, on a VM that runs thousands over days. The agent runs in
this process (local mode, the real runner) against the Cloud Storage stand-in, the collector held off meanwhile."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from dataclasses import replace

from google.cloud import storage as gcs

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.helpers import wait_for
from tests.agent.test_agent_loop import IDENTITY, SETTINGS, VM, start_message
from zen.agent.agent import Agent

ATTEMPTS = 12
WRITE = "import os; open(os.path.join(os.environ['ZEN_OUTPUT_DIR'], 'o.txt'), 'w').write('x')"


def open_sockets() -> int:
    return sum(os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
               for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}"))


def test_each_attempts_storage_connections_are_closed_with_it(storage, tmp_path):
    client = gcs.Client()
    client.create_bucket("data-bkt")
    client.create_bucket("out-bkt")
    client.bucket("data-bkt").blob("in/a.txt").upload_from_string(b"hello\n")
    transport = FakeTransport(VM, virtual_time=False)
    transport.answer = confirm_claims(VM)
    for number in range(ATTEMPTS):
        transport.add_start(start_message(f"short-{number}", command=[sys.executable, "-c", WRITE],
                                          inputs=[{"uri": "gs://data-bkt/in/a.txt"}], outputs="gs://out-bkt/runs"))
    agent = Agent(IDENTITY, replace(SETTINGS, work_dir=str(tmp_path / "work")), transport, local=True)
    held: list[int] = []
    before = 0

    def idle() -> None:  # every start taken and run: the sockets the agent holds as it waits for the next
        with contextlib.suppress(AssertionError):  # the stand-in's ends of the last connections, once it closed them
            wait_for(lambda: open_sockets() - before <= 4, 10, what="the attempts' connections closed")
        held.append(open_sockets())
        agent.request_shutdown("test over")

    transport.when_idle = idle
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()  # what the collector would free at some later time is not counted as freed
    try:
        before = open_sockets()  # the stand-in's, and the client's above
        assert agent.run() == 0
    finally:
        if collecting:
            gc.enable()

    assert agent.jobs_run == ATTEMPTS
    assert [r[2] for r in transport.job_reports() if r[2] not in ("CLAIMED", "RUNNING")] == ["SUCCEEDED"] * ATTEMPTS
    assert client.bucket("out-bkt").blob(f"runs/short-{ATTEMPTS - 1}/attempt-1/o.txt").download_as_bytes() == b"x"
    # At most the stand-in's own and one attempt's; each attempt's left open added 4 (both ends, in this process).
    assert held[0] - before <= 4, (before, held)
