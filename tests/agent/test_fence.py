"""The fence (``zen.agent.fence``): a VM cut off from Pub/Sub while its job runs stops the job itself
before Zen takes the attempt for lost and runs the job elsewhere. Its job ran on beside the next
attempt: the STOP Zen sends the lost attempt never reached it. Real jobs, a fake
Pub/Sub transport whose publishes fail for spans of the agent's manual clock."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.agent.fakes import FakeTransport, confirm_claims
from tests.agent.helpers import alive, job_command
from tests.agent.test_agent_loop import VM, make_agent, start_message
from zen.agent.settings import AgentSettings
from zen.agent.staging import AttemptData, Cancelled
from zen.agent.transport import ControlDelivery, TransportError
from zen.core.config import load_config
from zen.core.errors import ConfigError
from zen.core.models import AgentStatus, ControlAction, ControlMessage, Heartbeat, InputSpec

FINAL = (AgentStatus.SUCCEEDED, AgentStatus.FAILED, AgentStatus.STOPPED, AgentStatus.PREEMPTED)
SAYS_WHY = r"no heartbeat reached Zen for (\d+) s \(it would have taken the job for lost and run it elsewhere\)"


class Partition(FakeTransport):
    """Zen confirms every claim. Publishes fail within ``windows``: spans (from, to) of the agent's
    clock, in seconds after the first message ``after`` accepts went through (``began``). Its control
    waits take no time on the agent's clock until ``ready()`` (the job is up). ``tried``: every
    publish, with when."""

    def __init__(self, windows=((0.0, math.inf),), after=lambda m: m.status is AgentStatus.CLAIMED,
                 ready=lambda: True):
        super().__init__(VM)
        self.answer = confirm_claims(VM)
        self.windows, self.after, self.ready = windows, after, ready
        self.began: float | None = None
        self.tried: list[tuple[float, object]] = []
        self.on_accepted = lambda message: None

    def publish(self, message, *, budget_s, **abandon):
        now = self.clock()
        self.tried.append((now, message))
        if self.began is not None and any(self.began + a <= now < self.began + b for a, b in self.windows):
            raise TransportError("network partition")
        super().publish(message, budget_s=budget_s)
        if self.began is None and isinstance(message, Heartbeat) and self.after(message):
            self.began = now
        self.on_accepted(message)

    def next_control(self, timeout_s):
        if not self.controls and not self.ready():
            time.sleep(0.005)
            return None
        return super().next_control(timeout_s)

    def final(self) -> tuple[float, Heartbeat]:
        """The final report's first try (one not sent is tried again from the journal: the same report)."""
        tries = [(at, m) for at, m in self.tried if isinstance(m, Heartbeat) and m.status in FINAL]
        assert tries and all(m.seq == tries[0][1].seq for _, m in tries), tries
        return tries[0]

    def running(self, accepted: bool) -> list[float]:
        """When RUNNING heartbeats were tried, those that went through (``accepted``) or not."""
        published = {id(m) for m in self.published}
        return [at for at, m in self.tried if isinstance(m, Heartbeat) and m.status is AgentStatus.RUNNING
                and (id(m) in published) == accepted]


def settings(tmp_path, **fields) -> AgentSettings:
    return AgentSettings(**{"heartbeat_s": 5, "stop_grace_s": 1, "poll_s": 0.05, "claim_timeout_s": 5,
                            "lease_s": 10, "vm_heartbeat_s": 30, "work_dir": str(tmp_path / "work"), **fields})


