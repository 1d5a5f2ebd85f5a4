"""The Compute stand-in as the issuer of its VMs' identity tokens (``zen_dev.local.compute.issuer``): each
booted VM's process gets ``ZEN_VM_PROOF_METADATA_HOST``, where it gets a token for itself (bound to
its agent's message key) that Zen's checker accepts, with the key's signature of a heartbeat, against
the stand-in's certificates; a VM that does not run gets none."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.local.test_compute_standin import BOOT_S, make_cloud  # noqa: F401 - the fixture
from zen.adapters.message_key import IDENTITY_PATH, audience, identity_query
from zen.adapters.vm_proof import ProofChecker, unverified_claims
from zen.agent.identity import Identity, IdentityError, MetadataServer, ProofSource
from zen.core.errors import Rejected

PROJECT = "test-proj"


def test_a_running_vm_gets_its_own_token_and_zen_accepts_it(make_cloud):
    cloud = make_cloud()
    cloud.resize(1)
    (managed,) = cloud.instances()
    name = managed.instance.rsplit("/", 1)[1]
    zone = managed.instance.split("/zones/")[1].split("/")[0]
    with cloud.standin.world.lock:
        inst = next(i for m in cloud.standin.world.migs.values() for i in m.instances.values())
        host = cloud.standin.world.vm_env(inst)["ZEN_VM_PROOF_METADATA_HOST"]
    assert host == f"{cloud.standin.endpoint}/zen-local/vms/{name}"
    with pytest.raises(IdentityError, match="has no"):  # not booted yet: no token
        MetadataServer(host).required(IDENTITY_PATH + identity_query(PROJECT))
    cloud.advance(BOOT_S)

    identity = Identity(project=PROJECT, vm=name, cluster="4xa100", region="us-central1", zone=zone,
                        from_environment=True)
    source = ProofSource.from_env({"ZEN_VM_PROOF_METADATA_HOST": host}, identity)
    token = source.token()
    claims = unverified_claims(token)
    assert claims["aud"].startswith(audience(PROJECT) + ":key:")
    assert claims["google"]["compute_engine"]["instance_name"] == name
    checker = ProofChecker("required", cloud.standin.certs_url, audience(PROJECT), lambda: datetime.now(timezone.utc))
    data = b'{"vm": "%s", "state": "IDLE"}' % name.encode()
    sent = source.attributes(token, data, {"kind": "vm", "vm": name})
    checker.check({"kind": "vm", "vm": name, **sent}, name, zone, PROJECT, data=data)
    with pytest.raises(Rejected, match="a VM may only report for itself"):
        checker.check({"kind": "vm", "vm": name, **sent}, "another-vm", zone, PROJECT, data=data)
