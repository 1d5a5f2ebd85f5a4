"""``zen simulate`` refuses a scenario it would read otherwise than written, or could not run, through its
real entry: exit 2, one ``zen:`` line naming the file, line and field, and what is accepted; nothing run."""

from __future__ import annotations

import pytest

from zen.cli.main import main

CLUSTER = """seed: 1
clusters:
  - {name: c8, gpu_count: 8, machine_type: a2-highgpu-8g, regions: [us-central1, us-west1],
     max_vms_per_region: 4, max_vms: 8%s}
capacity: {default: 2}
jobs: {kind: synthetic, count: 3, arrivals: {kind: burst, at_s: 0}, duration: {dist: fixed, s: 600}%s}
"""


def _scenario(cluster: str = "", jobs: str = "", extra: str = "") -> str:
    return CLUSTER % (cluster, jobs) + extra


def _simulate(tmp_path, capsys, text: str, *args: str) -> tuple[int, str, str]:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    rc = main(["simulate", "--scenario", str(path), "--json", "--policies", "zen", *args])
    out, err = capsys.readouterr()
    return rc, out, err


BOOLEAN = " (YAML reads yes, no, on, off, true and false as booleans)"


@pytest.mark.parametrize("text, said", [
    (_scenario(jobs=", checkpoint_every_s: yes"), f"line 6: jobs.checkpoint_every_s: a number, not True{BOOLEAN}"),
    (_scenario(jobs=", checkpoint_every_s: '600'"), "line 6: jobs.checkpoint_every_s: a number, not '600'"),
    (_scenario().replace("seed: 1", "seed: yes"), f"line 1: seed: a number, not True{BOOLEAN}"),
    (_scenario(extra="tick_s: on\n"), f"line 7: tick_s: a number, not True{BOOLEAN}"),
    (_scenario(extra="horizon_s: '7200'\n"), "line 7: horizon_s: a number, not '7200'"),
    (_scenario(extra="boot: {dist: fixed, s: true}\n"), f"line 7: boot.s: a number, not True{BOOLEAN}"),
    (_scenario(extra="flex_start: {grant: {dist: fixed, s: '60'}}\n"), "line 7: flex_start.grant.s: a number, not '60'"),
    (_scenario(extra="preemption: {rate_per_hour: yes}\n"),
     f"line 7: preemption.rate_per_hour: a number, not True{BOOLEAN}"),
    (_scenario(extra="timing: {idle_timeout_s: yes}\n"), f"line 7: timing.idle_timeout_s: a number, not True{BOOLEAN}"),
    (_scenario(extra="routing: {cache_gb: yes}\n"), f"line 7: routing.cache_gb: a number, not True{BOOLEAN}"),
    (_scenario().replace("capacity: {default: 2}", "capacity: {default: yes}"),
     f"line 5: capacity.default: a number, not True{BOOLEAN}"),
    (_scenario().replace("count: 3", "count: yes"), f"line 6: jobs.count: a number, not True{BOOLEAN}"),
    (_scenario(jobs=", nodes: {yes: 1}"), f"line 6: jobs.nodes: a key is a number, not True{BOOLEAN}"),
])
def test_a_number_written_as_a_boolean_or_as_text_is_refused_naming_the_field(tmp_path, capsys, text, said):
    # pydantic read yes as 1 and '600' as 600: a checkpoint every second, a tick of a second, ran silently.
    rc, out, err = _simulate(tmp_path, capsys, text)
    assert (rc, out) == (2, "")
    assert err == f"zen: s.yaml {said}\n"


def test_what_is_written_as_it_is_meant_still_runs(tmp_path, capsys):
    # A flag of timing, "unlimited" capacity, an exponent YAML 1.1 leaves as text, and the older format (no
    # prices:, no provisioning:, one capacity for every model) run as before.
    text = _scenario(extra="timing: {spare_boots: false}\nretry_interval_s: 3.0e1\n").replace(
        "capacity: {default: 2}", "capacity: {default: unlimited}")
    rc, out, err = _simulate(tmp_path, capsys, text)
    assert rc == 0, err
    assert '"never_started": 0' in out


FLEX = ", provisioning: [flex-start]"


def _durations(dist: str) -> str:
    return _scenario().replace("count: 3", "count: 200").replace("duration: {dist: fixed, s: 600}", f"duration: {dist}")


@pytest.mark.parametrize("text, said", [
    (_scenario(extra="boot: {dist: lognormal, median_s: 60, sigma: 1000}\n"), "line 7: boot: sigma is at most 10 (got 1000)"),
    (_scenario(extra="guest_boot: {dist: lognormal, median_s: 60, sigma: 500}\n"),
     "line 7: guest_boot: sigma is at most 10 (got 500)"),
    (_scenario(cluster=FLEX, extra="flex_start: {grant: {dist: lognormal, median_s: 60, sigma: 1000}}\n"),
     "line 7: flex_start.grant: sigma is at most 10 (got 1000)"),
    (_durations("{dist: lognormal, median_s: 600, sigma: 1000}"), "line 6: jobs.duration: sigma is at most 10 (got 1000)"),
    (_durations("{dist: lognormal, median_s: 1.0e300, sigma: 10}"),
     "line 6: jobs.duration: median_s is at most 1e+09 s, about 31 years (got 1e+300)"),
])
def test_a_lognormal_whose_draws_overflow_is_refused_not_crashed(tmp_path, capsys, text, said):
    # exp() of a draw overflowed: "zen: OverflowError: math range error", exit 1, out of the run.
    rc, out, err = _simulate(tmp_path, capsys, text)
    assert (rc, out) == (2, "")
    assert err.startswith(f"zen: s.yaml {said}") and err.count("\n") == 1, err


