"""An agent's own VM heartbeat period (``ZEN_AGENT_VM_HEARTBEAT_S``, terraform's ``agent_env``) against the silence
after which Zen's scaling pass deletes an idle VM as gone (``deadlines.agent_silence_s``: three of the
configuration's ``vm_heartbeat_s``, at least ``heartbeat_timeout_s``). The agent took any period: with
``ZEN_AGENT_VM_HEARTBEAT_S=300`` under the default configuration (180 s of silence), every idle VM, a ``min_vms``
one too, was deleted between two of its heartbeats and booted again; with 90, after one heartbeat lost. An agent
whose period does not fit three times within that silence does not start, naming both settings and what to set."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.scaling.fakes import FakeFleet, RecordingMig
from zen.agent.settings import AgentSettings, with_deadlines
from zen.core.config import ClusterConfig, Deadlines, load_config
from zen.core.errors import ConfigError
from zen.scaling.manager import ClusterManager
from zen.scaling.model import DemandGroup
from zen.scaling.planner import ZenPlanner
from zen.scaling.port import FleetFacts, MigInstance
from zen.scaling.timing import timing_from_config

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)
REGION = "us-central1"


def _pass_deletes(heard_s_ago: float) -> list[str]:
    """The VMs one scaling pass (the default configuration's timings) deletes, of one idle VM whose agent was last
    heard ``heard_s_ago``, a queued job wanting a VM (so the idle VM is supply, not idle beyond need)."""
    calls: list = []
    vm = MigInstance("vm1", f"{REGION}-a", "NONE", "RUNNING", None)
    migs = {REGION: RecordingMig(REGION, calls, 1, [vm])}
    heard = NOW - timedelta(seconds=heard_s_ago)
    agent = {"state": "IDLE", "idle_since": NOW - timedelta(hours=2), "last_seen_at": heard}
    facts = FleetFacts((DemandGroup((REGION,), 1, NOW - timedelta(minutes=5)),), {}, {"vm1": agent}, {}, 0)
    cluster = ClusterConfig(name="c", gpu_type="nvidia-tesla-a100", gpu_count=1, regions=[REGION],
                            max_vms_per_region=4, max_vms=4)
    manager = ClusterManager(cluster, FakeFleet(facts, NOW - timedelta(hours=3)), migs, lambda: NOW,
                             timing_from_config(load_config()), ZenPlanner(), telemetry=False)
    manager.run()
    return [name for call in calls if call[0] == "delete_instances" for name in call[2]]


@pytest.mark.parametrize("period_s", [20, 60, 90, 300])
def test_an_idle_vm_beating_at_any_period_its_agent_accepts_outlives_two_lost_heartbeats(period_s):
    deadlines = load_config().deadlines  # the default: 60 s VM heartbeats, 120 s heartbeat_timeout_s: 180 s of silence
    env = {"ZEN_AGENT_VM_HEARTBEAT_S": str(period_s)}
    try:
        settings = with_deadlines(AgentSettings.from_env(env), deadlines, env)
    except ConfigError as refused:
        assert period_s * 3 > deadlines.agent_silence_s
        text = str(refused)
        assert f"ZEN_AGENT_VM_HEARTBEAT_S={period_s}" in text and "deadlines.vm_heartbeat_s=60" in text
        assert "set ZEN_AGENT_VM_HEARTBEAT_S at most 60, or deadlines.vm_heartbeat_s at least" in text
        return
    assert settings.vm_heartbeat_s == period_s
    # Its last VM heartbeat a second short of three periods ago: the next two were lost (or it is due now).
    assert _pass_deletes(3 * settings.vm_heartbeat_s - 1) == [], "an idle VM deleted between its agent's heartbeats"


def test_a_pass_deletes_an_idle_vm_unheard_past_the_silence():
    """What the refusal prevents: the default configuration's pass deletes an idle VM unheard for 181 s, which an
    agent beating every 300 s is between two of its heartbeats."""
    assert _pass_deletes(170) == []
    assert _pass_deletes(181) == ["vm1"]


def test_a_longer_vm_heartbeat_fits_once_the_configuration_allows_its_silence():
    for deadlines, period in ((Deadlines(vm_heartbeat_s=300), "300"), (Deadlines(heartbeat_timeout_s=600), "200")):
        env = {"ZEN_AGENT_VM_HEARTBEAT_S": period}
        assert with_deadlines(AgentSettings.from_env(env), deadlines, env).vm_heartbeat_s == float(period)
    env = {"ZEN_AGENT_VM_HEARTBEAT_S": "201"}
    with pytest.raises(ConfigError, match=r"ZEN_AGENT_VM_HEARTBEAT_S=201 .* 600 s .*at most 200, or "
                                          r"deadlines.vm_heartbeat_s at least 201"):
        with_deadlines(AgentSettings.from_env(env), Deadlines(heartbeat_timeout_s=600), env)
