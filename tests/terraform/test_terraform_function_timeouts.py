"""Each function's ``timeout_s`` (terraform's ``functions`` variable) is refused at plan time above the 540 s Google
runs an event-driven 2nd gen function for (all four are Eventarc-triggered): terraform took any number, left for
Google's API to refuse in the middle of an apply. Evaluated by ``terraform console`` where the binary is
installed."""

from __future__ import annotations

import re
import shutil

import pytest

from tests.terraform.hcl import TERRAFORM, console, top_block

FUNCTIONS = """functions = {{
  on_job_submitted  = {{ max_instances = 5, concurrency = 4, timeout_s = {timeout_s} }}
  on_heartbeat      = {{ max_instances = 3, concurrency = 4 }}
  on_stop_requested = {{ max_instances = 3, concurrency = 2 }}
  on_scale_tick     = {{ max_instances = 1, concurrency = 1, timeout_s = 240 }}
}}"""


@pytest.mark.skipif(shutil.which("terraform") is None, reason="the terraform binary is not installed")
@pytest.mark.parametrize("timeout_s, accepted", [(540, True), (541, False), (3600, False), (0, False)])
def test_a_function_timeout_past_what_google_allows_is_refused_at_plan(tmp_path, timeout_s, accepted):
    (tmp_path / "main.tf").write_text(top_block(TERRAFORM / "variables.tf", 'variable "functions" {'))
    (tmp_path / "test.tfvars").write_text(FUNCTIONS.format(timeout_s=timeout_s))
    result = console(tmp_path, "var.functions.on_job_submitted.timeout_s", "test.tfvars")
    said = re.sub(r"\x1b\[[0-9;]*m|[\s│]+", " ", result.stdout + result.stderr)  # colours and the box off
    assert ("540 s at most" not in said) == accepted, said
    if accepted:
        assert result.returncode == 0 and result.stdout.strip() == str(timeout_s), said