@pytest.mark.parametrize("timeout_s, fence_s", [(120.0, 104.0), (60.0, 44.0)])
def test_a_job_whose_heartbeats_stop_reaching_zen_is_stopped_before_zen_takes_it_for_lost(tmp_path, timeout_s,
                                                                                            fence_s):
    """Publishes fail from just after CONFIRM (the CLAIMED went through): the agent stops the job (SIGTERM)
    ``fence_s`` after it, timeout - grace - 15 s, its grace done 10 s and more before Zen's deadline,
    and its final report says why. Zen's deadline is the configuration's (``zen.agent.__main__``)."""
    pidfile, trace = tmp_path / "pid", tmp_path / "trace"
    transport = Partition(ready=trace.exists)
    transport.add_start(start_message(command=job_command("--pidfile", str(pidfile), "--append", str(trace), "j1",
                                                          "--sleep", "8")))
    zens = {"heartbeat_timeout_s": timeout_s} if timeout_s != 120 else {}  # 120: the default
    agent = make_agent(transport, settings(tmp_path, **zens))
    began = time.monotonic()

    assert agent.run() == 0

    assert time.monotonic() - began < 5  # not the job's 8 s: it was stopped
    assert not alive(int(pidfile.read_text())) and "j1 end" not in trace.read_text()  # SIGTERM'd mid-sleep
    stopped_at, final = transport.final()
    assert (final.status, final.exit_code) == (AgentStatus.PREEMPTED, 143)
    assert re.search(f"zen: stopped: {SAYS_WHY}", final.message), final.message
    silent = stopped_at - transport.began
    assert fence_s <= silent <= fence_s + 1 and silent + agent.settings.stop_grace_s < timeout_s - 10
    assert transport.running(accepted=False) and not transport.running(accepted=True)


def test_a_partition_shorter_than_the_fence_stops_nothing_and_the_fence_counts_from_the_last_heartbeat(tmp_path):
    """Publishes fail for 90 s from CONFIRM (the fence: 104 s), then go through again; the job runs on.
    Cut off again 300 s after CONFIRM, it is stopped 104 s after its last heartbeat that went through,
    not 104 s after the first partition began."""
    pidfile = tmp_path / "pid"
    transport = Partition(windows=((0.0, 90.0), (300.0, math.inf)), ready=pidfile.exists)
    alive_when_healed: list[bool] = []
    transport.on_accepted = lambda m: (
        not alive_when_healed and transport.began is not None and isinstance(m, Heartbeat)
        and m.status is AgentStatus.RUNNING and alive_when_healed.append(alive(int(pidfile.read_text()))))
    transport.add_start(start_message(command=job_command("--pidfile", str(pidfile), "--sleep", "8")))
    agent = make_agent(transport, settings(tmp_path))

    assert agent.run() == 0

    assert alive_when_healed == [True]  # the first partition, 90 s, stopped nothing
    failed, accepted = transport.running(accepted=False), transport.running(accepted=True)
    assert any(at - transport.began < 90 for at in failed) and any(90 <= at - transport.began < 300 for at in accepted)
    stopped_at, final = transport.final()
    assert final.status is AgentStatus.PREEMPTED and re.search(SAYS_WHY, final.message), final.message
    last = max(accepted)
    assert 104 <= stopped_at - last <= 105 and stopped_at - transport.began > 300 + 90
    assert not alive(int(pidfile.read_text()))


@pytest.mark.parametrize("what", ["staging inputs", "uploading outputs"])
def test_a_staging_or_an_upload_whose_heartbeats_stop_reaching_zen_is_cut(tmp_path, monkeypatch, what):
    """They heartbeat as the job does: the fence cuts them (Zen runs the job elsewhere), PREEMPTED.
    A staging cut: the job never ran. An upload cut (the job exited 0): PREEMPTED, not SUCCEEDED."""
    def blocks(self, *_):  # until the agent cancels it (an upload is given how the job ended)
        if not self.cancel.wait(6):
            return
        raise Cancelled("cancelled")

    marker = tmp_path / "ran"
    monkeypatch.setattr(AttemptData, "stage" if what == "staging inputs" else "upload", blocks)
    after = ((lambda m: m.status is AgentStatus.CLAIMED) if what == "staging inputs" else
             (lambda m: (m.message or "").startswith("zen: uploading outputs")))
    transport = Partition(after=after)
    data = ({"inputs": [InputSpec(uri="gs://data-bkt/corpus/words.txt")]} if what == "staging inputs" else
            {"outputs": "gs://out-bkt/r"})
    transport.add_start(start_message(command=[sys.executable, "-c", f"open({str(marker)!r}, 'w')"], **data))
    began = time.monotonic()

    assert make_agent(transport, settings(tmp_path)).run() == 0

    assert time.monotonic() - began < 5
    stopped_at, final = transport.final()
    assert final.status is AgentStatus.PREEMPTED
    assert re.search(f"zen: stopped while {what}: {SAYS_WHY}", final.message), final.message
    assert 104 <= stopped_at - transport.began <= 105
    assert marker.exists() == (what == "uploading outputs")


