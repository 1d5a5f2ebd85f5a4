"""The agent's own warnings and errors reach Cloud Logging where the dashboard's "Logs of one VM" link looks.

On a VM the agent's stderr goes to the journal only (startup.sh installs no logging agent, nor does the image ship
one), so the link's ``gce_instance`` clause found none of them: claims refused, staging failures, fences,
retirements and power-offs were on the VM's disk alone, gone with the VM. The agent ships them itself (log
``zen-agent``) through the official client, against the Cloud Logging stand-in; the link's query, taken from
terraform, must find them by the VM's name.
"""

from __future__ import annotations

import logging
import re

from tests.logging_standin import LoggingStandIn
from tests.terraform.hcl import Module
from tests.terraform.logging_query import Unsupported, matches
from tests.terraform.test_monitoring import render
from zen.adapters.joblogs import ENDPOINT_ENV
from zen.agent.__main__ import _ship_own_log
from zen.agent.identity import Identity
from zen.logs import setup_logging

PROJECT = "zen-own-log"
VM = "zen-4xa100-40gb-us-central1-abcd"
IDENTITY = Identity(project=PROJECT, vm=VM, cluster="4xa100-40gb", region="us-central1", zone="us-central1-a",
                    from_environment=True)


def vm_link_finds(entry: dict, vm: str) -> bool:
    """Whether the dashboard's "Logs of one VM" query, VM_NAME replaced, matches the entry. Its clauses are
    parenthesized and joined by OR; only the guest environment's (gce_instance) is past the evaluator's subset,
    and it matches no entry of another resource type."""
    module = Module.load()
    functions_logs = render(module.locals["zen_function_logs"], {"var.name_prefix": module.variables["name_prefix"]["default"]})
    query = render(module.locals["vm_logs_query"], {"local.zen_function_logs": functions_logs, "var.project_id": PROJECT})
    found = False
    for clause in re.split(r"\)\s+OR\s+\(", query.replace("VM_NAME", vm).strip()[1:-1]):
        try:
            found = found or matches(clause, entry)
        except Unsupported:
            assert clause.startswith('resource.type="gce_instance"'), clause
            found = found or entry["resource"]["type"] == "gce_instance"
    return found


def test_the_agents_warnings_reach_cloud_logging_where_the_vm_link_looks():
    setup_logging()
    with LoggingStandIn() as cloud:
        handler = _ship_own_log({ENDPOINT_ENV: cloud.endpoint}, IDENTITY, local=True)
        assert handler is not None
        try:
            log = logging.getLogger("zen.agent.claim")
            log.info("claimed", extra={"job_id": "j-1"})
            log.warning("claim refused", extra={"job_id": "j-1", "reason": "lease held elsewhere"})
            logging.getLogger("zen.agent.leftover").error("power off: a container docker cannot kill")
            handler.flush()
        finally:
            logging.getLogger("zen").removeHandler(handler)
            handler.close()
        stored = list(cloud.entries)

    by_text = {e["jsonPayload"]["message"]: e for e in stored}
    assert set(by_text) == {"claim refused", "power off: a container docker cannot kill"}  # WARNING and above
    refused = by_text["claim refused"]
    assert refused["logName"] == f"projects/{PROJECT}/logs/zen-agent" and refused["severity"] == "WARNING"
    assert refused["labels"]["vm"] == VM and refused["jsonPayload"]["reason"] == "lease held elsewhere"
    assert refused["resource"]["labels"]["node_id"] == VM
    for entry in stored:
        assert vm_link_finds(entry, VM), entry
        assert not vm_link_finds(entry, "zen-4xa100-40gb-us-central1-other")
