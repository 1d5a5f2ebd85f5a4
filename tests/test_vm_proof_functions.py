"""Through the functions, with ``ZEN_VM_PROOF=required``: a heartbeat is applied only when its
``vm_proof`` token, checked against the issuer's certificates, names the VM, zone and project the
heartbeat names. Anyone else's report (another VM's token, none at all) is rejected, recorded and
acked, and changes nothing."""

from __future__ import annotations

import functools
import json
import secrets

import pytest

from tests.messages import heartbeat, job_request
from tests.test_functions_lifecycle import job
from tests.test_heartbeat_seq import ms, rejections, vm_beat
from tests.token_support import certs, issuer  # noqa: F401  (fixtures)
from zen.store import repository
from zen.adapters.message_key import (
    ATTRIBUTE, MAC_ATTRIBUTE, SEALED_KEY_ATTRIBUTE, SIGNATURE_ATTRIBUTE, MessageKey, audience, mac,
)

KEY = functools.cache(MessageKey)  # the agents' message key: one for the module, made at its first use (RSA: 0.15 s)

# Instances of the cluster's MIG in us-central1, as GCE names them: a VM may claim only its cluster's jobs.
VM_A, VM_B = "zen-4xa100-40gb-us-central1-a0a0", "zen-4xa100-40gb-us-central1-b0b0"


@pytest.fixture
def zen(config, db, publisher, clock, certs, monkeypatch):
    """The test's Zen, built (as in production) with the proof mode of its environment."""
    from zen.app import Zen

    monkeypatch.setenv("ZEN_VM_PROOF", "required")
    monkeypatch.setenv("ZEN_VM_PROOF_CERTS_URL", certs.url)
    monkeypatch.setenv("ZEN_PROOF_SECRET", secrets.token_urlsafe(32))  # the VMs' MAC keys (zen.adapters.message_key)
    zen = Zen(config, db, publisher, clock)
    yield zen
    zen.relay.marks.flush()


class proof:
    """VM ``vm``'s agent: its token (bound to the agent's key) and its signature of each message it sends;
    ``sign(payload)`` is what ``functions.heartbeat`` and ``functions.send`` take."""

    def __init__(self, issuer, clock, project, vm, zone="us-central1-a", key: MessageKey | None = None):
        self.key = key = key or KEY()
        self.token = issuer.token(vm=vm, zone=zone, project=project, audience=audience(project, key.fingerprint),
                                  now=clock().timestamp())

    def __call__(self, payload: dict, **attributes: str) -> dict:
        data = json.dumps(payload).encode()
        return {"payload": data, "attributes": {**attributes, **self.key.attributes(self.token, data, attributes)}}


def test_a_report_for_vm_a_with_vm_b_token_is_rejected_and_vm_a_own_applies(functions, zen, clock, issuer,
                                                                              project):
    vm_a, vm_b = proof(issuer, clock, project, VM_A), proof(issuer, clock, project, VM_B)
    functions.submit(job_request("victim"))
    start = ms(clock)
    functions.heartbeat(**vm_a(heartbeat("victim", "CLAIMED", start, vm=VM_A)))
    functions.heartbeat(**vm_a(heartbeat("victim", "RUNNING", start + 1, vm=VM_A)))
    assert job(zen, "victim").status.value == "RUNNING"

    forged = heartbeat("victim", "SUCCEEDED", start + 2, vm=VM_A, exit_code=0)
    assert functions.send("on_heartbeat", **vm_b(forged)).status_code == 200  # acked
    assert job(zen, "victim").status.value == "RUNNING"
    [reason] = rejections(zen)
    assert f"names VM '{VM_A}' but its vm_proof token is for VM '{VM_B}'" in reason

    functions.heartbeat(**vm_a(heartbeat("victim", "SUCCEEDED", start + 3, vm=VM_A, exit_code=0)))
    assert job(zen, "victim").status.value == "SUCCEEDED"


