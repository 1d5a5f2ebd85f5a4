"""The deployed functions require each heartbeat's proof of its VM (``zen.adapters.vm_proof``) by default, under
the variable the library reads, and the agents' VMs carry the service account their tokens need."""

from __future__ import annotations

import re

import pytest

from tests.terraform.hcl import ROOT, Module, block


@pytest.fixture(scope="module")
def module():
    return Module.load()


def test_the_functions_require_the_vm_proof_by_default(module):
    variable = module.variables["vm_proof"]
    assert variable["default"] == "required"
    assert 'contains(["off", "required"], var.vm_proof)' in str(variable["validation"])
    env = block(module.resources_of("google_cloudfunctions2_function")["zen"]["service_config"])["environment_variables"]
    assert re.search(r"\bZEN_VM_PROOF\s*=\s*var\.vm_proof\b", env), env
    assert '"ZEN_VM_PROOF"' in (ROOT / "shared" / "zen" / "adapters" / "vm_proof.py").read_text()


def test_agent_vms_have_the_service_account_their_identity_token_needs():
    # The metadata server issues identity tokens only to a VM with a service account attached.
    compute = (ROOT / "terraform" / "compute.tf").read_text()
    assert re.search(r"service_account\s*\{\s*email\s*=\s*google_service_account\.agent\["
                     r"local\.agent_account_of\[each\.value\.cluster\]\[each\.value\.region\]\]\.email", compute)


def test_only_the_heartbeat_function_gets_the_proof_secret_from_secret_manager(module):
    """ZEN_PROOF_SECRET (the VMs' MAC keys: zen.adapters.message_key) comes from Secret Manager, never from a
    terraform variable or the state, and only to the function that answers claims and checks MACs."""
    function = (ROOT / "terraform" / "functions.tf").read_text()
    assert re.search(r'for_each\s*=\s*each\.key == "on_heartbeat" \? \[google_secret_manager_secret\.proof\.secret_id\]',
                     function)
    assert re.search(r'key\s*=\s*"ZEN_PROOF_SECRET"', function)
    secret = (ROOT / "terraform" / "proof_secret.tf").read_text()
    assert 'google_service_account.function["on_heartbeat"].email' in secret
    assert "secretmanager.secretAccessor" in secret and "secret_data" not in secret
    script = (ROOT / "terraform" / "scripts" / "proof_secret.sh").read_text()
    assert "/dev/urandom" in script and "--data-file=-" in script
    assert '"ZEN_PROOF_SECRET"' in (ROOT / "shared" / "zen" / "adapters" / "vm_proof.py").read_text()
