"""Prices Zen knows: the committed snapshot, the Cloud Billing Catalog read through the official client
(here against the stand-in, zen_dev.local.billing), their daily refresh by the scale tick into Postgres,
the configuration's overrides, GCE's billing arithmetic, and what `zen clusters`, `zen usage` and
`zen stats` show of them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
import yaml

from tests.messages import agent_run, job_request
from zen.adapters.billing import catalog_client, catalog_fetcher, classify, fetch_prices, parts_of, vm_prices
from zen.app import Zen
from zen.cli import main as cli
from zen.core.config import DEFAULT_CONFIG_PATH, ZenConfig, load_config
from zen.core.errors import ConfigError
from zen.core.prices import (SHAPES, Price, PriceTable, Pricing, billed_seconds, billed_usd, effective, load_snapshot,
                             model_of_vm, pool_prices)
from zen.core.provisioning import MODELS
from zen.store import prices as price_store
from zen_dev.local.billing import CatalogStandIn, serve

NOW = datetime(2026, 11, 29, tzinfo=timezone.utc)
A2_4G = 14.69354  # the snapshot's a2-highgpu-4g, us-central1 and us-west1, standard
A2_4G_SPOT = 4 * 1.293355


@pytest.fixture(scope="module")
def catalog():
    """The Catalog stand-in serving SKUs built from the committed snapshot, in pages of 7."""
    state = CatalogStandIn.from_snapshot()
    server = serve(state)
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


# -- GCE's billing ---------------------------------------------------------------------------------
def test_gce_bills_a_one_minute_minimum_then_per_second():
    assert [billed_seconds(s) for s in (0, -1, 1, 59, 60, 61, 90.2)] == [0, 0, 60, 60, 60, 61, 91]
    assert billed_usd(59, 3600.0) == 60.0 and billed_usd(61, 3600.0) == 61.0


# -- the snapshot ----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [DEFAULT_CONFIG_PATH, DEFAULT_CONFIG_PATH.parents[2] / "zen_dev/demo/zen-demo.yaml"])
def test_the_snapshot_prices_every_cluster_of_the_shipped_configurations_in_every_region_and_model(path):
    snapshot = load_snapshot()
    for cluster in load_config(path).clusters:
        for region in cluster.regions:
            for model in MODELS:
                price = snapshot.lookup(cluster.machine_type, region, model)
                assert price is not None and price.source == "snapshot", (cluster.name, region, model)
    header = json.loads((DEFAULT_CONFIG_PATH.parent / "price_snapshot.json").read_text())["header"]
    assert header["fetched"] and "Catalog" in header["source"] and header["flex_start"]
    a100 = snapshot.lookup("a2-highgpu-8g", "us-central1", "standard")
    assert a100 is not None and a100.usd_per_hour == pytest.approx(29.387, abs=0.01)  # 8 x A100 on demand
    spot, std = (snapshot.lookup("g2-standard-8", "us-central1", m) for m in ("spot", "standard"))
    assert spot is not None and std is not None and spot.usd_per_hour < std.usd_per_hour


def test_a_clusters_pools_are_priced_by_region_and_model():
    cluster = load_config().clusters[1].model_copy(update={"provisioning": ["spot", "standard"]})
    pools = pool_prices(load_snapshot(), cluster)
    assert set(pools) == {"us-central1", "us-central1/standard", "us-west1", "us-west1/standard",
                          "europe-west4", "europe-west4/standard"}
    assert pools["us-central1"].usd_per_hour == pytest.approx(A2_4G_SPOT)
    assert pools["us-central1/standard"].usd_per_hour == pytest.approx(A2_4G)


def test_a_vms_model_is_its_migs():
    cluster = load_config().clusters[1].model_copy(update={"provisioning": ["standard", "spot", "flex-start"]})
    assert model_of_vm(cluster, "zen-4xa100-40gb-us-west1-ab12", "us-west1") == "standard"
    assert model_of_vm(cluster, "zen-4xa100-40gb-us-west1-spot-ab12", "us-west1") == "spot"
    assert model_of_vm(cluster, "zen-4xa100-40gb-us-west1-flex-ab12", "us-west1") == "flex-start"
    assert model_of_vm(cluster, "vm-a", "us-west1") == "standard"  # no pool's name: the first model


# -- the catalog's SKUs ----------------------------------------------------------------------------
def test_sku_descriptions_say_part_family_and_model():
    assert classify("A2 Instance Core running in Americas") == ("core", "A2", "standard")
    assert classify("Spot Preemptible A2 Instance Ram running in Belgium") == ("ram", "A2", "spot")
    assert classify("DWS Defined Duration A2 Core running in Americas") == ("core", "A2", "flex-start")
    assert classify("Nvidia Tesla A100 GPU running in Americas") == ("gpu", "Nvidia Tesla A100", "standard")
    assert classify("Nvidia L4 GPU attached to Spot Preemptible VMs running in Netherlands") == (
        "gpu", "Nvidia L4", "spot")
    assert classify("Nvidia Tesla A100 GPU attached to DWS Defined Duration VMs running in Americas") == (
        "gpu", "Nvidia Tesla A100", "flex-start")
    assert classify("Nvidia Tesla A100 80GB GPU running in Americas")[1] == "Nvidia Tesla A100 80GB"
    for skipped in ("Commitment v1: A2 Cpu in Americas for 1 Year", "Reserved A2 Instance Core running in Americas",
                    "N2 Custom Instance Core running in Americas", "Storage PD Capacity"):
        assert classify(skipped) is None


def _sku(description: str, region: str, usd: float):
    units = int(usd)
    money = SimpleNamespace(units=units, nanos=round((usd - units) * 1e9))
    rate = SimpleNamespace(start_usage_amount=0, unit_price=money)
    return SimpleNamespace(description=description, service_regions=[region],
                           pricing_info=[SimpleNamespace(pricing_expression=SimpleNamespace(tiered_rates=[rate]))])


def test_a_part_two_skus_price_in_one_region_takes_the_higher_whatever_the_order_and_usd_only():
    """The catalog lists two SKUs for us-east4's G2 cores ("Virginia", "Northern Virginia"): the price was the
    last page's. A price in another currency was read as USD."""
    cheap, dear = (_sku("G2 Instance Core running in Virginia", "us-east4", 0.0250),
                   _sku("G2 Instance Core running in Northern Virginia", "us-east4", 0.0275))
    for skus in ([cheap, dear], [dear, cheap]):
        assert parts_of(skus) == {("core", "G2", "us-east4", "standard"): pytest.approx(0.0275)}
    euros = _sku("G2 Instance Ram running in Virginia", "us-east4", 0.003)
    euros.pricing_info[0].pricing_expression.tiered_rates[0].unit_price.currency_code = "EUR"
    assert parts_of([euros]) == {}