def test_an_unproven_report_is_announced_apart_from_the_job_it_names(functions, zen, clock, issuer, project,
                                                                    publisher):
    """A report no VM is shown to have sent names its job in ``named_job_id`` alone (``zen.jobs.rejections``): its
    refusal is nobody's job's, where it was announced as the running job's ``job.message_ignored``."""
    vm_a, vm_b = proof(issuer, clock, project, VM_A), proof(issuer, clock, project, VM_B)
    functions.submit(job_request("victim"))
    functions.heartbeat(**vm_a(heartbeat("victim", "CLAIMED", ms(clock), vm=VM_A)))
    functions.send("on_heartbeat", **vm_b(heartbeat("victim", "FAILED", ms(clock) + 1, vm=VM_A, exit_code=1)))
    functions.send("on_heartbeat", heartbeat("victim", "FAILED", ms(clock) + 2, vm=VM_A, exit_code=1))
    ignored = [(json.loads(m.data), m.attributes) for m in publisher.on("zen-job-events")
               if json.loads(m.data)["type"] == "job.message_ignored"]
    announced = [(e.get("job_id"), e.get("named_job_id"), a.get("job_id")) for e, a in ignored]
    assert announced == [(None, "victim", None)] * 2
    with zen.db.transaction() as session:
        assert [(r["job_id"], r["named_job_id"]) for r in repository.list_rejections(session)] == [(None, "victim")] * 2
    assert job(zen, "victim").status.value == "ASSIGNED"


def test_a_heartbeat_without_a_token_is_rejected(functions, zen, clock):
    functions.submit(job_request("unproven"))
    assert functions.send("on_heartbeat", heartbeat("unproven", "CLAIMED", ms(clock), vm="vm-a")).status_code == 200
    assert job(zen, "unproven").status.value == "QUEUED"
    [reason] = rejections(zen)
    assert "carries no vm_proof attribute" in reason


def mig_beat(state: str, seq: int, sent_at, vm: str = VM_B, cluster: str = "4xa100-40gb") -> dict:
    return {**vm_beat(state, seq, sent_at), "vm": vm, "cluster": cluster}


def vm_names(zen) -> list[tuple[str, str, str]]:
    with zen.db.transaction() as session:
        return [(row["name"], row["cluster"], row["state"]) for row in repository.list_vms(session)]


def test_a_vm_heartbeat_with_another_vm_token_is_rejected(functions, zen, clock, issuer, project):
    functions.heartbeat(**proof(issuer, clock, project, "vm-a")(mig_beat("RETIRED", ms(clock), clock())))
    assert vm_names(zen) == []
    [reason] = rejections(zen)
    assert f"names VM '{VM_B}' but its vm_proof token is for VM 'vm-a'" in reason
    functions.heartbeat(**proof(issuer, clock, project, VM_B)(mig_beat("IDLE", ms(clock) + 1, clock())))
    assert vm_names(zen) == [(VM_B, "4xa100-40gb", "IDLE")]


def test_a_vm_reporting_for_a_cluster_not_its_own_is_rejected(functions, zen, clock, issuer, project):
    """Its token proves its name, not the cluster it names: an idle VM of another cluster would be that
    cluster's supply (its planner would not scale for its queue) and would run its scaling passes."""
    own = proof(issuer, clock, project, VM_B)
    for n, (vm, cluster) in enumerate([(VM_B, "8xa100-40gb"), ("vm-b", "4xa100-40gb"),
                                       ("zen-4xa100-40gb-us-central1-x-us-central1-b0b0", "4xa100-40gb")]):
        attributes = own if vm == VM_B else proof(issuer, clock, project, vm)
        functions.heartbeat(**attributes(mig_beat("IDLE", ms(clock) + n, clock(), vm, cluster)))
    assert vm_names(zen) == []
    reasons = rejections(zen)
    assert len(reasons) == 3 and all("a VM reports for its own cluster" in r for r in reasons), reasons
    assert "is not an instance of cluster 8xa100-40gb's MIGs in us-central1 (zen-8xa100-40gb-us-central1)" in reasons[0]
    functions.heartbeat(**own(mig_beat("IDLE", ms(clock) + 5, clock())))
    assert vm_names(zen) == [(VM_B, "4xa100-40gb", "IDLE")]