@pytest.mark.parametrize("timeout_s, periods, tuning, fence_s", [
    (60, {"agent_heartbeat_s": 10}, {}, 35.0),  # 60 - the stop grace (10) - 15
    (300, {}, {"ZEN_AGENT_STOP_GRACE_S": "30"}, 255.0),  # a VM's own grace, checked the same
    (3, {"agent_heartbeat_s": 0.5, "stop_grace_s": 0.5}, {}, 1.75),  # the agent tests' stack: 3 - 0.5 - 0.75
    # the demo's: a quarter of the timeout for margin (a fixed 15 s left the floor, 6 s, of Zen's 20 s)
    (20, {"agent_heartbeat_s": 2, "stop_grace_s": 2}, {}, 13.0),
    # too tight for the fence (3 heartbeats of 40 s > 120 - 10 - 15): the agent does not start
    (120, {}, {"ZEN_AGENT_HEARTBEAT_S": "40"}, None),
])
def test_the_fence_comes_from_the_configurations_deadlines(tmp_path, timeout_s, periods, tuning, fence_s):
    raw = json.loads(load_config().model_dump_json())
    raw["deadlines"].update(heartbeat_timeout_s=timeout_s, **periods)
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    env = {"ZEN_CONFIG": str(path), "ZEN_VM_NAME": "vm-1", "ZEN_ZONE": "us-central1-a", "ZEN_CLUSTER": "4xa100-40gb",
           "ZEN_PROJECT": "p", "PATH": "/usr/bin:/bin", **tuning,
           **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    done = subprocess.run([sys.executable, "-m", "zen.agent", "--check"], env=env, capture_output=True, text=True,
                          timeout=60)
    if fence_s is None:
        assert done.returncode == 2 and "the agent's periods do not fit Zen's deadlines" in done.stderr, done.stderr
        assert "heartbeat at most every 31.6667 s" in done.stderr
        return
    checked = json.loads(done.stdout or "{}")
    assert checked.get("settings", {}).get("heartbeat_timeout_s") == timeout_s, done.stderr
    assert checked["fence_s"] == fence_s
    assert checked["settings"]["heartbeat_s"] == float(tuning.get("ZEN_AGENT_HEARTBEAT_S",
                                                                  periods.get("agent_heartbeat_s", 30)))


def test_a_configuration_whose_periods_leave_the_fence_no_room_is_refused_at_load(tmp_path):
    raw = json.loads(load_config().model_dump_json())
    raw["deadlines"]["heartbeat_timeout_s"] = 60  # the default heartbeat (30 s) needs 90 s of fence
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"deadlines.*heartbeat at most every 11\.6667 s, or shorten the stop grace"):
        load_config(path)


class HeardButUnacked(FakeTransport):
    """Every publish fails from the agent's side, yet the first CLAIMED reached Zen (``heard_at``: Zen's
    deadline counts from it), whose CONFIRM comes ``delay_s`` later (its first publish failed; a tick resent it)."""

    def __init__(self, ready, delay_s: float):
        super().__init__(VM)
        self.ready, self.delay_s = ready, delay_s
        self.heard: Heartbeat | None = None
        self.heard_at = math.inf
        self.confirmed = False
        self.tried: list[tuple[float, Heartbeat]] = []

    def publish(self, message, *, budget_s, **abandon):
        if isinstance(message, Heartbeat):
            self.tried.append((self.clock(), message))
            if self.heard is None and message.status is AgentStatus.CLAIMED:
                self.heard, self.heard_at = message, self.clock()
        raise TransportError("deadline exceeded (the message may have been published)")

    def next_control(self, timeout_s):
        if self.heard is not None and not self.confirmed and self.clock() >= self.heard_at + self.delay_s:
            self.confirmed = True
            order = ControlMessage(vm=VM, job_id=self.heard.job_id, attempt=self.heard.attempt,
                                   action=ControlAction.CONFIRM, reason="claim won")
            return ControlDelivery("c-confirm", order.to_bytes(), {"vm": VM, "answers": str(self.heard.seq)},
                                   lambda: None)
        if self.confirmed and not self.ready():  # no time passes on the agent's clock until the job is up
            time.sleep(0.005)
            return None
        return super().next_control(timeout_s)


