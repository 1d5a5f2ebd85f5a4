"""Who the VM is (environment, or the GCE metadata server), preemption notices, and the tunables."""

from __future__ import annotations

import threading

import pytest

from tests.agent.fakes import FakeMetadata
from tests.agent.helpers import wait_for
from zen.agent.identity import PREEMPTED, IdentityError, MetadataServer, resolve_identity, resolve_tags, watch_notice
from zen.agent.reports import AttemptReport, Reporter
from zen.agent.settings import AgentSettings, with_deadlines
from zen.core.errors import ConfigError
from zen.core.lease import Deadlines
from zen.core.models import AgentStatus, Heartbeat, VmState

LOCAL_ENV = {"ZEN_VM_NAME": "zen-4xa100-40gb-us-central1-x1z2", "ZEN_CLUSTER": "4xa100-40gb",
             "ZEN_REGION": "us-central1", "ZEN_ZONE": "us-central1-a", "ZEN_PROJECT": "p1"}


@pytest.fixture
def metadata():
    fake = FakeMetadata({
        "instance/name": "zen-1xl4-europe-west4-abcd",
        "instance/zone": "projects/123456789/zones/europe-west4-b",
        "instance/attributes/zen-cluster": "1xl4",
        "project/project-id": "my-project",
        "instance/preempted": "FALSE",
    })
    yield fake
    fake.close()


def test_identity_from_the_environment_never_asks_the_metadata_server(metadata):
    identity = resolve_identity(LOCAL_ENV, MetadataServer(metadata.host))
    assert (identity.vm, identity.cluster, identity.region, identity.zone, identity.project) == (
        "zen-4xa100-40gb-us-central1-x1z2", "4xa100-40gb", "us-central1", "us-central1-a", "p1")
    assert identity.from_environment and metadata.requests == []


def test_region_comes_from_the_zone_and_project_from_the_configuration():
    env = {k: v for k, v in LOCAL_ENV.items() if k not in ("ZEN_REGION", "ZEN_PROJECT")}
    identity = resolve_identity(env, None, default_project="zen-local")
    assert identity.region == "us-central1" and identity.project == "zen-local"


def test_without_environment_or_metadata_server_the_missing_variables_are_named():
    with pytest.raises(IdentityError, match="ZEN_VM_NAME, ZEN_CLUSTER"):
        resolve_identity({"ZEN_ZONE": "us-central1-a"}, None)


def test_a_zone_outside_the_region_is_refused():
    with pytest.raises(IdentityError, match="not in region"):
        resolve_identity({**LOCAL_ENV, "ZEN_REGION": "us-west1"}, None)


def test_identity_from_the_metadata_server(metadata):
    identity = resolve_identity({}, MetadataServer.from_env({"GCE_METADATA_HOST": metadata.host}))
    assert (identity.vm, identity.cluster, identity.region, identity.zone, identity.project) == (
        "zen-1xl4-europe-west4-abcd", "1xl4", "europe-west4", "europe-west4-b", "my-project")
    assert not identity.from_environment


def test_environment_fields_override_the_metadata_server(metadata):
    identity = resolve_identity({"ZEN_CLUSTER": "4xa100-40gb", "ZEN_PROJECT": "other"}, MetadataServer(metadata.host))
    assert identity.cluster == "4xa100-40gb" and identity.project == "other" and identity.vm.startswith("zen-1xl4")


def test_tags_come_from_the_template_attribute_on_gce_and_the_environment_first(metadata):
    server = MetadataServer(metadata.host)
    identity = resolve_identity({}, server)
    assert resolve_tags({}, server, identity, ["from-config"]) == ("from-config",)  # no attribute: the config
    metadata.values["instance/attributes/zen-tags"] = "hipaa, gpu-secure"
    assert resolve_tags({}, server, identity, ["from-config"]) == ("gpu-secure", "hipaa")
    metadata.values["instance/attributes/zen-tags"] = ""  # the template says: no groups
    assert resolve_tags({}, server, identity, ["from-config"]) == ()
    assert resolve_tags({"ZEN_VM_TAGS": "x"}, server, identity, ["from-config"]) == ("x",)
    local = resolve_identity(LOCAL_ENV, server)
    asked = len(metadata.requests)
    assert resolve_tags(LOCAL_ENV, server, local, ["hipaa"]) == ("hipaa",) and len(metadata.requests) == asked


def test_tags_no_heartbeat_could_carry_are_dropped():
    """A tag of 42 characters (or not as the configuration names tags) made every job heartbeat of the
    VM fail validation: no report was sent, and its jobs were lost and rerun. No job can require one."""
    local = resolve_identity(LOCAL_ENV, None)
    raw = ",".join(["hipaa", "x" * 42, "Upper", "caf\udce9", "a" * 41])
    assert resolve_tags({"ZEN_VM_TAGS": raw}, None, local, []) == ("a" * 41, "hipaa")
    many = resolve_tags({"ZEN_VM_TAGS": ",".join(f"t{i:03}" for i in range(70))}, None, local, [])
    assert len(many) == 64
    Heartbeat(job_id="j", attempt=1, vm="v", region="r", zone="z", status=AgentStatus.RUNNING, seq=1,
              sent_at="2026-01-01T00:00:00Z", tags=list(many))


def test_a_vm_without_the_cluster_attribute_cannot_start(metadata):
    del metadata.values["instance/attributes/zen-cluster"]
    with pytest.raises(IdentityError, match="zen-cluster"):
        resolve_identity({}, MetadataServer(metadata.host))


def test_an_unreachable_metadata_server_is_a_clear_error():
    with pytest.raises(IdentityError, match="unreachable"):
        resolve_identity({}, MetadataServer("127.0.0.1:9", timeout_s=1))