def test_a_claim_from_outside_the_region_it_names_is_rejected(functions, zen, clock, issuer, project):
    """The token proves the zone; a claim's allowed regions (and tags, set per region) are judged by the
    heartbeat's region, which must therefore be the zone's: a us-central1 VM claimed a europe-west4-only
    job by naming europe-west4."""
    functions.submit(job_request("eu-only", regions=["europe-west4"]))
    lying = heartbeat("eu-only", "CLAIMED", ms(clock), vm="vm-a", region="europe-west4", zone="us-central1-a")
    assert functions.send("on_heartbeat", **proof(issuer, clock, project, "vm-a")(lying)).status_code == 200
    assert job(zen, "eu-only").status.value == "QUEUED"
    [reason] = rejections(zen)
    assert "names region 'europe-west4' and zone 'us-central1-a', which is not in it" in reason


def test_a_token_nested_too_deep_or_too_long_is_rejected_not_a_500(functions, zen, clock):
    """A header of 2,900 '[' (under 4,096 characters) made json raise RecursionError: 500 on every
    delivery, then the dead letters; one far longer than any real token is refused undecoded."""
    import base64

    from zen.adapters.message_key import token_attributes

    deep = base64.urlsafe_b64encode(b"[" * 2900).decode().rstrip("=") + ".e30.c2ln"
    for n, forged in enumerate((deep, "a" * 20_000 + ".e30.c2ln")):
        functions.submit(job_request(f"deep-{n}"))
        beat = heartbeat(f"deep-{n}", "CLAIMED", ms(clock) + n, vm="vm-a")
        assert functions.send("on_heartbeat", beat, attributes=token_attributes(forged)).status_code == 200
        assert job(zen, f"deep-{n}").status.value == "QUEUED"
    deep_reason, long_reason = rejections(zen)
    assert "the vm_proof token is not a JWT" in deep_reason
    assert "characters long, over 4096: not an identity token" in long_reason


def test_a_vm_of_another_cluster_cannot_claim_a_job(functions, zen, clock, issuer, project):
    """Its token proves its name, and its name its MIG: a VM of 1xl4 must not run a job of 4xa100-40gb
    (another machine, and a VM not cleared for the tags the job's cluster has there)."""
    other = "zen-1xl4-us-central1-c0c0"
    functions.submit(job_request("mine"))
    functions.heartbeat(**proof(issuer, clock, project, other)(heartbeat("mine", "CLAIMED", ms(clock), vm=other)))
    refused = job(zen, "mine")
    assert refused.status.value == "QUEUED" and refused.vm is None
    [reason] = rejections(zen)
    assert f"VM {other} is not an instance of cluster 4xa100-40gb's MIG in us-central1" in reason
    functions.heartbeat(**proof(issuer, clock, project, VM_A)(heartbeat("mine", "CLAIMED", ms(clock) + 1, vm=VM_A)))
    assert job(zen, "mine").vm == VM_A


def test_a_vm_of_another_cluster_giving_up_a_claim_writes_nothing_into_the_job(functions, zen, clock, issuer, project):
    """A PREEMPTED (a claim given up as its VM went) from a VM of 1xl4 about a queued 4xa100-40gb job was applied:
    the job's row took the VM as one that gave the attempt up, and its history a row per message saying so."""
    other = "zen-1xl4-us-central1-c0c0"
    functions.submit(job_request("mine"))
    before = len(_history(zen, "mine"))
    agent = proof(issuer, clock, project, other)
    for n in range(3):
        functions.heartbeat(**agent(heartbeat("mine", "PREEMPTED", ms(clock) + n, vm=other)))
    assert not job(zen, "mine").left_vms and len(_history(zen, "mine")) == before
    assert any(f"VM {other} is not an instance of cluster 4xa100-40gb's MIG" in r for r in rejections(zen))


