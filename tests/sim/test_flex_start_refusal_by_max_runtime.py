"""A job accepting flex-start alone is refused by ``zen simulate`` as production refuses it at submission: by its own
``max_runtime_s`` against the cluster's ``flex_start_run_s`` (``zen.jobs.placement.check_provisioning``), not by
how long its trace says it ran; a job whose trace gives no ``max_runtime_s`` is compared by its run."""

from __future__ import annotations

import json

from zen.core.config import load_config
from zen.core.errors import Rejected
from zen.core.models import JobRequest
from zen.jobs.placement import resolve_request
from zen_dev.sim.cli import main

SCENARIO = """
seed: 1
horizon_s: 40000
tick_s: 60
clusters:
  - {name: c4, gpu_count: 4, machine_type: a2-highgpu-4g, regions: [us-central1], max_vms_per_region: 4,
     max_vms: 4, provisioning: [flex-start], flex_start_run_s: 7200}
zones: {us-central1: [us-central1-a]}
capacity: {default: 4}
boot: {dist: fixed, s: 60}
limits: {max_runtime_s: 86400}
"""


def _production(max_runtime_s):
    """What production says of the same job on a cluster of the same flex-start settings (None: accepted)."""
    base = load_config()
    raw = json.loads(base.model_dump_json())
    cluster = raw["clusters"][0]
    cluster.update(provisioning=["flex-start"], flex_start_run_s=7200)
    raw["limits"]["max_runtime_s"] = 86400
    config = type(base).model_validate(raw)
    request = JobRequest.model_validate({"user_id": "alice", "cluster": cluster["name"], "command": ["true"],
                                         **({"max_runtime_s": max_runtime_s} if max_runtime_s else {})})
    try:
        resolve_request(config, request, "j")
    except Rejected as exc:
        return exc.reason
    return None


def _simulate(tmp_path, capsys, jobs_csv):
    (tmp_path / "s.yaml").write_text(SCENARIO)
    (tmp_path / "jobs.csv").write_text(jobs_csv)
    rc = main(["--scenario", str(tmp_path / "s.yaml"), "--json", "--policies", "zen", "--jobs",
               str(tmp_path / "jobs.csv")])
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_long_job_capped_below_the_flex_run_is_taken_as_production_takes_it(tmp_path, capsys):
    assert _production(3600) is None  # max_runtime_s 3600 <= flex_start_run_s 7200: production takes it
    rc, out, err = _simulate(tmp_path, capsys, "job_id,submit_s,duration_s,cluster,max_runtime_s\nj,0,10000,c4,3600\n")
    assert rc == 0, f"the simulator refused a job production takes (it would stop it at 3600 s): {err.strip()}"


def test_a_job_whose_limit_outlives_a_flex_start_vm_is_refused_whatever_it_ran(tmp_path, capsys):
    refusal = _production(9000)
    assert refusal is not None and "flex_start_run_s" in refusal, refusal
    rc, out, err = _simulate(tmp_path, capsys, "job_id,submit_s,duration_s,cluster,max_runtime_s\nj,0,600,c4,9000\n")
    assert rc == 2 and "may run (max_runtime_s) 9000 s, longer than a flex-start VM" in err, (rc, err)
