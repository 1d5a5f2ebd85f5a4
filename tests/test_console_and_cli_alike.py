"""The console's pages and the CLI read alike (an ERROR scaling decision, a job stopped at max_runtime_s, a gang of two
models, the fleet's dollars with an unpriced VM: the page said "unpriced" where the CLI said "5.17 + 1.0 VM-h
unpriced"), through the real app, the functions and Postgres."""

from __future__ import annotations

import re
import sys
from datetime import timedelta

import pytest

from tests.messages import heartbeat, job_request
from zen.console.app import create_app
from zen.console.viewers import local_identity

CLUSTER = "4xa100-40gb"


@pytest.fixture
def both(config, zen, functions, db, clock, db_url, monkeypatch):
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    client = create_app(config, db, local_identity("alice"), clock=clock).test_client()
    return zen, functions, client


def get(client, url, status=200):
    answer = client.get(url)
    text = answer.get_data(as_text=True)
    assert answer.status_code == status, text
    return text


def cli(capsys, *argv):
    from zen.cli.main import main

    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_an_error_decision_on_every_page_and_command(both, clock, capsys):
    from zen.scaling.fleetdb import FleetDb

    zen, functions, client = both
    functions.submit(job_request("q1", user_id="alice"))
    functions.tick()
    assert FleetDb(zen.db).record_failure(CLUSTER, RuntimeError("the planner broke"), clock())
    html = get(client, "/clusters")
    assert re.search(r"<td></td><td>ERROR</td>", html), html
    job = get(client, "/jobs/q1?fragment=1")
    why = re.search(r'id="job-why"><code>zen explain</code>: ([^<]*)</p>', job).group(1)
    sys.__stderr__.write("\n%s\n" % (("console why:", why),))
    code, out, err = cli(capsys, "explain", "q1")
    sys.__stderr__.write("\n%s\n" % (("cli why:", out),))
    assert code == 0
    code, out, err = cli(capsys, "explain", CLUSTER)
    assert code == 0 and "ERROR" in out, (out, err)
    code, out, err = cli(capsys, "explain", CLUSTER, "--json")
    assert code == 0
    sys.__stderr__.write("\n%s\n" % (("clock", clock()),))
    code, out, err = cli(capsys, "stats", "--window", "10000000")
    assert code == 0 and "ERROR" in out, (out, err)
    sys.__stderr__.write("\n%s\n" % ((out),))
    code, out, err = cli(capsys, "watch", "--once")
    assert code == 0, err
    sys.__stderr__.write("\n%s\n" % ((out),))
    for url in ("/", "/jobs", "/queues", "/usage", "/usage?by=region", "/clusters?fragment=1"):
        assert client.get(url).status_code in (200, 302), url


def test_a_job_stopped_at_max_runtime_reads_the_same_on_the_page_and_in_the_cli(both, clock, capsys):
    zen, functions, client = both
    functions.submit(job_request("t1", user_id="alice", max_runtime_s=2))
    functions.heartbeat(heartbeat("t1", "CLAIMED", 1))
    functions.heartbeat(heartbeat("t1", "RUNNING", 2))
    clock.advance(3)
    functions.heartbeat(heartbeat("t1", "FAILED", 3, exit_code=143, over_limit="max_runtime_s", message="killed"))
    html = get(client, "/jobs/t1?fragment=1")
    assert "stopped at max_runtime_s=2 (exit code 143)" in html, html
    why = re.search(r'id="job-why"><code>zen explain</code>: ([^<]*)</p>', html).group(1)
    code, out, err = cli(capsys, "explain", "t1")
    assert code == 0
    assert out.strip() == f"t1: FAILED - {why}".replace("&#39;", "'").replace("&amp;", "&"), (out, why)
    code, out, err = cli(capsys, "jobs", "history", "t1")
    assert code == 0 and "stopped at max_runtime_s=2 (exit code 143)" in out, out
    code, out, err = cli(capsys, "jobs", "get", "t1")
    assert code == 0, err
    sys.__stderr__.write("\n%s\n" % ((out),))