def _history(zen, job_id):
    with zen.db.transaction() as session:
        return repository.job_history(session, job_id)


def test_an_instance_name_names_its_cluster_and_region(config):
    cluster = config.cluster("4xa100-40gb")
    assert cluster.has_instance(VM_A, "us-central1")
    for other in ("zen-4xa100-40gb-us-west1-a0a0", "zen-8xa100-40gb-us-central1-a0a0", "vm-a",
                  "zen-4xa100-40gb-us-central1-", "zen-4xa100-40gb-us-central1-x-us-central1-a0a0"):
        assert not cluster.has_instance(other, "us-central1"), other


def test_a_foreign_vm_in_a_region_no_longer_cleared_leaves_the_job_as_it_was(config, db, publisher, clock, issuer,
                                                                           certs, project, monkeypatch):
    """The VM's cluster is checked before the tags' regions: a claim of a VM cleared by nothing the job's
    cluster knows must not narrow the job to where its tag moved (nor cancel it)."""
    from tests.test_tags import with_region_tags
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.setenv("ZEN_VM_PROOF", "required")
    monkeypatch.setenv("ZEN_VM_PROOF_CERTS_URL", certs.url)
    before = FunctionsInvoker(Zen(with_region_tags(config, {"us-central1": ["hipaa"]}), db, publisher, clock))
    before.submit(job_request("phi-x", requires_tags=["hipaa"], regions=["us-central1", "us-west1"]))
    zen = Zen(with_region_tags(config, {"us-west1": ["hipaa"]}), db, publisher, clock)  # the tag moved
    regions = job(zen, "phi-x").regions
    other = "zen-1xl4-us-central1-c0c0"
    FunctionsInvoker(zen).heartbeat(**proof(issuer, clock, project, other)(
        heartbeat("phi-x", "CLAIMED", ms(clock), vm=other, tags=["hipaa"])))
    refused = job(zen, "phi-x")
    assert (refused.status.value, refused.vm, refused.regions) == ("QUEUED", None, regions)
    zen.relay.marks.flush()


def test_a_legacy_vm_name_is_an_instance_only_in_the_regions_configured_for_it(config):
    """A MIG made before VM names carried their region names them zen-<cluster>-xxxx in whatever region it
    is: that name was taken as the cluster's in every region (issue 34: fail open). Now only in the
    regions the cluster lists in legacy_vm_regions (none by default), where such a MIG is known to be."""
    from zen.core.config import ConfigError, ZenConfig

    legacy = "zen-4xa100-40gb-a0a0"
    assert not any(config.cluster("4xa100-40gb").has_instance(legacy, r) for r in ("us-central1", "us-west1"))
    raw = json.loads(config.model_dump_json())
    cluster = next(c for c in raw["clusters"] if c["name"] == "4xa100-40gb")
    cluster["legacy_vm_regions"] = ["us-central1"]
    configured = ZenConfig.model_validate(raw).cluster("4xa100-40gb")
    assert configured.has_instance(legacy, "us-central1") and configured.has_instance(VM_A, "us-central1")
    assert not configured.has_instance(legacy, "us-west1")
    cluster["legacy_vm_regions"] = ["mars-north1"]
    with pytest.raises((ValueError, ConfigError), match="legacy_vm_regions names regions the cluster does not use"):
        ZenConfig.model_validate(raw)