@pytest.mark.parametrize("extra, said", [
    ("preemption: {rate_per_hour: 1.0e300}", "rate_per_hour must be <= 3600 (at preemption.rate_per_hour)"),
    ("retry_interval_s: 1.0e-6", "retry_interval_s must be >= 1"),
])
def test_a_rate_or_interval_that_would_never_end_the_run_is_refused(tmp_path, capsys, extra, said):
    # The first, once a VM was created, looped in one instant (each VM preempted as soon as created) until the
    # memory ran out; the second, once a VM waited for capacity, kept one failure per microsecond of its wait.
    # Here, with capacity for every VM and no preemption, they ran as if they were nothing.
    text = _scenario(extra=extra + "\n")
    if "rate_per_hour" in extra:  # no VM created: no preemption
        text = text.replace("capacity: {default: 2}", "capacity: {default: 0}")
    rc, out, err = _simulate(tmp_path, capsys, text)
    assert (rc, out) == (2, "")
    assert err == f"zen: s.yaml line 7: {said}\n"


@pytest.mark.parametrize("zones, said", [
    ("{us-central1: [us-central1-a, us-central1-a]}", "zones: us-central1 lists zone us-central1-a twice: list each zone once"),
    ("{us-central1: []}", "zones: us-central1 lists no zone: list at least one, or leave us-central1 out "
                          "(its default zones)"),
    ("{us-central1: [us-west1-a]}", "zones: zone us-west1-a is not in region us-central1"),
])
def test_a_zones_table_listing_a_zone_twice_or_none_is_refused(tmp_path, capsys, zones, said):
    rc, out, err = _simulate(tmp_path, capsys, _scenario(extra=f"zones: {zones}\n"))
    assert (rc, out) == (2, "")
    assert err == f"zen: s.yaml line 7: {said}\n"


@pytest.mark.parametrize("kind", ["synth", "5"])
def test_an_unknown_jobs_kind_is_one_problem_naming_the_kinds(tmp_path, capsys, kind):
    # It was every kind's problems at once: "Input should be 'synthetic'", "unknown field 'count'", ...
    rc, out, err = _simulate(tmp_path, capsys, _scenario().replace("kind: synthetic", f"kind: {kind}"))
    assert (rc, out) == (2, "")
    assert err == "zen: s.yaml line 6: jobs.kind: Input should be 'synthetic', 'philly' or 'csv'\n"


def test_no_synthetic_jobs_is_refused_not_run(tmp_path, capsys):
    # It ran the policies on nothing and printed their figures of no job.
    rc, out, err = _simulate(tmp_path, capsys, _scenario().replace("count: 3", "count: 0"))
    assert (rc, out, err) == (2, "", "zen: s.yaml line 6: count must be >= 1 (at jobs.count)\n")


def test_a_job_csv_of_a_header_alone_is_refused_not_run(tmp_path, capsys):
    csv = tmp_path / "jobs.csv"
    csv.write_text("job_id,submit_s,duration_s,cluster\n")
    rc, out, err = _simulate(tmp_path, capsys, _scenario(), "--jobs", str(csv))
    assert (rc, out, err) == (2, "", f"zen: {csv}: no jobs, only a header: give the trace at least one job row\n")


MULTILINE_JOBS = """jobs:
  kind: synthetic
  count: 3
  clusters: {c8: 1}
  allow:
    - regions: [us-central1]
    - regions: [us-west1]
  provisioning:
    spot: 1
    stnadard: 1
"""


@pytest.mark.parametrize("jobs, said", [
    (MULTILINE_JOBS, "line 15: jobs.provisioning: unknown provisioning model 'stnadard'; known: spot, standard, "
                     "flex-start, or any (every model its cluster lists)"),
    (MULTILINE_JOBS.replace("stnadard", "flex-start"),
     "line 15: jobs.provisioning: flex-start is not in cluster c8's provisioning ['spot']"),
    (MULTILINE_JOBS.replace("stnadard", "any"),
     "line 9: jobs.clusters names unknown cluster(s): c9"),
    (MULTILINE_JOBS.replace("stnadard", "any") + "  nodes: {0: 1}\n",
     "line 16: jobs.nodes: nodes per job are >= 1 (got [0])"),
    (MULTILINE_JOBS.replace("us-west1]", "europe-west4]").replace("stnadard", "any"), "line 12: jobs.allow ['europe-west4'] leaves cluster c8 no region"),
])
def test_what_synthetic_jobs_name_that_the_clusters_lack_is_refused_with_its_line(tmp_path, capsys, jobs, said):
    # These were refused only when the jobs were drawn, naming the field and not the line.
    text = _scenario().split("jobs:")[0] + jobs
    if "c9" in said:
        text = text.replace("clusters: {c8: 1}", "clusters: {c8: 1, c9: 1}")
    rc, out, err = _simulate(tmp_path, capsys, text)
    assert (rc, out) == (2, "")
    assert err == f"zen: s.yaml {said}\n"