def test_preemption_is_read_and_watched(metadata):
    server = MetadataServer(metadata.host)
    assert server.get(PREEMPTED) == "FALSE"
    noticed = threading.Event()
    stop = threading.Event()
    watch_notice(server, PREEMPTED, "TRUE", noticed.set, stop, wait_s=0, error_pause_s=0.05)
    wait_for(lambda: any("wait_for_change=true" in path for path in metadata.requests), 5, what="a long poll")
    metadata.values["instance/preempted"] = "TRUE"
    wait_for(noticed.is_set, 5, what="preemption noticed")
    stop.set()


def test_an_answer_cut_off_mid_body_is_no_answer_and_the_watch_goes_on(metadata):
    """A connection the metadata server drops mid-answer (http.client's IncompleteRead, no OSError) is a read it gave
    no answer to: tried again, not an error that ends the watch (and with it the VM's preemption notice)."""
    server = MetadataServer(metadata.host)
    metadata.cut[PREEMPTED] = 1
    with pytest.raises(IdentityError, match="no answer"):
        server.get(PREEMPTED)
    metadata.cut[PREEMPTED] = 2
    metadata.values[PREEMPTED] = "TRUE"
    noticed, stop = threading.Event(), threading.Event()
    watch_notice(server, PREEMPTED, "TRUE", noticed.set, stop, wait_s=0, error_pause_s=0.05)
    wait_for(noticed.is_set, 5, what="preemption noticed")
    stop.set()


# -- settings and sequence numbers -------------------------------------------------------------------
def test_settings_defaults_and_overrides():
    assert AgentSettings.from_env({}) == AgentSettings()
    settings = AgentSettings.from_env({"ZEN_AGENT_HEARTBEAT_S": "0.5", "ZEN_AGENT_STOP_GRACE_S": "2",
                                       "ZEN_AGENT_CLAIM_TRIES": "2", "ZEN_AGENT_LOCAL": "1"})
    assert (settings.heartbeat_s, settings.stop_grace_s, settings.claim_tries, settings.local) == (0.5, 2.0, 2, True)


def test_the_periods_are_the_configurations_unless_the_vm_sets_its_own():
    """Each period is written once, in the configuration's ``deadlines``; the agent's defaults are its defaults."""
    assert (AgentSettings().heartbeat_s, AgentSettings().vm_heartbeat_s, AgentSettings().stop_grace_s) == (
        Deadlines().agent_heartbeat_s, Deadlines().vm_heartbeat_s, Deadlines().stop_grace_s)
    deadlines = Deadlines(heartbeat_timeout_s=300, agent_heartbeat_s=20, vm_heartbeat_s=45, stop_grace_s=5)
    configured = with_deadlines(AgentSettings(), deadlines, {})
    assert (configured.heartbeat_s, configured.vm_heartbeat_s, configured.stop_grace_s,
            configured.heartbeat_timeout_s) == (20, 45, 5, 300)
    env = {"ZEN_AGENT_VM_HEARTBEAT_S": "15"}
    own = with_deadlines(AgentSettings.from_env(env), deadlines, env)
    assert (own.vm_heartbeat_s, own.heartbeat_s) == (15, 20)


@pytest.mark.parametrize("env, problem", [
    ({"ZEN_AGENT_HEARTBEAT_S": "soon"}, "not a number"),
    ({"ZEN_AGENT_HEARTBEAT_S": "0"}, "must be above 0"),
    ({"ZEN_AGENT_CLAIM_TRIES": "1.5"}, "whole number"),
    ({"ZEN_AGENT_LEASE_S": "900"}, "at most 600"),
    ({"ZEN_AGENT_TAIL_BYTES": "100000"}, "at most 7000"),
    ({"ZEN_AGENT_LOCAL": "maybe"}, "use 1 or 0"),
])
def test_bad_settings_name_the_variable(env, problem):
    with pytest.raises(ConfigError, match=problem):
        AgentSettings.from_env(env)


def test_vm_and_job_seqs_are_epoch_milliseconds_and_strictly_increasing():
    identity = resolve_identity(LOCAL_ENV, None)
    sent = []
    wall = iter([1_700_000_000.0, 1_700_000_000.0, 1_699_999_999.0, 1_700_000_005.0,
                 1_700_000_010.0, 1_700_000_010.0, 1_700_000_009.0, 1_700_000_070.0])
    reporter = Reporter(identity, lambda message, budget_s: sent.append(message), wall_clock=lambda: next(wall))
    for _ in range(4):
        reporter.vm(VmState.IDLE, budget_s=1)
    assert [m.seq for m in sent] == [1_700_000_000_000, 1_700_000_000_001, 1_700_000_000_002, 1_700_000_005_000]
    # The same attempt claimed again (its start came back) goes on after its earlier reports, even
    # when the wall clock steps back: Zen drops a report at or below the last seq it applied.
    first, second, again = AttemptReport("j", 1), AttemptReport("k", 1), AttemptReport("j", 1)
    for attempt, status in [(first, AgentStatus.CLAIMED), (first, AgentStatus.CLAIMED), (second, AgentStatus.CLAIMED),
                            (again, AgentStatus.CLAIMED)]:
        reporter.job(attempt, status, budget_s=1)
    assert [(m.job_id, m.seq) for m in sent[4:]] == [
        ("j", 1_700_000_010_000), ("j", 1_700_000_010_001), ("k", 1_700_000_010_002), ("j", 1_700_000_070_000)]
    assert (first.seq, second.seq, again.seq) == (1_700_000_010_001, 1_700_000_010_002, 1_700_000_070_000)