def test_a_legacy_named_vm_claims_only_where_configured(functions, zen, clock, issuer, project):
    """Through the functions, under required: a VM named zen-<cluster>-xxxx (its token proves that name)
    may not claim the cluster's job unless its region is one of the cluster's legacy_vm_regions."""
    legacy = "zen-4xa100-40gb-a0a0"
    functions.submit(job_request("old-mig"))
    functions.heartbeat(**proof(issuer, clock, project, legacy)(heartbeat("old-mig", "CLAIMED", ms(clock), vm=legacy)))
    assert job(zen, "old-mig").status.value == "QUEUED"
    [reason] = rejections(zen)
    assert f"VM {legacy} is not an instance of cluster 4xa100-40gb's MIG in us-central1" in reason


def test_clusters_whose_vms_would_be_named_alike_are_refused(config):
    from zen.core.config import ZenConfig

    raw = json.loads(config.model_dump_json())
    first = raw["clusters"][0]
    # its VMs of a MIG made before names had regions: zen-<first>-us-central1-xxxx, as <first>'s MIG's there
    raw["clusters"].append({**first, "name": f"{first['name']}-us-central1", "legacy_vm_regions": ["us-central1"]})
    with pytest.raises(ValueError, match="would name VMs alike"):
        ZenConfig.model_validate(raw)


def test_a_captured_proof_cannot_carry_another_message_and_the_captured_message_again_changes_nothing(
        functions, zen, clock, issuer, project):
    """Issue 34: a VM's token taken from one of its heartbeats (the dead-letter subscription keeps them)
    spoke for that VM for the rest of its hour. Now each message is signed by the key the token binds:
    the captured proof on a body of the attacker's is rejected (recorded, acked), and so is the token
    alone; the captured message sent again whole is the report the VM already made, a no-op."""
    vm_a = proof(issuer, clock, project, VM_A)
    functions.submit(job_request("victim"))
    start = ms(clock)
    functions.heartbeat(**vm_a(heartbeat("victim", "CLAIMED", start, vm=VM_A)))
    captured = vm_a(heartbeat("victim", "RUNNING", start + 1, vm=VM_A))
    functions.heartbeat(**captured)
    before = job(zen, "victim")
    assert before.status.value == "RUNNING"

    forged = json.dumps(heartbeat("victim", "SUCCEEDED", start + 2, vm=VM_A, exit_code=0)).encode()
    assert functions.send("on_heartbeat", forged, attributes=captured["attributes"]).status_code == 200
    token_only = {k: v for k, v in captured["attributes"].items() if k.startswith(ATTRIBUTE)}
    assert functions.send("on_heartbeat", forged, attributes=token_only).status_code == 200
    assert job(zen, "victim").status.value == "RUNNING"
    signature, missing = rejections(zen)
    assert f"vm_sig does not verify with the key its vm_proof token binds: its body or attributes are not what " \
           f"VM {VM_A} signed" in signature
    assert "carries no vm_sig attribute" in missing  # the token is remembered: its key is known

    assert functions.send("on_heartbeat", message_id="replayed-1", **captured).status_code == 200
    again = job(zen, "victim")
    assert (again.status, again.last_seq, again.attempt) == (before.status, before.last_seq, before.attempt)
    assert len(rejections(zen)) == 2  # a duplicate, not a refusal

    functions.heartbeat(**vm_a(heartbeat("victim", "SUCCEEDED", start + 3, vm=VM_A, exit_code=0)))
    assert job(zen, "victim").status.value == "SUCCEEDED"


