"""Scenario files, MIGs from a Zen config, and the pure capacity schedule of the Compute stand-in."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from zen.core.config import ZenConfig, load_config
from zen_dev.local.compute import (
    UNLIMITED,
    CapacitySchedule,
    ScenarioError,
    build_capacity,
    load_scenario,
    load_trace,
    main,
    migs_from_zen_config,
    parse_scenario,
    resolve_migs,
)
from zen_dev.capacity.traces import CapacityTrace, TraceError, trace_zone_from_filename

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO.parent / "shared" / "traces" / "gcp-a100-availability"
TRACE = TRACES / "us-west1-b_a100_40gb_8.json"
EXAMPLE = REPO / "shared" / "zen_dev" / "local" / "compute" / "scenarios" / "stockout.yaml"


def test_the_example_scenario_stocks_out_the_preferred_region_for_ten_minutes():
    scenario = load_scenario(EXAMPLE)
    config = load_config(REPO / "shared" / "zen" / "core" / "default_config.yaml")
    migs = resolve_migs(scenario, config)
    names = {m.name for m in migs}
    assert {c.mig_name(r) for c in config.clusters for r in c.regions} == names
    capacity = build_capacity(scenario)
    for cluster in config.clusters:
        preferred = cluster.regions[0]
        for zone in (f"{preferred}-a", f"{preferred}-b", f"{preferred}-c"):
            assert capacity.capacity(zone, cluster.machine_type, 0) == 0
            assert capacity.capacity(zone, cluster.machine_type, 599) == 0
            assert capacity.capacity(zone, cluster.machine_type, 600) > 0
        other = cluster.regions[1]
        assert capacity.capacity(f"{other}-a", cluster.machine_type, 0) > 0


def test_migs_from_zen_config_cover_every_cluster_and_region():
    config = ZenConfig.model_validate({
        "project": "p1",
        "clusters": [
            {"name": "4xa100-40gb", "gpu_type": "nvidia-tesla-a100", "gpu_count": 4, "machine_type": "a2-highgpu-4g",
             "regions": ["us-central1", "europe-west4"], "max_vms_per_region": 2, "max_vms": 4},
            {"name": "1xl4", "gpu_type": "nvidia-l4", "gpu_count": 1, "machine_type": "g2-standard-8",
             "regions": ["us-east4"], "max_vms_per_region": 2, "max_vms": 2},
        ],
    })
    migs = migs_from_zen_config(config, zones={"europe-west4": ["europe-west4-a", "europe-west4-b"]})
    assert [(m.name, m.region, m.zones, m.machine_type, m.cluster) for m in migs] == [
        ("zen-4xa100-40gb-us-central1", "us-central1", ("us-central1-a", "us-central1-b", "us-central1-c"),
         "a2-highgpu-4g", "4xa100-40gb"),
        ("zen-4xa100-40gb-europe-west4", "europe-west4", ("europe-west4-a", "europe-west4-b"),
         "a2-highgpu-4g", "4xa100-40gb"),
        ("zen-1xl4-us-east4", "us-east4", ("us-east4-a", "us-east4-b", "us-east4-c"), "g2-standard-8", "1xl4"),
    ]
    scenario = parse_scenario(textwrap.dedent("""
        migs:
          - {name: zen-1xl4-us-east4, region: us-east4, zones: [us-east4-c], machine_type: g2-standard-4}
          - {name: extra-mig, region: us-west1, machine_type: n1-standard-1}
    """))
    resolved = {m.name: m for m in resolve_migs(scenario, config)}
    assert resolved["zen-1xl4-us-east4"].zones == ("us-east4-c",)  # the scenario wins
    assert resolved["zen-1xl4-us-east4"].machine_type == "g2-standard-4"
    assert resolved["extra-mig"].zones == ("us-west1-a", "us-west1-b", "us-west1-c")
    assert len(resolved) == 4


BAD_SCENARIOS = [
    # (text, line, words in the message)
    ("""
     seed: 1
     capacity:
       default: unlimited
       schedule:
         - {at_s: 0, zone: us-central1-a, capacity: 0}
         - at_s: 60
           zone: us-central1-a
           capacity: -1
     """, 9, "capacity must be >= 0"),
    ("""
     timings:
       boot: {dist: lognormal, median_s: 90}
       retry_interval_s: 0
     """, 4, "retry_interval_s must be > 0"),
    ("""
     timings:
       boot: {dist: gamma, k: 2}
     """, 3, "timings.boot"),
    ("""
     migs:
       - name: zen-a-us-central1
         region: us-central1
         zones: [us-central1-a, us-east1-b]
         machine_type: a2-highgpu-1g
     """, 5, "zone us-east1-b is not in region us-central1"),
    ("""
     migs:
       - name: zen-a-us-central1
         region: us-central1
         machine_typ: a2-highgpu-1g
     """, 5, "unknown field 'machine_typ'"),
    ("""
     migs:
       - name: zen-a-us-central1
         region: us-central1
     """, 3, "machine_type is required"),
    ("""
     migs:
       - {name: Bad_Name, region: us-central1, machine_type: x}
     """, 3, "not a valid name"),
    ("""
     seed: 1
     time_scale: 10
     time_scale: 20
     """, 4, "time_scale is given twice"),
    ("""
     capacity:
       schedule:
         - {at_s: 0, zone: us-central1-a, capacity: 0
     seed: 2
     """, 5, "invalid YAML"),
    ("""
     capacity:
       traces:
         - file: /nonexistent/us-west1-b_a100_40gb_8.json
     """, 4, "does not exist"),
    ("""
     faults:
       rate_limit:
         fraction: 1.5
     """, 4, "fraction must be <= 1"),
    ("""
     faults:
       quota:
         - {region: us-central1, limit: 1, from_s: 100, to_s: 50}
     """, 4, "to_s must be >= from_s"),
]


@pytest.mark.parametrize("text,line,words", BAD_SCENARIOS)
def test_a_bad_scenario_is_rejected_with_its_line(text, line, words):
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(textwrap.dedent(text), source="scenario.yaml")
    problems = caught.value.problems
    assert any(at == line and words in reason for at, reason in problems), problems
    assert caught.value.line == min(at for at, _ in problems)  # problems are listed by line
    assert f"scenario.yaml line {line}: " in str(caught.value)


def test_a_bad_scenario_file_stops_the_command_with_its_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("project: p\n" * 1 + "\n" * 10 + "capacity: {default: -2}\n")
    assert main(["--port", "0", "--scenario", str(bad)]) == 2
    assert "bad.yaml line 12: default must be >= 0" in capsys.readouterr().err


def test_preemptions_must_name_existing_migs():
    scenario = parse_scenario(textwrap.dedent("""
        migs:
          - {name: zen-a-us-central1, region: us-central1, machine_type: x}
        faults:
          preemptions:
            at:
              - {at_s: 10, mig: zen-a-us-central1}
              - {at_s: 20, mig: zen-b-us-central1}
    """), source="s.yaml")
    with pytest.raises(ScenarioError, match=r"s\.yaml line 8: no MIG named zen-b-us-central1"):
        resolve_migs(scenario)


def test_relative_trace_paths_resolve_against_the_scenario_file(tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "us-east1-b_test.json").write_text(json.dumps({"metadata": {"gap_seconds": 100}, "data": [0, 3, 1]}))
    path = tmp_path / "s.yaml"
    path.write_text("capacity:\n  traces:\n    - {file: traces/us-east1-b_test.json, scale: 2}\n")
    capacity = build_capacity(load_scenario(path))
    assert [capacity.capacity("us-east1-b", "any-type", t) for t in (0, 99, 100, 250, 10_000)] == [0, 0, 6, 2, 2]
    assert capacity.capacity("us-east1-c", "any-type", 0) == UNLIMITED


def test_capacity_steps_wildcards_and_next_change():
    schedule = CapacitySchedule(default=5)
    schedule.add_steps("z-a", None, [(0, 0), (300, 2)])
    schedule.add_steps("z-a", "gpu-8", [(600, 1), (100, 7)])  # order does not matter
    assert schedule.capacity("z-a", "gpu-4", 0) == 0
    assert schedule.capacity("z-a", "gpu-8", 50) == 0  # before its own first step: the zone-wide one
    assert schedule.capacity("z-a", "gpu-8", 100) == 7
    assert schedule.capacity("z-a", "gpu-8", 700) == 1
    assert schedule.capacity("z-b", "gpu-8", 700) == 5
    assert schedule.next_change("z-a", "gpu-4", 0) == 300
    assert schedule.next_change("z-a", "gpu-4", 300) is None
    assert schedule.next_change("z-a", "gpu-8", 0) == 100
    assert schedule.next_change("z-a", "gpu-8", 300) == 600
    assert schedule.next_change("z-b", "gpu-8", 0) is None
    with pytest.raises(ValueError):
        schedule.add_steps("z-a", None, [(0, 1)])


def test_trace_replay_with_offset_scale_and_loop():
    trace = CapacityTrace(zone="z-a", gap_seconds=10, data=(1, 1, 0, 2))
    schedule = CapacitySchedule(default=0)
    schedule.add_trace("z-a", None, trace, scale=1.5, offset_s=10, loop=True)
    # cloud t reads trace time t + 10; values floor(v * 1.5); period 40 s
    assert [schedule.capacity("z-a", "m", t) for t in (0, 9, 10, 20, 29, 30, 39, 40, 50)] == [1, 1, 0, 3, 3, 1, 1, 1, 0]
    assert schedule.next_change("z-a", "m", 0) == 10
    assert schedule.next_change("z-a", "m", 10) == 20
    assert schedule.next_change("z-a", "m", 20) == 30
    assert schedule.next_change("z-a", "m", 30) == 50
    held = CapacitySchedule(default=0)
    held.add_trace("z-a", "m", trace)
    assert held.capacity("z-a", "m", 1_000) == 2 and held.next_change("z-a", "m", 35) is None


def test_malformed_trace_files_are_refused(tmp_path):
    cases = {
        "no-data.json": {"metadata": {"gap_seconds": 150}},
        "bad-gap.json": {"metadata": {"gap_seconds": 0}, "data": [1]},
        "negative.json": {"metadata": {"gap_seconds": 150}, "data": [1, -1]},
    }
    for name, content in cases.items():
        (tmp_path / name).write_text(json.dumps(content))
        with pytest.raises(TraceError):
            load_trace(tmp_path / name)
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(TraceError, match="not readable JSON"):
        load_trace(tmp_path / "broken.json")
    assert trace_zone_from_filename("europe-west4-a_a100_40gb_8.json") == "europe-west4-a"
    assert trace_zone_from_filename("capacity.json") is None


@pytest.mark.skipif(not TRACE.exists(), reason="shared capacity traces are not present")
def test_the_real_us_west1_b_trace_is_replayed_tick_by_tick():
    trace = load_trace(TRACE)
    raw = json.loads(TRACE.read_text())
    assert trace.zone == "us-west1-b" and trace.gap_seconds == raw["metadata"]["gap_seconds"] == 150
    assert list(trace.data) == raw["data"]
    schedule = CapacitySchedule(default=0)
    schedule.add_trace("us-west1-b", "a2-highgpu-8g", trace, scale=2)
    for i in range(0, len(trace.data), 7):
        assert schedule.capacity("us-west1-b", "a2-highgpu-8g", i * 150 + 75) == 2 * trace.data[i]
    zero_share = sum(1 for v in trace.data if v == 0) / len(trace.data)
    assert 0.4 < zero_share < 0.6  # the README says "empty 52% of ticks"
    t, changes = 0.0, 0
    while (t := schedule.next_change("us-west1-b", "a2-highgpu-8g", t)) is not None:
        i = int(t // 150)
        assert trace.data[i] != trace.data[i - 1]
        changes += 1
    assert changes == sum(1 for a, b in zip(trace.data, trace.data[1:]) if a != b)