def test_jobs_list_unknown_cluster_note(both, capsys):
    zen, functions, client = both
    code, out, err = cli(capsys, "jobs", "list", "--cluster", "nosuch")
    sys.__stderr__.write("\n%s\n" % ((repr(out), repr(err)),))
    assert code == 0 and "nosuch" in err


def test_fleet_dollars_with_an_unpriced_vm_read_alike_on_the_usage_page_and_in_zen_usage(both, clock, capsys):
    """A region whose fleet has a priced VM and one of a removed cluster (unpriced): zen usage --by region shows what
    is known ("N.NN + H VM-h unpriced"); the console's /usage?by=region should show the same figure."""
    from zen.store import fleet

    zen, functions, client = both
    start = clock()
    with zen.db.transaction() as session:
        fleet.see_instances(session, CLUSTER, "us-central1", ["zen-4xa100-40gb-us-central1-aaaa"], start, model="spot")
        fleet.see_instances(session, "removed-cluster", "us-central1", ["zen-removed-us-central1-bbbb"], start,
                            model="spot")
    clock.advance(3600)
    with zen.db.transaction() as session:
        fleet.see_instances(session, CLUSTER, "us-central1", ["zen-4xa100-40gb-us-central1-aaaa"], clock(), model="spot")
        fleet.see_instances(session, "removed-cluster", "us-central1", ["zen-removed-us-central1-bbbb"], clock(),
                            model="spot")
    html = get(client, "/usage?by=region&window=24h&fragment=1")
    code, out, err = cli(capsys, "usage", "--by", "region", "--since", "2025-12-31")
    sys.__stderr__.write("\n" + out + "\n" + err + "\n")
    row = re.search(r'<tr><th scope="row">us-central1</th>(.*?)</tr>', html, re.S).group(1)
    cells = re.findall(r'<td class="num">([^<]*)</td>', row)
    sys.__stderr__.write(repr(cells) + "\n")
    cli_row = next(line for line in out.splitlines() if line.startswith("us-central1"))
    assert "VM-h unpriced" in cli_row  # the CLI: the priced VMs' dollars + the unpriced VM-hours
    assert "VM-h unpriced" in cells[-1] or re.match(r"\d", cells[-1]), (cells, cli_row)


def test_a_gang_attempt_of_two_models_is_priced_alike_on_the_job_page_and_in_the_cli(both, clock, capsys):
    zen, functions, client = both
    functions.submit(job_request("g1", user_id="alice"))
    with zen.db.transaction() as session:  # a 2-node gang's attempt, its nodes spot and standard (the functions' row)
        session.sql(
            "INSERT INTO attempt_usage (job_id, attempt, user_id, queue, cluster, machine_type, region, vm, gpus, "
            "started_at, ended_at, gpu_seconds, outcome, vm_share, model, usd_per_hour) VALUES "
            "('g1', 1, 'alice', NULL, :c, 'a2-highgpu-4g', 'us-central1', 'vm-a', 8, :s, :e, 28800, 'FAILED', 2, "
            "'spot+standard', 9.5) RETURNING 1", c=CLUSTER, s=clock(), e=clock() + timedelta(hours=1))
    clock.advance(7200)
    html = get(client, "/jobs/g1?fragment=1")
    sys.__stderr__.write(re.search(r'<table id="attempts">.*?</table>', html, re.S).group(0) + "\n")
    code, out, err = cli(capsys, "usage", "--since", "2025-12-31", "--json")
    sys.__stderr__.write(out + err + "\n")
    code, out, err = cli(capsys, "stats", "--window", "10000000", "--json")
    import json
    sys.__stderr__.write(json.dumps(json.loads(out)["attempt_usd"]) + "\n")
    page = get(client, "/usage?by=user&window=24h&fragment=1")
    sys.__stderr__.write(re.search(r'<table id="usage-table">.*?</table>', page, re.S).group(0) + "\n")