def test_unset_zen_vm_proof_means_required(config, db, publisher, clock, issuer, certs, project, monkeypatch):
    """Fail closed (issue 34): a deployment that does not set ZEN_VM_PROOF requires every heartbeat's proof
    (it believed any heartbeat)."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.delenv("ZEN_VM_PROOF", raising=False)
    monkeypatch.setenv("ZEN_VM_PROOF_CERTS_URL", certs.url)
    zen = Zen(config, db, publisher, clock)
    functions = FunctionsInvoker(zen)
    functions.submit(job_request("default"))
    assert functions.send("on_heartbeat", heartbeat("default", "CLAIMED", ms(clock), vm=VM_A)).status_code == 200
    assert job(zen, "default").status.value == "QUEUED"
    [reason] = rejections(zen)
    assert "carries no vm_proof attribute" in reason
    functions.heartbeat(**proof(issuer, clock, project, VM_A)(heartbeat("default", "CLAIMED", ms(clock) + 1, vm=VM_A)))
    assert job(zen, "default").vm == VM_A
    zen.relay.marks.flush()


def confirm_of(publisher, vm: str, job_id: str):
    [confirm] = [m for m in publisher.on("zen-vm-control") if m.attributes.get("action") == "CONFIRM"
                 and (m.attributes["vm"], m.attributes["job_id"]) == (vm, job_id)]
    return confirm


def test_the_confirm_gives_the_vm_its_mac_key_and_its_heartbeats_then_carry_a_mac_only_it_can_make(
        functions, zen, clock, issuer, project, publisher):
    """The per-message check is an HMAC, not an RSA verification: Zen's CONFIRM of a signed claim carries
    the VM's MAC key sealed to the agent's key; the agent's later heartbeats carry ``vm_mac`` and apply.
    A captured token and key with a MAC of another body, none, or one under another VM's MAC key (VM B's,
    from its own CONFIRM) are rejected and change nothing."""
    agent_a = proof(issuer, clock, project, VM_A, key=MessageKey())
    agent_b = proof(issuer, clock, project, VM_B, key=MessageKey())
    functions.submit(job_request("maced"))
    functions.submit(job_request("b-job"))
    start = ms(clock)
    functions.heartbeat(**agent_a(heartbeat("maced", "CLAIMED", start, vm=VM_A)))  # signed: no key yet
    functions.heartbeat(**agent_b(heartbeat("b-job", "CLAIMED", start, vm=VM_B)))
    sealed = confirm_of(publisher, VM_A, "maced").attributes[SEALED_KEY_ATTRIBUTE]
    assert not agent_b.key.learn(sealed)  # VM B reads VM A's orders (one cluster), not its key
    assert agent_a.key.learn(sealed) and agent_b.key.learn(confirm_of(publisher, VM_B, "b-job").attributes[
        SEALED_KEY_ATTRIBUTE])

    running = agent_a(heartbeat("maced", "RUNNING", start + 1, vm=VM_A))
    assert MAC_ATTRIBUTE in running["attributes"] and SIGNATURE_ATTRIBUTE not in running["attributes"]
    functions.heartbeat(**running)
    functions.heartbeat(**agent_a(heartbeat("maced", "RUNNING", start + 2, vm=VM_A, message="half way")))
    assert (job(zen, "maced").status.value, job(zen, "maced").last_seq) == ("RUNNING", start + 2)

    forged = json.dumps(heartbeat("maced", "SUCCEEDED", start + 3, vm=VM_A, exit_code=0)).encode()
    copied = {k: v for k, v in running["attributes"].items() if k != MAC_ATTRIBUTE}
    under_b = mac(agent_b.key.mac_key, forged, {})
    for attributes in (running["attributes"], copied, {**copied, MAC_ATTRIBUTE: under_b}):
        assert functions.send("on_heartbeat", forged, attributes=attributes).status_code == 200
    assert job(zen, "maced").status.value == "RUNNING"
    other_body, missing, foreign = rejections(zen)
    assert f"vm_mac is not the MAC of its body and attributes under VM {VM_A}'s MAC key" in other_body
    assert "carries no vm_sig attribute" in missing and "no vm_mac" in missing
    assert "vm_mac is not the MAC" in foreign

    functions.heartbeat(**agent_a(heartbeat("maced", "SUCCEEDED", start + 4, vm=VM_A, exit_code=0)))
    assert job(zen, "maced").status.value == "SUCCEEDED"
