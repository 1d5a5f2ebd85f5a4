"""A configuration whose prices or machine types do not fit its clusters is refused at load, naming the
field (zen.core.prices.pricing_problem, zen.core.shapes): before, each loaded and went wrong later."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from zen.core.config import DEFAULT_CONFIG_PATH, ZenConfig, load_config
from zen.core.prices import Price, PriceTable


def _config(**changes) -> dict:
    raw = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    raw.update(changes)
    return raw


@pytest.mark.parametrize("pricing, field", [
    ({"overrides": {"g2-standard-8": {"us-centrall1": {"standard": 0.5}}}}, "pricing.overrides.g2-standard-8.us-centrall1"),
    ({"overrides": {"g2-standard-88": {"us-central1": {"standard": 0.5}}}}, "pricing.overrides.g2-standard-88"),
    ({"usd_per_vm_hour": {"g2-standrad-8": 0.5}}, "pricing.usd_per_vm_hour.g2-standrad-8"),
], ids=["region", "machine-type", "flat-machine-type"])
def test_an_override_for_no_clusters_pool_is_refused_naming_it(pricing, field):
    """Accepted before and never used: the catalog's or the snapshot's price applied, the user believing
    theirs did."""
    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        ZenConfig.model_validate(_config(pricing=pricing))


def test_without_the_catalog_a_pool_nothing_prices_is_refused_naming_the_override_to_add():
    raw = _config(pricing={"catalog": False})
    raw["clusters"][0].update(machine_type="a2-ultragpu-8g", gpu_type="nvidia-a100-80gb", gpu_count=8)
    with pytest.raises(ValidationError, match=r"the price snapshot has no a2-ultragpu-8g in us-central1 \(standard; "
                                              r"cluster 1xl4\): give it in pricing\.overrides\.a2-ultragpu-8g\."):
        ZenConfig.model_validate(raw)
    raw["pricing"]["overrides"] = {"a2-ultragpu-8g": {r: {"standard": 40.0} for r in raw["clusters"][0]["regions"]}}
    ZenConfig.model_validate(raw)  # priced by the overrides
    raw["pricing"] = {"catalog": True}
    ZenConfig.model_validate(raw)  # the catalog may price it


def test_a_machine_type_that_does_not_hold_the_clusters_gpus_is_refused_naming_the_ones_that_do():
    """8 A100s with machine_type left at its default (a2-highgpu-1g) loaded, was priced as one A100 and
    given a template GCE refuses (8 GPUs on a 1-GPU machine type)."""
    raw = _config()
    raw["clusters"][2].pop("machine_type")
    with pytest.raises(ValidationError, match="clusters.2 \\(8xa100-40gb\\): machine_type: a2-highgpu-1g holds 1 x "
                                              "Nvidia Tesla A100, not the cluster's gpu_count 8 x nvidia-tesla-a100; "
                                              "machine types that do: a2-highgpu-8g"):
        ZenConfig.model_validate(raw)
    raw["clusters"][2]["gpu_type"] = "nvidia-future-x"  # a GPU Zen does not know: not judged
    ZenConfig.model_validate(raw)


def test_a_flex_only_cluster_whose_jobs_give_their_runtime_still_loads():
    """Only jobs giving no max_runtime_s (or one over flex_start_run_s) cannot run on a flex-only cluster whose
    VMs live under limits.max_runtime_s, and submission refuses those naming the field; the cluster loads."""
    raw = load_config().model_dump(mode="json", exclude_unset=True)
    raw["clusters"].append({"name": "flex-1xa100", "gpu_type": "nvidia-tesla-a100", "gpu_count": 1,
                            "regions": ["us-central1"], "max_vms_per_region": 2, "max_vms": 2,
                            "provisioning": ["flex-start"], "flex_start_run_s": 86400})
    ZenConfig.model_validate(raw)


def test_zen_prices_snapshot_is_catalog_false(db, monkeypatch):
    """It only stopped the fetch: the catalog rows stored before, never refreshed again, still priced the
    planner, zen usage and zen clusters."""
    from datetime import datetime, timezone

    from zen.store import prices as price_store

    at = datetime(2025, 1, 1, tzinfo=timezone.utc)
    with db.transaction() as session:
        price_store.store(session, PriceTable({("g2-standard-8", "us-central1", "standard"): Price(99.0, "catalog", at)}),
                          at)
    monkeypatch.setenv("ZEN_PRICES", "snapshot")
    config = load_config()
    assert config.pricing.catalog is False
    with db.transaction() as session:
        used = price_store.current(session, config.pricing)
    assert used.lookup("g2-standard-8", "us-central1", "standard").source == "snapshot"


def test_zen_prices_snapshot_does_not_refuse_a_configuration_that_loads_without_it(monkeypatch):
    """ZEN_PRICES=snapshot is set where the functions run: a configuration the CLI and CI load must load there
    too (a pool the snapshot lacks is unpriced, as with the catalog down, not refused: every function would
    fail at start)."""
    from pathlib import Path

    path = Path(__file__).parent / "faults" / "fixtures" / "disk-share.yaml"
    monkeypatch.delenv("ZEN_PRICES", raising=False)
    assert any(c.machine_type == "g2-standard-24" for c in load_config(path).clusters)
    monkeypatch.setenv("ZEN_PRICES", "snapshot")
    load_config(path)
