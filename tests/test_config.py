"""Configuration validation gives errors a person can act on."""

from __future__ import annotations

import pytest
import yaml

from zen.core.config import DEFAULT_CONFIG_PATH, load_config
from zen.core.errors import ConfigError


def test_default_config_is_valid_and_documented():
    config = load_config(DEFAULT_CONFIG_PATH)
    assert {c.name for c in config.clusters} == {"1xl4", "4xa100-40gb", "8xa100-40gb"}
    assert config.topics.job_submitted == "zen-job-submitted"
    assert config.cluster("4xa100-40gb").mig_name("us-central1") == "zen-4xa100-40gb-us-central1"


def test_zen_config_env_points_at_a_file(tmp_path, monkeypatch):
    path = tmp_path / "zen.yaml"
    path.write_text("project: p\nclusters:\n  - {name: 2xt4, gpu_type: nvidia-tesla-t4, gpu_count: 2,"
                    " regions: [us-east1], max_vms_per_region: 1, max_vms: 1}\n")
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    config = load_config()
    assert config.project == "p" and config.deadlines.heartbeat_timeout_s == 120


@pytest.mark.parametrize("text, message", [
    ("clusters: []", "clusters: List should have at least 1 item"),
    ("clusters:\n  - {name: Big, gpu_type: t, gpu_count: 1, regions: [a], max_vms_per_region: 1, max_vms: 1}",
     "clusters.0.name: cluster names are lowercase"),
    ('clusters:\n  - {name: "big\\n", gpu_type: t, gpu_count: 1, regions: [a], max_vms_per_region: 1, max_vms: 1}',
     "clusters.0.name: cluster names are lowercase"),  # Python's "$" matched before a final newline
    ("clusters:\n  - {name: a, gpu_type: t, gpu_count: 1, regions: [r, r], max_vms_per_region: 1, max_vms: 1}",
     "a region is listed twice"),
    ("clusters:\n  - {name: a, gpu_type: t, gpu_count: 1, regions: [r], max_vms_per_region: 1, max_vms: 1,"
     " min_vms: 2}", "min_vms (2) is above max_vms (1)"),
    ("clusters:\n  - {name: a, gpu_type: t, gpu_count: 1, regions: [r], max_vms_per_region: 1, max_vms: 1,"
     " colour: red}", "clusters.0.colour: Extra inputs are not permitted"),
    ("clusters:\n  - {name: a-very-long-cluster-name-for-a100-gpus-x8, gpu_type: t, gpu_count: 1,"
     " regions: [northamerica-northeast1], max_vms_per_region: 1, max_vms: 1}",
     "is over 53 characters (its instance template and VMs are named after it)"),  # refused at apply time
    ("clusters:\n  - {name: 8xh100-80gb-research-team, gpu_type: t, gpu_count: 1, provisioning: [standard, spot],"
     " regions: [northamerica-northeast1], max_vms_per_region: 1, max_vms: 1}",  # its spot pool's, 55: plan failed
     "'zen-8xh100-80gb-research-team-northamerica-northeast1-spot' is over 53 characters"),
    ("deadlines: {heartbeat_timeout_s: -1}", "deadlines.heartbeat_timeout_s: Input should be greater than 0"),
    ("- just a list", "must hold a YAML mapping"),
    # numbers are numbers, as in messages: YAML's true was 1 s and $1.00/h, .inf a price shown as "$inf"
    ("clusters:\n  - {name: a, gpu_type: t, gpu_count: 1, regions: [r], max_vms_per_region: 1, max_vms: 1,"
     " max_start_wait_s: true}", "clusters.0.max_start_wait_s: a number, not True"),
    ('clusters:\n  - {name: a, gpu_type: t, gpu_count: "2", regions: [r], max_vms_per_region: 1, max_vms: 1}',
     "clusters.0.gpu_count: a number, not '2'"),
    ("pricing: {usd_per_vm_hour: {m1: .inf}}", "pricing.usd_per_vm_hour.m1: Input should be a finite number"),
    ("pricing: {usd_per_vm_hour: {m1: yes}}", "pricing.usd_per_vm_hour.m1: a number, not 'yes'"),
    # every section's numbers too: yes was a 1 s heartbeat timeout, "600" 600, .inf a hedge at any price
    ("deadlines: {heartbeat_timeout_s: yes}", "deadlines.heartbeat_timeout_s: a number, not 'yes'"),
    ("scaling: {cost_slack_s: true}", "scaling.cost_slack_s: a number, not True"),
    ('scaling: {cost_slack_s: "600"}', "scaling.cost_slack_s: a number, not '600'"),
    ("scaling: {hedge_price_ratio: .inf}", "scaling.hedge_price_ratio: a finite number, not inf"),
    ("gangs: {assemble_s: yes}", "gangs.assemble_s: a number, not 'yes'"),
    ("limits: {max_runtime_s: yes}", "limits.max_runtime_s: a number, not 'yes'"),
    ("queueing: {usage_half_life_s: .nan}", "queueing.usage_half_life_s: a finite number, not nan"),
    ("pricing: {usd_per_vm_hour: {m1: 0}}", "pricing.usd_per_vm_hour.m1: Input should be greater than 0"),
    # PyYAML keeps the last of two equal keys: one block of overrides was dropped without a word
    ("pricing:\n  overrides:\n    a2-highgpu-8g: {us-central1: {standard: 29.39}}\n"
     "    a2-highgpu-8g: {us-west1: {standard: 30.0}}\n",
     "line 4: pricing.overrides.a2-highgpu-8g is given twice (keep one)"),
    ("clusters: [", "is not valid YAML"),
    # a mistyped key inside a section names the key it is closest to, as a job file's does
    ("checkpoints: {buckt: my-ckpts}", "checkpoints.buckt: Extra inputs are not permitted (did you mean checkpoints.bucket?)"),
    ("queues: [{name: team-a, quota: {1xl4: 4}, usrs: [alice]}]",
     "queues.0.usrs: Extra inputs are not permitted (did you mean queues.0.users?)"),
])
def test_invalid_config_is_refused_with_the_field_and_reason(tmp_path, text, message):
    path = tmp_path / "zen.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as excinfo:
        load_config(path)
    assert message in str(excinfo.value)