def test_a_claim_zen_heard_though_its_publish_seemed_to_fail_fences_from_when_it_was_sent(tmp_path):
    """The lease started when the CONFIRM came: 35 s late, the job ran 20 s past Zen's deadline, beside the
    attempt Zen had rerun."""
    pidfile = tmp_path / "pid"
    transport = HeardButUnacked(ready=pidfile.exists, delay_s=35.0)
    transport.add_start(start_message(command=job_command("--pidfile", str(pidfile), "--sleep", "8")))
    agent = make_agent(transport, settings(tmp_path, claim_timeout_s=20))

    agent.run()

    assert transport.confirmed
    stopped_at, final = next((at, m) for at, m in transport.tried if m.status in FINAL)  # then tried again
    assert final.status is AgentStatus.PREEMPTED
    ended_by = stopped_at + agent.settings.stop_grace_s  # SIGKILL at the latest
    assert ended_by < transport.heard_at + agent.settings.heartbeat_timeout_s, final.message
    assert int(re.search(SAYS_WHY, final.message or "").group(1)) >= stopped_at - transport.heard_at - 1


_TICKING = """  # a job that checkpoints on SIGTERM (its handler writes), ticking meanwhile
import signal, sys, time
path = sys.argv[1]
def term(*_):
    with open(path, "a") as out:
        out.write("TERM %f\\n" % time.monotonic())
signal.signal(signal.SIGTERM, term)  # a job checkpointing on SIGTERM, as Zen invites it to
while True:
    with open(path, "a") as out:
        out.write("tick %f\\n" % time.monotonic())
    time.sleep(0.05)
"""


def test_a_job_resumed_after_its_lease_and_grace_ran_out_is_killed_at_once(tmp_path):
    """A VM paused past the attempt's lease and stop grace (stalled; SIGSTOP here), then resumed: Zen may have
    run the attempt elsewhere by then. The job's supervisor began its fence on resume, SIGTERM and a whole grace:
    the job ran 3.9 s beside its rerun, its SIGTERM handler writing (its checkpoint, as Zen invites). Killed at
    once now: the kill was due a grace after the lease ended, whenever the fence runs."""
    from zen.agent.launch import LOOK_S
    from zen.agent.runner import JobSpec, RunningJob

    lease_s, grace_s, pause_s = 1.0, 3.0, 5.0
    ticks = tmp_path / "ticks"
    spec = JobSpec(job_id="resume", attempt=1, command=[sys.executable, "-c", _TICKING, str(ticks)], stop_grace_s=grace_s)
    job = RunningJob.start(spec, local=True, lease_s=lease_s)
    try:
        while not ticks.exists():
            time.sleep(0.02)
        os.killpg(job.pid, signal.SIGSTOP)  # the whole VM paused: supervisor and job (the agent too, in life)
        killed_by = time.monotonic() + lease_s + grace_s  # when the lease's arithmetic has the job dead
        time.sleep(pause_s)
        resumed = time.monotonic()
        assert resumed > killed_by
        os.killpg(job.pid, signal.SIGCONT)
        began = time.monotonic()
        while job.poll() is None and time.monotonic() - began < 10:
            time.sleep(0.02)
        job.outcome()
        lines = [line for line in ticks.read_text().split("\n") if line]
        assert job.fenced()
        # Within a look at the clock (LOOK_S) of its resume, and no SIGTERM: no grace beside its rerun.
        assert [line for line in lines if float(line.split()[1]) > resumed + LOOK_S + 0.5] == []
        assert [line for line in lines if line.startswith("TERM")] == []
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGCONT)
            os.killpg(job.pid, signal.SIGKILL)
