"""A queue taking its quota back from a job whose outputs are being uploaded (the job has ended, exit 0): Zen waits
for the VM while it says it runs (``zen.core.lifecycle.decide_heartbeat``: a preempted job's deadline counts from
its VM's last RUNNING), and answers each RUNNING heartbeat with a STOP whose ``answer_within_s`` is that wait again.
The agent held to the first STOP's deadline: it cut the upload 115 s after it, and reported the job that had ended
0 STOPPED, which Zen reran from the start (a queue's preemption reruns what did not succeed); likewise a stopped job's
last checkpoint save was cut, and its rerun resumed from the one before. A gang's node stopped because a peer failed
is waited for so too, but its STOPs' reason is no preemption's: only their ``answer_moves`` says the wait moves
(``zen.core.stops``). Real job, the Cloud Storage stand-in (the upload held), a fake Pub/Sub answering as Zen does,
on the agent's virtual clock (no waiting)."""

from __future__ import annotations

import sys

from tests.agent.fakes import FakeTransport
from tests.agent.test_agent_loop import VM, make_agent, start_message
from tests.agent.test_staging import client, objects  # noqa: F401 (fixture)
from tests.agent.test_upload_end import finals, settings, uploading
from zen.agent.transport import ControlDelivery
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat
from zen.core.stops import MOVES

PREEMPTED_STOP_S = 120.0  # Deadlines.preempted_stop_s by default
TAKEN_BACK = "preempted: queue prod takes back lent quota"
WRITES = "import os, pathlib; pathlib.Path(os.environ['ZEN_OUTPUT_DIR'], 'result').write_text('r')"


def _stop(within: float, reason: str, **attributes: str) -> ControlDelivery:
    order = ControlMessage(vm=VM, job_id="up", attempt=1, action=ControlAction.STOP, reason=reason)
    return ControlDelivery(f"c-{id(order)}", order.to_bytes(),
                           {"vm": VM, "answer_within_s": f"{within:.0f}", **attributes}, lambda: None)


def _run(tmp_path, storage, user_stop_at: float | None = None, reason: str = TAKEN_BACK,
         moves: bool | None = None) -> tuple[Heartbeat, FakeTransport]:
    """The job ends 0 and its upload is held; its queue preempts it then (or, with ``reason``, a peer of the gang
    it is a node of fails), and Zen keeps answering RUNNING with a fresh STOP (its user's stop, at ``user_stop_at`` s
    after the first STOP, fixes the deadline: stop_timeout_s, 120 s, whatever a preemption's STOP delivered again
    after it says). The upload goes on 200 s after the first STOP. ``moves``: the STOPs carry ``answer_moves`` as
    Zen sets it (the moving wait's "1", the user's "0"); None: without it, as an older Zen's."""
    told = {} if moves is None else {MOVES: "1" if moves else "0"}

    def stop(within: float) -> ControlDelivery:
        return _stop(within, reason, **told)

    held = storage.state.hold("result", "store")
    transport = FakeTransport(VM)  # virtual time: waiting for a control message moves the clock, at once
    at: dict[str, float] = {}

    def zen(message):
        if not isinstance(message, Heartbeat) or message.status is not AgentStatus.RUNNING or not uploading(message):
            return [ControlMessage(vm=VM, job_id="up", attempt=1, action=ControlAction.CONFIRM, reason="won")] if (
                isinstance(message, Heartbeat) and message.status is AgentStatus.CLAIMED) else []
        now = transport.clock()
        since = now - at.setdefault("stop", now)
        if since >= 200:
            held.release.set()
        if user_stop_at is not None and since >= user_stop_at:
            user = at.setdefault("user", now)
            return [_stop(PREEMPTED_STOP_S - (now - user), "not needed after all", **({MOVES: "0"} if told else {})),  # and the preemption's, again:
                    stop(PREEMPTED_STOP_S)]  # Pub/Sub redelivers
        return [stop(PREEMPTED_STOP_S)]  # from this RUNNING on

    transport.answer = zen
    transport.add_start(start_message("up", command=[sys.executable, "-c", WRITES], outputs="gs://out-bkt/r"))
    try:
        make_agent(transport, settings(tmp_path, heartbeat_s=10)).run()
    finally:
        held.release.set()
    return finals(transport)["up"], transport


def test_a_preempted_jobs_upload_goes_on_while_zen_waits_for_it(client, storage, tmp_path):  # noqa: F811
    final, _ = _run(tmp_path, storage)

    assert (final.status, final.exit_code) == (AgentStatus.SUCCEEDED, 0), final.message
    assert objects(client, "out-bkt") == {"r/up/attempt-1/result": b"r"}


def test_a_users_stop_during_the_preemption_still_ends_the_upload_by_its_deadline(client, storage, tmp_path):  # noqa: F811
    final, _ = _run(tmp_path, storage, user_stop_at=50)

    assert (final.status, final.exit_code) == (AgentStatus.STOPPED, 0), final.message
    assert "cut when Zen's stop deadline came" in final.message


def test_a_gang_nodes_upload_goes_on_while_zen_waits_for_it_after_a_peer_failed(client, storage, tmp_path):  # noqa: F811
    """A gang's node stopped because another node failed (or was lost with the gang's attempts spent): its STOPs'
    reason is no preemption's, yet Zen waits for it from its last RUNNING, as its STOPs say (``answer_moves``). The
    agent held to the first STOP's deadline: it cut the upload (or the checkpoint's last save) Zen still waited for."""
    final, _ = _run(tmp_path, storage, reason="node 1 (vm-b) failed", moves=True)

    assert (final.status, final.exit_code) == (AgentStatus.SUCCEEDED, 0), final.message
    assert objects(client, "out-bkt") == {"r/up/attempt-1/result": b"r"}


def test_a_users_stop_of_a_gang_losing_a_node_still_ends_the_upload_by_its_deadline(client, storage, tmp_path):  # noqa: F811
    final, _ = _run(tmp_path, storage, user_stop_at=50, reason="node 1 (vm-b) failed", moves=True)

    assert (final.status, final.exit_code) == (AgentStatus.STOPPED, 0), final.message
    assert "cut when Zen's stop deadline came" in final.message


def test_a_users_stop_of_a_preempted_job_still_ends_the_upload_by_its_deadline(client, storage, tmp_path):  # noqa: F811
    final, _ = _run(tmp_path, storage, user_stop_at=50, moves=True)  # the preemption's STOPs say "1" (redelivered too)

    assert (final.status, final.exit_code) == (AgentStatus.STOPPED, 0), final.message
    assert "cut when Zen's stop deadline came" in final.message