def test_a_price_in_exponent_form_is_the_number_yaml_1_2_reads(tmp_path):
    raw = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    raw.pop("pricing", None)
    machine = raw["clusters"][0]["machine_type"]
    path = tmp_path / "zen.yaml"  # PyYAML reads 2.9e1 as a string; terraform's yamldecode as 29
    path.write_text(yaml.safe_dump(raw) + f"pricing: {{usd_per_vm_hour: {{{machine}: 2.9e1}}}}\n")
    assert load_config(path).pricing.usd_per_vm_hour == {machine: 29.0}


def test_aliases_are_read_once_and_an_alias_of_itself_is_a_config_error(tmp_path):
    path = tmp_path / "zen.yaml"
    path.write_text("x_extra: &a [*a]\n")  # the key walk recursed without end
    with pytest.raises(ConfigError, match="x_extra"):
        load_config(path)
    nested = "l0: &l0 {k: v}\n" + "".join(  # 9 aliases of 9 aliases ...: 9**7 paths walked, seconds
        f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n" for i in range(1, 10))
    from zen.core.documents import load_yaml
    assert len(load_yaml(nested)["l9"]) == 9  # in milliseconds, as yaml.safe_load


def test_missing_config_file_says_so(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_the_planners_hedging_and_keeping_knobs_reach_its_timing():
    from zen.scaling.manager import timing_from_config

    config = load_config(DEFAULT_CONFIG_PATH)
    scaling = config.scaling.model_copy(update={"hedge_risk": 0.5, "keep_factor": 0.0, "stockout_memory_s": 600,
                                                "preference_s": 5})
    timing = timing_from_config(config.model_copy(update={"scaling": scaling}))
    assert (timing.hedge_risk, timing.keep_factor, timing.trust_s, timing.preference_s) == (0.5, 0.0, 600, 5)
    # A silent agent is judged dead no sooner than a job on it is LOST (the default 180 s otherwise).
    slow = config.deadlines.model_copy(update={"heartbeat_timeout_s": 300})
    assert timing_from_config(config.model_copy(update={"deadlines": slow})).agent_silence_s == 300


def test_pull_limits_per_cluster_default_to_none_and_refuse_what_is_not_a_limit(tmp_path):
    assert all(c.max_jobs_per_vm_day is None and c.max_gpu_hours_per_vm_day is None
               for c in load_config(DEFAULT_CONFIG_PATH).clusters)
    cluster = "  - {name: a, gpu_type: t, gpu_count: 4, regions: [r], max_vms_per_region: 1, max_vms: 1, %s}"
    path = tmp_path / "zen.yaml"
    path.write_text("clusters:\n" + cluster % "max_jobs_per_vm_day: 20, max_gpu_hours_per_vm_day: 40")
    [limited] = load_config(path).clusters
    assert (limited.max_jobs_per_vm_day, limited.max_gpu_hours_per_vm_day) == (20, 40.0)
    assert limited.pull_limits_text() == "20 jobs / 40 GPU-hours in 24 h"
    for fields, message in (("max_jobs_per_vm_day: 0", "max_jobs_per_vm_day: Input should be greater than or equal to 1"),
                            ("max_gpu_hours_per_vm_day: -1", "max_gpu_hours_per_vm_day: Input should be greater than 0"),
                            ("max_jobs_per_vm_day: 2.5", "max_jobs_per_vm_day: Input should be a valid integer")):
        path.write_text("clusters:\n" + cluster % fields)
        with pytest.raises(ConfigError, match=message):
            load_config(path)


def test_a_regional_mig_larger_than_compute_allows_is_refused(tmp_path):
    """A regional MIG holds 2000 VMs at most: a larger bound had every resize past it refused, pass after pass."""
    path = tmp_path / "zen.yaml"
    path.write_text("clusters:\n  - {name: a, gpu_type: t, gpu_count: 4, regions: [r], max_vms_per_region: 2001, "
                    "max_vms: 2001}")
    with pytest.raises(ConfigError, match="max_vms_per_region: Input should be less than or equal to 2000"):
        load_config(path)
