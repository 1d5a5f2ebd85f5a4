"""The deployed functions require each heartbeat's proof of its VM (``zen.vm_proof``) by default, under
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
    assert '"ZEN_VM_PROOF"' in (ROOT / "shared" / "zen" / "vm_proof.py").read_text()


def test_agent_vms_have_the_service_account_their_identity_token_needs():
    # The metadata server issues identity tokens only to a VM with a service account attached.
    compute = (ROOT / "terraform" / "compute.tf").read_text()
    assert re.search(r"service_account\s*\{\s*email\s*=\s*google_service_account\.agent\[each\.value\.cluster\]\.email", compute)
