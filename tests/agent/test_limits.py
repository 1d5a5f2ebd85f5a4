"""Per-day pull limits (issue 15): the counting (``DailyPulls`` on a manual clock), where each limit
comes from (variables, the template's instance attributes on a fake metadata server, the
configuration), and the agent loop that retires once a limit is reached."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.agent.fakes import FakeMetadata, FakeTransport, ManualMonotonic, confirm_claims
from tests.agent.helpers import job_command
from zen.agent.agent import Agent
from zen.agent.identity import Identity, MetadataServer
from zen.agent.limits import DAY_S, DailyPulls, PullLimits, resolve_pull_limits
from zen.agent.settings import AgentSettings
from zen.core.config import load_config
from zen.core.errors import ConfigError
from zen.core.models import Heartbeat, StartMessage, VmState

VM = "vm-limited"
IDENTITY = Identity(project="p", vm=VM, cluster="4xa100-40gb", region="us-central1", zone="us-central1-a",
                    from_environment=True)
SETTINGS = AgentSettings(heartbeat_s=0.2, stop_grace_s=1, poll_s=0.02, claim_timeout_s=5, claim_tries=3, lease_s=10,
                         vm_heartbeat_s=0.05)


def pulls(clock: ManualMonotonic, **limits) -> DailyPulls:
    return DailyPulls(PullLimits(**limits), gpus=4, clock=clock)


def run_attempt(counter: DailyPulls, clock: ManualMonotonic, seconds: float) -> None:
    counter.began()
    clock.now += seconds
    counter.ended()


# -- counting ---------------------------------------------------------------------------------------
def test_jobs_are_counted_until_the_limit_and_then_no_more_may_be_taken():
    clock = ManualMonotonic()
    counter = pulls(clock, max_jobs=2)
    run_attempt(counter, clock, 60)
    assert counter.exhausted() is None and counter.jobs() == 1
    run_attempt(counter, clock, 60)
    assert counter.jobs() == 2 and counter.exhausted() == "2 jobs in 24 h (limit 2)"


def test_gpu_hours_are_the_vms_gpus_times_each_attempts_wall_time():
    clock = ManualMonotonic()
    counter = pulls(clock, max_gpu_hours=10)
    run_attempt(counter, clock, 3600)  # 4 GPUs x 1 h
    assert counter.gpu_hours() == pytest.approx(4.0) and counter.exhausted() is None
    clock.now += 600  # idle time between jobs is not counted
    run_attempt(counter, clock, 1800)  # 4 GPUs x 0.5 h
    assert counter.gpu_hours() == pytest.approx(6.0) and counter.exhausted() is None
    run_attempt(counter, clock, 3600)  # past the limit: the attempt that crossed it counted whole
    assert counter.gpu_hours() == pytest.approx(10.0)
    assert counter.exhausted() == "10.00 GPU-hours in 24 h (limit 10)"


def test_the_window_rolls_attempts_older_than_24_hours_no_longer_count():
    clock = ManualMonotonic()
    counter = pulls(clock, max_jobs=3, max_gpu_hours=100)
    run_attempt(counter, clock, 3600)
    clock.now += 12 * 3600
    run_attempt(counter, clock, 3600)
    assert (counter.jobs(), counter.gpu_hours()) == (2, pytest.approx(8.0))
    clock.now += 11 * 3600  # the first ended 24 h ago: it leaves the window exactly then
    assert (counter.jobs(), counter.gpu_hours()) == (1, pytest.approx(4.0))
    run_attempt(counter, clock, 60)
    run_attempt(counter, clock, 60)
    assert counter.jobs() == 3 and counter.exhausted() is not None


def test_once_reached_the_agent_stays_retired_even_when_the_window_rolls_below():
    clock = ManualMonotonic()
    counter = pulls(clock, max_jobs=1)
    run_attempt(counter, clock, 10)
    reason = counter.exhausted()
    clock.now += 2 * DAY_S
    assert counter.jobs() == 0 and counter.exhausted() == reason


def test_without_limits_nothing_is_ever_exhausted_and_an_end_without_a_start_counts_nothing():
    clock = ManualMonotonic()
    counter = pulls(clock)
    counter.ended()
    assert counter.jobs() == 0
    for _ in range(50):
        run_attempt(counter, clock, 3600)
    assert counter.exhausted() is None and counter.limits.describe() == "no limit"


# -- where the limits come from ---------------------------------------------------------------------
def test_settings_read_the_variables_and_refuse_what_is_not_a_limit():
    settings = AgentSettings.from_env({"ZEN_AGENT_MAX_JOBS_PER_DAY": "5", "ZEN_AGENT_MAX_GPU_HOURS_PER_DAY": "12.5"})
    assert (settings.max_jobs_per_day, settings.max_gpu_hours_per_day) == (5, 12.5)
    assert AgentSettings.from_env({"ZEN_AGENT_MAX_JOBS_PER_DAY": " "}).max_jobs_per_day is None
    for name, raw, message in (("ZEN_AGENT_MAX_JOBS_PER_DAY", "2.5", "not a whole number"),
                               ("ZEN_AGENT_MAX_JOBS_PER_DAY", "0", "must be above 0"),
                               ("ZEN_AGENT_MAX_GPU_HOURS_PER_DAY", "nan", "must be above 0"),
                               ("ZEN_AGENT_MAX_GPU_HOURS_PER_DAY", "lots", "not a number")):
        with pytest.raises(ConfigError, match=message):
            AgentSettings.from_env({name: raw})


def test_limits_come_from_the_variables_then_the_template_then_the_configuration():
    cluster = load_config().cluster("4xa100-40gb").model_copy(
        update={"max_jobs_per_vm_day": 7, "max_gpu_hours_per_vm_day": 70.0})
    on_gce = replace(IDENTITY, from_environment=False)
    metadata = FakeMetadata({"instance/attributes/zen-max-jobs-per-day": "3",
                             "instance/attributes/zen-max-gpu-hours-per-day": ""})  # empty: no limit
    try:
        server = MetadataServer(metadata.host)
        assert resolve_pull_limits(AgentSettings(), server, on_gce, cluster) == PullLimits(3, None)
        assert resolve_pull_limits(AgentSettings(max_jobs_per_day=9), server, on_gce, cluster) == PullLimits(9, None)
        # Locally (identity from the environment) the metadata server is never asked.
        asked = len(metadata.requests)
        assert resolve_pull_limits(AgentSettings(), server, IDENTITY, cluster) == PullLimits(7, 70.0)
        assert len(metadata.requests) == asked
        # A template without the attributes: the configuration's.
        del metadata.values["instance/attributes/zen-max-jobs-per-day"]
        del metadata.values["instance/attributes/zen-max-gpu-hours-per-day"]
        assert resolve_pull_limits(AgentSettings(), server, on_gce, cluster) == PullLimits(7, 70.0)
        metadata.values["instance/attributes/zen-max-jobs-per-day"] = "many"
        with pytest.raises(ConfigError, match="instance attribute zen-max-jobs-per-day='many' is not a whole"):
            resolve_pull_limits(AgentSettings(), server, on_gce, cluster)
    finally:
        metadata.close()


# -- the agent loop -------------------------------------------------------------------------------------
def start_message(job_id: str, *extra: str) -> StartMessage:
    return StartMessage(job_id=job_id, attempt=1, cluster="4xa100-40gb", user_id="alice", regions=["us-central1"],
                        command=job_command("--print", f"hello {job_id}", *extra))


def collapsed(states: list[str]) -> list[str]:
    return [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]


def limited_agent(transport: FakeTransport, limits: PullLimits, stop_after_retired_beats: int = 3) -> Agent:
    agent = Agent(IDENTITY, SETTINGS, transport, local=True, clock=transport.clock,
                  pulls=DailyPulls(limits, gpus=4, clock=transport.clock))
    confirm = confirm_claims(VM)

    def answer(message):
        if not isinstance(message, Heartbeat) and transport.vm_states().count("RETIRED") >= stop_after_retired_beats:
            agent.request_shutdown("test over")  # the VM is deleted
        return confirm(message)

    transport.answer = answer
    transport.when_idle = lambda: agent.request_shutdown("pulled with nothing left")
    return agent


def test_after_two_jobs_the_agent_reports_retired_keeps_beating_and_never_pulls_the_third():
    transport = FakeTransport(VM, virtual_time=False)
    third = [transport.add_start(start_message(f"j{n}")) for n in (1, 2, 3)][-1]
    agent = limited_agent(transport, PullLimits(max_jobs=2))

    assert agent.run() == 0

    ended = [(job_id, status) for job_id, _, status, _ in transport.job_reports() if status == "SUCCEEDED"]
    assert ended == [("j1", "SUCCEEDED"), ("j2", "SUCCEEDED")]
    assert [start.ack_id for start in transport.starts] == [third]  # never pulled: left for another VM
    assert agent.stopping and agent.shutdown.reason == "test over"
    states = transport.vm_states()
    assert collapsed(states) == ["IDLE", "BUSY", "IDLE", "BUSY", "RETIRED", "STOPPING"]
    assert states.count("RETIRED") >= 3  # it keeps saying so while it waits to be deleted
    assert agent.jobs_run == 2 and agent.pulls.jobs() == 2


def test_a_job_that_crosses_the_gpu_hour_limit_runs_to_its_end_then_the_agent_retires():
    transport = FakeTransport(VM, virtual_time=False)
    transport.add_start(start_message("long", "--sleep", "0.5"))
    transport.add_start(start_message("next"))
    agent = limited_agent(transport, PullLimits(max_gpu_hours=0.0001), stop_after_retired_beats=1)  # 0.36 GPU-s

    agent.run()

    assert [r[2] for r in transport.job_reports() if r[0] == "long"][-1] == "SUCCEEDED"  # never stopped for it
    assert not [r for r in transport.job_reports() if r[0] == "next"] and len(transport.starts) == 1
    assert collapsed(transport.vm_states())[-2:] == [VmState.RETIRED.value, "STOPPING"]
    assert agent.pulls.gpu_hours() * 3600 >= 4 * 0.5
