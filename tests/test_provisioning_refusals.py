"""Bad provisioning, start-bound, checkpoint and pricing input is refused naming the field and what it
accepts, with nothing half-applied: a job message through the submission function (acked, recorded, no
job row), `zen submit` (a usage error, nothing published) and the configuration's load (no configuration)."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from tests.messages import job_request
from tests.test_bad_input import snapshot
from zen.cli.main import main
from zen.core.config import DEFAULT_CONFIG_PATH, load_config
from zen.core.errors import ConfigError

ACCEPTED = "one provisioning model, written as text: spot, standard, flex-start, or any (every model its cluster lists)"
CHECKPOINT = ("checkpoint: Input should be an object (a mapping) such as {every: 600}: seconds between saves, 30 to "
              "604800; {} saves every 600 s")

REFUSED = [
    (dict(provisioning=["spot", "standard"]),
     f"provisioning: {ACCEPTED}; not ['spot', 'standard'] (to accept several of its cluster's models, give any)"),
    (dict(provisioning=3), f"provisioning: {ACCEPTED}; not 3"),
    (dict(provisioning=True), f"provisioning: {ACCEPTED}; not True"),
    (dict(checkpoint=600), f"{CHECKPOINT}; not 600"),
    (dict(checkpoint=[{"every": 600}]), f"{CHECKPOINT}; not [{{'every': 600}}]"),
    # already refused as they should be: the field and the bound named
    (dict(provisioning="spto"), "provisioning: unknown provisioning model 'spto'; known: spot, standard, flex-start, or any "
     "(every model its cluster lists)"),
    (dict(max_start_wait_s="10m"), "max_start_wait_s: Input should be a valid integer of seconds, not '10m'"),
    (dict(max_start_wait_s=2**31), "max_start_wait_s: Input should be less than or equal to 2147483647"),
    (dict(checkpoint={"every": 0}), "checkpoint.every: Input should be greater than or equal to 30"),
]


@pytest.mark.parametrize("fields, reason", REFUSED, ids=[r for _, r in REFUSED])
def test_a_job_message_of_the_wrong_shape_is_refused_saying_what_is_accepted(zen_and_fn, fields, reason):
    zen, functions = zen_and_fn
    response = functions.send("on_job_submitted", json.dumps(job_request("r1", **fields)).encode(), message_id="m1")
    assert response.status_code == 200  # refused for good: acked, not redelivered
    jobs, history, rejected = snapshot(zen)
    assert jobs == [] and history == []  # nothing half-applied
    assert len(rejected) == 1 and rejected[0]["reason"] == f"invalid JobRequest: {reason}", rejected


@pytest.fixture
def submit(config, publisher, db_url, monkeypatch, tmp_path, capsys):
    """``zen submit`` of a job file with these fields (and flags): its exit code, its stderr, and what it published."""
    monkeypatch.setenv("ZEN_PROJECT", config.project)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)

    def run(fields: dict, *flags: str) -> tuple[int, str, list]:
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump({"cluster": "4xa100-40gb", "command": ["python", "t.py"], **fields}))
        code = main(["submit", str(path), *flags])
        return code, capsys.readouterr().err, publisher.on("zen-job-submitted")

    return run


@pytest.mark.parametrize("fields, flags, reason", [
    (dict(checkpoint=600), ["--checkpoint-every", "300"], "checkpoint must be a mapping (KEY: VALUE lines under it), "
     "not 600"),
    (dict(env=["A=1"]), ["--env", "B=2"], "env must be a mapping (KEY: VALUE lines under it), not ['A=1']"),
    (dict(array=3), ["--array", "2"], "array must be a mapping (KEY: VALUE lines under it), not 3"),
])
def test_a_job_file_field_a_flag_adds_to_that_is_no_mapping_is_a_usage_error(submit, fields, flags, reason):
    """The flag's fields were laid over the file's with ``{**value}``: a TypeError ("'int' object is not a
    mapping") that named neither the file nor the field."""
    code, err, published = submit(fields, *flags)
    assert (code, published) == (2, [])
    assert err.strip().endswith(f"job.yaml: {reason}"), err


def test_zen_submit_says_what_provisioning_accepts(submit):
    code, err, published = submit(dict(provisioning=["spot", "standard"]))
    assert (code, published) == (2, [])
    assert f"job.yaml: provisioning: {ACCEPTED}; not ['spot', 'standard'] (to accept several" in err, err


def test_a_flags_bad_value_is_not_blamed_on_the_job_file(submit):
    """The file has no max_start_wait_s: naming the file sent its reader looking for what the flag gave."""
    code, err, published = submit(dict(provisioning="spot"), "--max-start-wait", "-5")
    assert (code, published) == (2, [])
    assert err.strip() == "zen: invalid job request: max_start_wait_s: Input should be greater than or equal to 0"


def _configuration(tmp_path, change) -> str:
    raw = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    change(raw)
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _cluster(**fields):
    return lambda raw: raw["clusters"][0].update(fields)


def _pricing(**fields):
    return lambda raw: raw.update(pricing=fields)


CONFIG_REFUSED = [
    (_cluster(provisioning=["spot", "standard", "spot"]),
     "clusters.0.provisioning: spot is listed twice: list each provisioning model once"),
    (_cluster(provisioning=[]), "clusters.0.provisioning: list at least one provisioning model (spot, standard, "
     "flex-start), the first the primary; or leave provisioning out for [standard]"),
    (_cluster(provisioning="spot"),
     "clusters.0.provisioning: a list of provisioning models, the first the primary (e.g. [spot]); not spot"),
    (_pricing(overrides={"g2-standard-8": {"us-central1": {"standard": math.nan}}}),
     "pricing.overrides.g2-standard-8.us-central1.standard: a finite number, not nan"),
    # already refused as they should be
    (_cluster(provisioning=["spto"]), "clusters.0.provisioning: unknown provisioning model 'spto'; known: spot, "
     "standard, flex-start"),
    (_cluster(max_start_wait_s="10m"), "clusters.0.max_start_wait_s: a number, not '10m'"),
    (_cluster(provisioning=["flex-start"], max_start_wait_s=60), "clusters.0: max_start_wait_s (60) is below "
     "flex_start_min_wait_s (300) and flex-start is the cluster's only model"),
    (_pricing(overrides={"g2-standard-8": {"us-central1": {"spto": 1.0}}}),
     "pricing.overrides: g2-standard-8.us-central1: unknown provisioning model 'spto'"),
    (_pricing(overrides={"g2-standard-8": {"us-central1": {"standard": -1}}}),
     "pricing.overrides.g2-standard-8.us-central1.standard: Input should be greater than 0"),
    (_pricing(overrides={"g2-standard-8": {"us-central1": {"standard": "1.20"}}}),
     "pricing.overrides.g2-standard-8.us-central1.standard: a number, not '1.20'"),
    (_pricing(overrides={"g2-standard-8": {"us-west9": {"standard": 1.0}}}),
     "pricing.overrides.g2-standard-8.us-west9: no cluster of machine type g2-standard-8 runs in us-west9"),
    (_pricing(usd_per_vm_hour={"g2-standard-9": 1.0}),
     "pricing.usd_per_vm_hour.g2-standard-9: no cluster has machine type g2-standard-9"),
    (lambda raw: (_cluster(regions=["us-central1", "asia-east1"], provisioning=["standard", "spot"])(raw),
                  _pricing(catalog=False, overrides={"g2-standard-8": {"asia-east1": {"standard": 1.0}}})(raw)),
     "pricing.catalog is false and the price snapshot has no g2-standard-8 in asia-east1 (spot; cluster 1xl4): "
     "give it in pricing.overrides.g2-standard-8.asia-east1.spot (USD per VM-hour), or read the catalog"),
]


@pytest.mark.parametrize("change, reason", CONFIG_REFUSED, ids=[r for _, r in CONFIG_REFUSED])
def test_a_configuration_of_bad_provisioning_or_prices_is_refused_naming_the_field(tmp_path, change, reason):
    path = _configuration(tmp_path, change)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert reason in str(refused.value), refused.value
    assert load_config(_configuration(tmp_path, lambda raw: None)).clusters[0].provisioning == ["standard"]