def test_a_vm_is_its_vcpus_memory_and_gpus():
    # us-central1 on demand, as the public catalog listed them: 12 x core + 85 GiB x RAM + 1 A100
    skus = [_sku("A2 Instance Core running in Americas", "us-central1", 0.031611),
            _sku("A2 Instance Ram running in Americas", "us-central1", 0.004237),
            _sku("Nvidia Tesla A100 GPU running in Americas", "us-central1", 2.933908),
            _sku("A2 Instance Core running in Americas", "us-west1", 0.031611)]  # no RAM or GPU there
    table = vm_prices(parts_of(skus), ["a2-highgpu-1g", "a2-highgpu-8g", "x9-unknown"], NOW)
    assert set(table.prices) == {("a2-highgpu-1g", "us-central1", "standard"), ("a2-highgpu-8g", "us-central1", "standard")}
    one = table.prices[("a2-highgpu-1g", "us-central1", "standard")]
    assert one.usd_per_hour == pytest.approx(3.673385, abs=1e-6) and one.source == "catalog" and one.fetched_at == NOW
    assert table.prices[("a2-highgpu-8g", "us-central1", "standard")].usd_per_hour == pytest.approx(8 * 3.673385)


def test_the_official_client_reads_the_stand_ins_pages_into_the_snapshots_prices(catalog):
    state, endpoint = catalog
    before = state.calls
    machines = sorted({c.machine_type for c in load_config().clusters} | {"g2-standard-4", "g2-standard-32"})
    table = fetch_prices(catalog_client(endpoint), machines, None, NOW)
    snapshot = load_snapshot()
    expected = {k: p for k, p in snapshot.prices.items() if k[0] in machines}
    assert set(table.prices) == set(expected) and len(expected) == len(machines) * 4 * 3
    for key, price in table.prices.items():
        assert price.usd_per_hour == pytest.approx(expected[key].usd_per_hour, abs=1e-5), key
    assert state.calls - before == -(-len(state.skus) // state.page_size)  # every page, one call each
    only = fetch_prices(catalog_client(endpoint), ["a2-highgpu-4g"], ["us-west1"], NOW)
    assert {k[1] for k in only.prices} == {"us-west1"}


# -- overrides and bad input -----------------------------------------------------------------------
def test_overrides_win_over_the_catalog_and_the_snapshot():
    snapshot = load_snapshot()
    catalog = PriceTable({("a2-highgpu-4g", "us-central1", "standard"): Price(13.0, "catalog", NOW)})
    pricing = Pricing.model_validate({"overrides": {"a2-highgpu-4g": {"us-west1": {"spot": 2.5}}}})
    table = effective(pricing, snapshot, catalog)
    assert table.lookup("a2-highgpu-4g", "us-central1", "standard") == Price(13.0, "catalog", NOW)
    assert table.lookup("a2-highgpu-4g", "us-west1", "spot") == Price(2.5, "override")
    assert table.lookup("a2-highgpu-4g", "us-west1", "standard").source == "snapshot"
    off = effective(pricing.model_copy(update={"catalog": False}), snapshot, catalog)
    assert off.lookup("a2-highgpu-4g", "us-central1", "standard").source == "snapshot"
    flat = effective(Pricing(usd_per_vm_hour={"a2-highgpu-4g": 9.0},
                             overrides={"a2-highgpu-4g": {"us-west1": {"spot": 2.5}}}), snapshot, catalog)
    assert flat.lookup("a2-highgpu-4g", "us-central1", "standard") == Price(9.0, "override")  # every region/model
    assert flat.lookup("a2-highgpu-4g", "us-west1", "spot") == Price(2.5, "override")  # the exact one wins


def test_clusters_of_one_machine_type_with_other_gpus_are_refused_naming_both():
    """Prices are per machine type: a 1xt4 and a 1xv100 cluster both on n1-standard-8 were ranked, shown and
    billed at one price (the T4's, from `pricing`) with nothing said."""
    clusters = [{"name": name, "gpu_type": gpu, "gpu_count": 1, "machine_type": "n1-standard-8",
                 "regions": ["us-central1"], "max_vms_per_region": 1, "max_vms": 1}
                for name, gpu in (("1xt4", "nvidia-tesla-t4"), ("1xv100", "nvidia-tesla-v100"))]
    with pytest.raises(ValueError, match=r"clusters 1xt4 and 1xv100 share machine type n1-standard-8 with other GPUs"):
        ZenConfig.model_validate({"clusters": clusters, "pricing": {"usd_per_vm_hour": {"n1-standard-8": 0.73}}})
    assert len(ZenConfig.model_validate({"clusters": clusters}).clusters) == 2  # unpriced: nothing to mistake
    clusters[1]["machine_type"] = "n1-highmem-8"
    config = ZenConfig.model_validate({"clusters": clusters, "pricing": {"usd_per_vm_hour": {"n1-standard-8": 0.73}}})
    assert config.clusters[1].machine_type == "n1-highmem-8"


@pytest.mark.parametrize("pricing, named", [
    ({"overrides": {"a2-highgpu-4g": {"us-west1": {"spott": 2.5}}}}, "pricing.overrides: a2-highgpu-4g.us-west1"),
    ({"overrides": {"a2-highgpu-4g": {"us-west1": {"spot": -1}}}}, "pricing.overrides.a2-highgpu-4g.us-west1.spot"),
    ({"usd_per_vm_hour": {"a2-highgpu-4g": -3}}, "pricing.usd_per_vm_hour.a2-highgpu-4g"),
    ({"catalgo": False}, "pricing.catalgo"),
])
def test_a_bad_price_is_refused_naming_its_field(tmp_path, pricing, named):
    raw = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    raw["pricing"] = pricing
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert named in str(refused.value)
    if "spott" in str(pricing):
        assert "unknown provisioning model 'spott'" in str(refused.value)


# -- the daily refresh into Postgres ----------------------------------------------------------------
def _stored(db) -> PriceTable:
    with db.transaction() as session:
        return price_store.stored(session)


def test_refresh_stores_then_skips_while_fresh_and_keeps_old_prices_when_the_catalog_fails(db, catalog):
    state, endpoint = catalog
    fetch = catalog_fetcher(load_config().clusters, endpoint)
    first = price_store.refresh_if_stale(db, fetch, NOW)
    assert first.outcome == "refreshed" and first.prices == 3 * 3 * 3 + 3 * 3  # 2 A100 shapes x 3 regions, L4 x 3
    stored = _stored(db)
    assert stored.lookup("g2-standard-8", "us-east4", "spot").source == "catalog"
    calls = state.calls
    assert price_store.refresh_if_stale(db, fetch, NOW + timedelta(hours=23)).outcome == "fresh"
    assert state.calls == calls  # fresh: one query of the database, no catalog call

    state.fail_next = 10  # the catalog is down
    later = NOW + timedelta(hours=25)
    failed = price_store.refresh_if_stale(db, fetch, later)
    assert failed.outcome == "failed" and "503" in failed.error
    assert _stored(db).prices == stored.prices  # the old prices stay
    waiting = price_store.refresh_if_stale(db, fetch, later + timedelta(minutes=30))
    assert waiting.outcome == "waiting" and state.fail_next > 0  # no call again within the hour
    state.fail_next = 0
    again = price_store.refresh_if_stale(db, fetch, later + timedelta(hours=1, seconds=1))
    assert again.outcome == "refreshed"
    assert _stored(db).lookup("g2-standard-8", "us-east4", "spot").fetched_at == later + timedelta(hours=1, seconds=1)


def test_a_cluster_configured_after_a_refresh_is_priced_within_the_hour_not_the_day(db):
    """A machine type (or region) deployed after the daily refresh: the tick answered "fresh" for up to a day,
    and its attempts' prices were fixed from the snapshot, or left unpriced for shapes the snapshot lacks.
    A catalog that does not list a pair costs one fetch an hour, not one every tick."""
    asked: list[datetime] = []

    def fetch(now):
        asked.append(now)
        return PriceTable({("a2-highgpu-4g", "us-central1", "standard"): Price(14.0, "catalog", now),
                           ("g2-standard-24", "us-central1", "standard"): Price(2.0, "catalog", now)})

    old = {("a2-highgpu-4g", "us-central1")}
    new = old | {("g2-standard-24", "us-central1"), ("g2-standard-24", "mars-north1")}  # the last, listed nowhere
    assert price_store.refresh_if_stale(db, fetch, NOW, wanted=old).outcome == "refreshed"
    assert price_store.refresh_if_stale(db, fetch, NOW + timedelta(minutes=30), wanted=new).outcome == "fresh"
    assert price_store.refresh_if_stale(db, fetch, NOW + timedelta(hours=1, seconds=1), wanted=new).outcome == "refreshed"
    assert _stored(db).lookup("g2-standard-24", "us-central1", "standard").source == "catalog"
    for minutes in (1, 30, 59):  # mars-north1 is still unpriced: not asked again within the hour
        assert price_store.refresh_if_stale(db, fetch, NOW + timedelta(hours=1, minutes=minutes), wanted=new).outcome == "fresh"
    assert len(asked) == 2
    assert price_store.refresh_if_stale(db, fetch, NOW + timedelta(hours=5), wanted=old).outcome == "fresh"


def test_the_scale_tick_refreshes_prices_and_a_catalog_failure_never_fails_it(config, db, publisher, clock, catalog):
    state, endpoint = catalog
    zen = Zen(config, db, publisher, clock, price_fetch=catalog_fetcher(config.clusters, endpoint))
    assert zen.on_scale_tick().prices == "refreshed"
    assert zen.on_scale_tick().prices == "fresh"
    clock.advance(25 * 3600)
    state.fail_next = 10
    try:
        assert zen.on_scale_tick().prices == "failed"
    finally:
        state.fail_next = 0
    assert _stored(db).lookup("a2-highgpu-8g", "us-west1", "flex-start") is not None
    broken = Zen(config, db, publisher, clock, price_fetch=lambda now: 1 / 0)  # a fetch that raises anything
    clock.advance(2 * 3600)
    assert broken.on_scale_tick().prices == "failed"


def test_a_machine_type_the_catalog_cannot_price_costs_no_catalog_read_an_hour(config, db, publisher, clock):
    """The catalog prices cores, memory and GPUs of the machine types Zen knows (SHAPES): a cluster of another
    (an N1 with attached GPUs, say) is never priced by it, and each tick past the hour read the whole catalog
    again for it."""
    raw = json.loads(config.model_dump_json())
    raw["clusters"][0]["machine_type"] = "n1-standard-8"
    unknown = ZenConfig.model_validate(raw)
    asked: list[datetime] = []

    def fetch(now):
        asked.append(now)
        return PriceTable({(c.machine_type, r, m): Price(1.0, "catalog", now) for c in unknown.clusters
                           if c.machine_type in SHAPES for r in c.regions for m in MODELS})

    zen = Zen(unknown, db, publisher, clock, price_fetch=fetch)
    assert zen.on_scale_tick().prices == "refreshed"
    for _ in range(3):
        clock.advance(3600 + 1)
        assert zen.on_scale_tick().prices == "fresh"
    assert len(asked) == 1



def test_clusters_the_catalog_can_price_none_of_cost_no_catalog_read_and_no_failure(config, db, publisher, clock,
                                                                                   catalog, caplog):
    """Every cluster on a machine type the catalog cannot price (priced by the user's overrides, as the docs say):
    the tick read the whole catalog every hour, found none of them, and logged the catalog as failed each time."""
    state, endpoint = catalog
    raw = json.loads(config.model_dump_json())
    for n, cluster in enumerate(raw["clusters"]):  # one machine type each: a VM is priced by its machine type
        cluster["machine_type"] = f"n1-standard-{2 ** (n + 1)}"
    raw["pricing"] = {"usd_per_vm_hour": {c["machine_type"]: 1.5 for c in raw["clusters"]}}
    unknown = ZenConfig.model_validate(raw)
    zen = Zen(unknown, db, publisher, clock, price_fetch=catalog_fetcher(unknown.clusters, endpoint))
    reads = state.calls
    outcomes = [zen.on_scale_tick().prices]
    for _ in range(2):
        clock.advance(3600 + 1)
        outcomes.append(zen.on_scale_tick().prices)
    assert outcomes == ["none"] * 3 and state.calls == reads
    assert not [r for r in caplog.records if "billing catalog failed" in r.getMessage()]

# -- what the commands show ------------------------------------------------------------------------
def test_zen_clusters_shows_prices_per_region_and_model(db, db_url, monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("ZEN_DATABASE_URL", raising=False)
    monkeypatch.delenv("ZEN_CLOUDSQL_INSTANCE", raising=False)
    assert cli.main(["clusters"]) == 0
    out = capsys.readouterr().out
    assert "from the snapshot (no database configured)" in out
    rows = [line.split() for line in out.splitlines()]
    assert ["4xa100-40gb", "us-west1", "spot", "no", "5.1734", "1.2934", "snapshot", "2025-03-06"] in rows

    with db.transaction() as session:  # the catalog said otherwise yesterday
        price_store.store(session, PriceTable({("a2-highgpu-4g", "us-west1", "spot"): Price(4.0, "catalog", NOW)}), NOW)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    assert cli.main(["clusters", "--json"]) == 0
    clusters = {c["cluster"]: c for c in json.loads(capsys.readouterr().out)}
    spot_west = next(p for p in clusters["4xa100-40gb"]["prices"] if (p["region"], p["model"]) == ("us-west1", "spot"))
    assert spot_west == {"cluster": "4xa100-40gb", "region": "us-west1", "model": "spot", "used": False,
                         "usd_per_vm_hour": 4.0, "usd_per_gpu_hour": 1.0, "source": "catalog", "fetched": "2026-11-29"}

    raw = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())  # the catalog not read: the header said it was
    raw["pricing"] = {"catalog": False}
    (tmp_path / "zen.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("ZEN_CONFIG", str(tmp_path / "zen.yaml"))
    assert cli.main(["clusters"]) == 0
    out = capsys.readouterr().out
    assert "from the snapshot (pricing.catalog is false)" in out and " catalog " not in out


def test_zen_clusters_says_when_the_catalog_read_fails_and_the_stored_prices_are_kept(db, db_url, monkeypatch, capsys):
    """A catalog that keeps failing left prices of months ago shown as "catalog 2024-01-01" with no word: only an
    hourly WARNING in the tick's log said the read failed."""
    with db.transaction() as session:
        price_store.store(session, PriceTable({("a2-highgpu-4g", "us-west1", "spot"): Price(4.0, "catalog", NOW)}), NOW)
    later = NOW + timedelta(days=40)
    assert price_store.refresh_if_stale(db, lambda now: (_ for _ in ()).throw(PermissionError("403 billing API off")),
                                        later).error
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    assert cli.main(["clusters"]) == 0
    out = capsys.readouterr().out
    assert (f"its last read ({later:%Y-%m-%d %H:%M} UTC) failed, kept from {NOW:%Y-%m-%d}: PermissionError: 403 "
            "billing API off") in out, out
    assert cli.main(["clusters", "--json"]) == 0  # what scripts read says it too (it said nothing)
    assert all("403 billing API off" in row["prices_from"] for row in json.loads(capsys.readouterr().out))


def test_zen_clusters_marks_an_unpriced_machine_type(tmp_path, monkeypatch, capsys):
    raw = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    raw["clusters"][0]["machine_type"] = "g9-unknown-8"
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    monkeypatch.delenv("ZEN_DATABASE_URL", raising=False)
    assert cli.main(["clusters"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["1xl4", "us-central1", "standard", "yes", "unpriced", "unpriced", "-", "-"] in rows


def test_zen_clusters_states_the_worst_case_spend(monkeypatch, capsys):
    """The defaults allow 20 GPU VMs, and nothing said what that may cost an hour: every cluster at its
    max_vms, each VM at the dearest price among its regions and used models."""
    from zen.cli.clusters import known_prices, price_rows
    from zen.core.config import load_config

    monkeypatch.delenv("ZEN_DATABASE_URL", raising=False)
    monkeypatch.delenv("ZEN_CLOUDSQL_INSTANCE", raising=False)
    config = load_config()
    table, _ = known_prices(config)
    expected = sum(c.max_vms * max(r["usd_per_vm_hour"] for r in price_rows(table, c) if r["used"])
                   for c in config.clusters)
    assert cli.main(["clusters"]) == 0
    out = capsys.readouterr().out
    vms = sum(c.max_vms for c in config.clusters)
    assert f"At most {vms} GPU VMs at once (every cluster's max_vms): up to ${expected:,.2f} an hour" in out
    assert "Idle, no GPU VM runs (min_vms 0)." in out


@pytest.fixture
def config(project, tmp_path, monkeypatch) -> ZenConfig:
    """The default configuration, its 4xa100-40gb cluster using standard VMs and spot VMs (its MIGs
    zen-4xa100-40gb-<region> and zen-4xa100-40gb-<region>-spot), as the commands read it too."""
    raw = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    raw["project"] = project
    raw["clusters"][1]["provisioning"] = ["standard", "spot"]
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    return load_config(path)


def _run(functions, clock, job_id: str, vm: str, region: str, seconds: float) -> None:
    functions.submit(job_request(job_id))
    beats = agent_run(job_id, vm=vm)
    for beat in beats:
        beat.update(region=region, zone=f"{region}-a")
    functions.heartbeat(beats[0])
    clock.advance(seconds)
    for beat in beats[1:]:
        functions.heartbeat(beat)


def test_usage_and_stats_bill_each_attempt_at_its_regions_and_models_price(functions, clock, capsys):
    # Per second: GCE's one-minute minimum is the VM's (met by its boot), not each job's.
    _run(functions, clock, "std-1", "zen-4xa100-40gb-us-central1-ab12", "us-central1", 45)
    _run(functions, clock, "spot-1", "zen-4xa100-40gb-us-west1-spot-cd34", "us-west1", 1801)
    standard, spot = A2_4G * 45 / 3600, A2_4G_SPOT * 1801 / 3600
    assert cli.main(["usage", "--since", "2025-12-01", "--by", "region", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    usd = {g["region"]: g["usd"] for g in report["groups"]}
    assert usd == {"us-central1": round(standard, 2), "us-west1": round(spot, 2)}
    assert report["total"]["usd"] == round(standard + spot, 2) and report["unpriced"] == []

    assert cli.main(["stats", "--json", "--window", str(10 ** 7)]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert [(r["region"], r["model"], r["attempts"], r["usd"]) for r in figures["attempt_usd"]] == [
        ("us-central1", "standard", 1, round(standard, 2)), ("us-west1", "spot", 1, round(spot, 2))]
    assert [r["vm_hours"] for r in figures["attempt_usd"]] == [round(45 / 3600, 3), round(1801 / 3600, 3)]
    assert cli.main(["stats", "--window", str(10 ** 7)]) == 0
    assert "attempt_usd: USD of the attempts" in capsys.readouterr().out


def test_an_attempt_is_billed_per_second_at_the_model_and_price_it_ran_at(functions, zen, clock, capsys, tmp_path,
                                                                          monkeypatch):
    """Ten 5 s jobs back to back on one VM cost its 50 s (GCE's minute is the VM's, met by its boot), and a
    finished attempt keeps its model and price: neither a later catalog price nor a reordered or removed
    cluster changes what it cost."""
    for i in range(10):
        _run(functions, clock, f"quick-{i}", "zen-4xa100-40gb-us-central1-ab12", "us-central1", 5)
    _run(functions, clock, "hour-1", "zen-4xa100-40gb-us-west1-spot-cd34", "us-west1", 3600)

    def by_region() -> dict:
        assert cli.main(["usage", "--since", "2025-12-01", "--by", "region", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["unpriced"] == []
        return {g["region"]: (g["attempts"], g["usd"]) for g in report["groups"]}

    billed = {"us-central1": (10, round(A2_4G * 50 / 3600, 2)), "us-west1": (1, round(A2_4G_SPOT, 2))}
    assert by_region() == billed
    later = clock() + timedelta(days=2)  # the daily refresh stores other prices
    with zen.db.transaction() as session:
        price_store.store(session, PriceTable({("a2-highgpu-4g", region, model): Price(3 * A2_4G, "catalog", later)
                                               for region in ("us-central1", "us-west1")
                                               for model in ("standard", "spot")}), later)
    raw = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    [cluster] = [c for c in raw["clusters"] if c["name"] == "4xa100-40gb"]
    cluster["provisioning"] = ["spot", "standard"]  # its primary MIG's VMs are now spot ones
    (path := tmp_path / "zen.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    assert by_region() == billed
    raw["clusters"].remove(cluster)  # the cluster removed
    path.write_text(yaml.safe_dump(raw))
    assert by_region() == billed


def test_every_known_shape_has_gpus_and_the_snapshot_names_only_known_models():
    assert all(shape.gpus >= 1 and shape.vcpus >= 4 for shape in SHAPES.values())
    assert {k[2] for k in load_snapshot().prices} == set(MODELS)


def test_the_billing_client_ships_with_the_functions_not_with_the_agents_wheel(tmp_path):
    import importlib.util
    import zipfile

    from tests.conftest import ROOT

    spec = importlib.util.spec_from_file_location("package", ROOT / "scripts" / "package.py")
    package = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(package)
    with zipfile.ZipFile(package.build_functions_archive(tmp_path, None)) as archive:
        assert "google-cloud-billing==1.21.0" in archive.read("requirements.txt").decode().splitlines()
    with zipfile.ZipFile(package.build_agent_wheel(tmp_path)) as wheel:
        metadata = next(n for n in wheel.namelist() if n.endswith("/METADATA"))
        requires = [line for line in wheel.read(metadata).decode().splitlines() if line.startswith("Requires-Dist")]
    assert requires and not any("billing" in line for line in requires)
    assert "zen/core/price_snapshot.json" in wheel.namelist()


def test_the_refresh_script_rebuilds_the_snapshot_from_the_catalog(catalog, tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT

    _, endpoint = catalog
    out = tmp_path / "snapshot.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "refresh_price_snapshot.py"), "--endpoint", endpoint,
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rebuilt, committed = load_snapshot(out), load_snapshot()
    # Every price the committed snapshot holds, not only the shipped configurations' three machine types: the
    # script dropped ten (a2-highgpu-1g, a cluster's default machine_type, among them), which a `catalog: false`
    # configuration or ZEN_PRICES=snapshot then found unpriced.
    assert set(rebuilt.prices) == set(committed.prices)
    for key, price in rebuilt.prices.items():
        assert price.usd_per_hour == pytest.approx(committed.prices[key].usd_per_hour, abs=1e-5)
    assert "Catalog API" in json.loads(out.read_text())["header"]["source"]


def test_a2_ultra_vms_are_priced_with_their_own_core_and_ram_skus():
    """The catalog names a2-ultragpu's vCPUs and RAM "A2 Ultra Instance Core/Ram": a family of two words,
    which the SKU reader dropped, so an a2-ultragpu VM was priced at a2-highgpu's core and RAM prices."""

    assert classify("A2 Ultra Instance Core running in Americas") == ("core", "A2 Ultra", "standard")
    assert classify("Spot Preemptible A2 Ultra Instance Ram running in Belgium") == ("ram", "A2 Ultra", "spot")
    assert classify("A2 Instance Core running in Americas") == ("core", "A2", "standard")
    here = ("us-central1", "standard")
    a2 = {("core", "A2", *here): 0.03, ("ram", "A2", *here): 0.004, ("gpu", "Nvidia Tesla A100 80GB", *here): 5.0,
          ("ssd", "Local SSD", *here): 0.0001}
    ultra = {**a2, ("core", "A2 Ultra", *here): 0.05, ("ram", "A2 Ultra", *here): 0.006}
    priced = vm_prices(ultra, ["a2-ultragpu-1g"], NOW).lookup("a2-ultragpu-1g", *here)
    assert priced is not None and priced.usd_per_hour == pytest.approx(12 * 0.05 + 170 * 0.006 + 5.0 + 375 * 0.0001)
    without = vm_prices(a2, ["a2-ultragpu-1g"], NOW).lookup("a2-ultragpu-1g", *here)  # none of its own: A2's
    assert without is not None and without.usd_per_hour == pytest.approx(12 * 0.03 + 170 * 0.004 + 5.0 + 375 * 0.0001)


def _rest_sku(n: int, description: str, unit: str, units: int, nanos: int, group: str) -> dict:
    """A Compute Engine SKU as the Catalog's REST API answers it, for us-central1 and two other regions."""
    return {"name": f"services/6F81-5844-456A/skus/TEST-{n:04d}", "skuId": f"TEST-{n:04d}", "description": description,
            "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": "Compute", "resourceGroup": group,
                         "usageType": "OnDemand"},
            "serviceRegions": ["us-central1", "us-east1", "us-west1"],
            "pricingInfo": [{"summary": "", "pricingExpression": {
                "usageUnit": unit, "displayQuantity": 1,
                "tieredRates": [{"startUsageAmount": 0,
                                 "unitPrice": {"currencyCode": "USD", "units": str(units), "nanos": nanos}}]}}]}


@pytest.mark.parametrize("machine, vcpus, ram_gib, gpus, ssd_gib", [("a3-highgpu-1g", 26, 234, 1, 750),
                                                                    ("a3-highgpu-8g", 208, 1872, 8, 6000)])
def test_an_a3_vm_read_from_the_catalog_costs_its_bundled_local_ssd_too(machine, vcpus, ram_gib, gpus, ssd_gib):
    """GCE bills an a3-highgpu-Ng with the 750 GiB of Local SSD per GPU it comes with ("SSD backed Local
    Storage", per GiB-month); the catalog's price was its vCPUs, RAM and GPUs alone: $0.66/h short on an 8g in
    us-central1, and short of the snapshot's published price, which holds the disk."""
    skus = [_rest_sku(1, "A3 Instance Core running in Americas", "h", 0, 25_498_000, "CPU"),
            _rest_sku(2, "A3 Instance Ram running in Americas", "GiBy.h", 0, 2_220_300, "RAM"),
            _rest_sku(3, "Nvidia H100 80GB GPU running in Americas", "h", 9, 796_550_569, "GPU"),
            _rest_sku(4, "SSD backed Local Storage", "GiBy.mo", 0, 80_000_000, "LocalSSD")]
    server = serve(CatalogStandIn(skus, page_size=2))
    try:
        table = fetch_prices(catalog_client(f"http://127.0.0.1:{server.server_address[1]}"), [machine],
                             ["us-central1"], NOW)
    finally:
        server.shutdown()
    billed = vcpus * 0.025498 + ram_gib * 0.0022203 + gpus * 9.796550569 + ssd_gib * 0.08 / 730
    assert billed == pytest.approx(load_snapshot().lookup(machine, "us-central1", "standard").usd_per_hour, abs=1e-3)
    priced = table.lookup(machine, "us-central1", "standard")
    assert priced is not None and priced.usd_per_hour == pytest.approx(billed, abs=1e-5)


def test_local_ssd_skus_are_read_per_model_and_a_model_without_one_takes_the_standard_price():
    assert classify("SSD backed Local Storage") == ("ssd", "Local SSD", "standard")
    assert classify("SSD backed Local Storage in Paris") == ("ssd", "Local SSD", "standard")
    assert classify("SSD backed Local Storage attached to Spot Preemptible VMs running in Paris") == (
        "ssd", "Local SSD", "spot")
    assert classify("DWS Defined Duration SSD backed Local Storage running in Americas") == (
        "ssd", "Local SSD", "flex-start")
    assert classify("Commitment v1: Local SSD In Americas for 1 Year") is None
    assert classify("SSD backed Local Storage attached to Sole Tenant VMs running in Americas") is None
    here, spot = ("us-central1", "standard"), ("us-central1", "spot")
    parts = {(kind, name, *where): usd for where in (here, spot)
             for kind, name, usd in (("core", "A3", 0.02), ("ram", "A3", 0.002), ("gpu", "Nvidia H100 80GB", 4.0))}
    table = vm_prices(parts, ["a3-highgpu-1g", "g2-standard-4"], NOW)
    assert table.lookup("a3-highgpu-1g", *here) is None  # no Local SSD price: no guess without the disk
    parts[("ssd", "Local SSD", *here)] = 0.0001
    table = vm_prices(parts, ["a3-highgpu-1g"], NOW)
    spot_price = table.lookup("a3-highgpu-1g", *spot)
    assert spot_price is not None and spot_price.usd_per_hour == pytest.approx(26 * 0.02 + 234 * 0.002 + 4.0 + 0.075)
