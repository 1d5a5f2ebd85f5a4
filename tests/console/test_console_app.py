"""The console through Flask's test client against a real Postgres, with jobs made by the functions: each page
shows what the CLI's queries give, a viewer sees only the jobs the queue rules let them, output streams as
server-sent events, and bad input (hostile parameters, unknown ids, forged identities) is a 4xx page."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta, timezone

import pytest

from tests.messages import agent_run, heartbeat, job_request
from zen.adapters.joblogs import LocalReader, LocalSink, OutputEntry
from zen.console.app import create_app
from zen.console.viewers import LOCAL_HEADER, local_identity
from zen.core.config import ZenConfig

CLUSTER = "4xa100-40gb"
QUEUES = [
    {"name": "research", "quota": {CLUSTER: 8}, "users": ["alice"], "submitters": ["alice"]},
    {"name": "vision", "quota": {CLUSTER: 4}, "users": ["bob"], "submitters": ["bob"]},
]


@pytest.fixture
def setup(config, db, publisher, clock, db_url, monkeypatch, tmp_path):
    """A Zen with two queues (alice's research, bob's vision) and an admin, its functions, and a console."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    queued = ZenConfig.model_validate({**config.model_dump(), "queues": QUEUES,
                                       "auth": {"admins": ["root@example.com"]}})
    zen = Zen(queued, db, publisher, clock)
    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    logs = tmp_path / "joblogs"
    app = create_app(queued, db, local_identity("alice"), reader_factory=lambda: LocalReader(logs), clock=clock,
                     page_size=2)
    import zen.console.app as console_app

    monkeypatch.setattr(console_app, "OUTPUT_SETTLE_S", 0.2)  # a test's stream ends soon after its job
    monkeypatch.setattr(console_app, "OUTPUT_POLL_S", 0.05)
    return zen, FunctionsInvoker(zen), app.test_client(), logs


def page(client, url, who=None, status=200):
    answer = client.get(url, headers={LOCAL_HEADER: who} if who else {})
    text = answer.get_data(as_text=True)
    assert answer.status_code == status, text
    return text


def job_ids(html: str) -> list[str]:
    return re.findall(r'<tr data-job="([^"]+)"', html)


def submit_all(functions, clock):
    for n in (1, 2, 3):  # the third waits: research holds 8 GPUs, each job 4
        functions.submit(job_request(f"a{n}", user_id="alice", labels={"team": "nlp"}))
        clock.advance(1)
    functions.submit(job_request("b1", user_id="bob"))
    clock.advance(1)


def test_the_job_list_is_newest_first_paged_by_keyset_and_filtered(setup, clock):
    zen, functions, client, _ = setup
    submit_all(functions, clock)
    first = page(client, "/jobs", who="root@example.com")
    assert job_ids(first) == ["b1", "a3"]
    following = re.search(r'id="next-page" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    assert "before_id=a3" in following
    second = page(client, following, who="root@example.com")
    assert job_ids(second) == ["a2", "a1"] and "next-page" not in second
    assert job_ids(page(client, "/jobs?status=pending", who="root@example.com")) == ["a3"]
    assert job_ids(page(client, "/jobs?user=bob", who="root@example.com")) == ["b1"]
    assert job_ids(page(client, "/jobs?queue=research&label=team%3Dnlp", who="root@example.com")) == ["a3", "a2"]
    assert job_ids(page(client, "/jobs?label=team%3Dcv", who="root@example.com")) == []
    live = page(client, "/jobs?user=bob&fragment=1", who="root@example.com")  # what the page's script swaps in
    assert "<html" not in live and job_ids(live) == ["b1"]
    opened = client.get("/jobs?id=a2")
    assert opened.status_code == 302 and opened.headers["Location"].endswith("/jobs/a2")


def test_a_viewer_sees_their_own_jobs_and_their_queues_and_an_admin_sees_all(setup, clock):
    zen, functions, client, _ = setup
    submit_all(functions, clock)
    assert sorted(job_ids(page(client, "/jobs?fragment=1", who="bob"))) == ["b1"]
    assert "a1" not in page(client, "/jobs?user=alice&fragment=1", who="bob")  # a filter widens nothing
    assert "no job a1 that bob may see" in page(client, "/jobs/a1", who="bob", status=404)
    assert "no job nosuch that bob may see" in page(client, "/jobs/nosuch", who="bob", status=404)  # the same answer
    page(client, "/jobs/a1/output", who="bob", status=404)
    assert sorted(job_ids(page(client, "/jobs?fragment=1"))) == ["a2", "a3"]  # alice (the default viewer), page 1
    queues = page(client, "/queues", who="bob")
    assert "Its jobs are its members' to see." in queues and 'data-job="a3"' not in queues


def test_a_waiting_jobs_reason_names_no_job_of_a_queue_the_viewer_is_not_in(config, db, publisher, clock):
    """A research job waits while vision's head waits for the quota research borrowed: its reason line
    (job page, queues page) named that job's id, which bob's and only bob's (a 404 for alice)."""
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    cohort = [{**queue, "cohort": "lab", "quota": {CLUSTER: 4}} for queue in QUEUES]
    queued = ZenConfig.model_validate({**config.model_dump(), "queues": cohort})
    functions = FunctionsInvoker(Zen(queued, db, publisher, clock))
    client = create_app(queued, db, local_identity("alice"), clock=clock).test_client()
    for n in (1, 2, 3):  # research's quota, vision's lent 4 GPUs, then waiting: the cohort is full
        functions.submit(job_request(f"alice-{n}", user_id="alice"))
    clock.advance(1)
    functions.submit(job_request("bob-secret-run", user_id="bob"))  # vision's head: waits for what it lent
    page(client, "/jobs/bob-secret-run", status=404)
    for html in (page(client, "/jobs/alice-3"), page(client, "/queues")):
        assert "a job of queue vision (4 GPUs) waits for the quota it lent" in html and "bob-secret-run" not in html


def test_a_jobs_page_shows_its_status_history_reason_and_cost_and_streams_its_output(setup, clock):
    zen, functions, client, logs = setup
    submit_all(functions, clock)
    html = page(client, "/jobs/a3")
    assert 'id="job-status" role="status">PENDING<' in html
    assert f"waiting for quota: queue research holds 8 GPUs of {CLUSTER} (quota 8)" in html
    assert "python train.py --epochs 1" in html and "research" in html
    for beat in agent_run("a1", vm="vm-a"):
        if beat["status"] == "SUCCEEDED":  # running for 10 h: no attempt ended, no figure (it read $0.00)
            clock.advance(36000)
            running = page(client, "/jobs/a1?fragment=1")
            assert 'role="status">RUNNING<' in running and 'id="job-usd"' not in running
        functions.heartbeat(beat)
        clock.advance(30)
    LocalSink(logs).write([OutputEntry("a1", 1, "stdout", "vm-a", 1, "t", "hello from a1"),
                           OutputEntry("a1", 1, "zen", "vm-a", 2, "t", "exit code 0", final=True)])
    done = page(client, "/jobs/a1?fragment=1")
    assert 'role="status">SUCCEEDED<' in done and "ended:" in done and re.search(r'id="job-usd">\$[1-9]', done)
    assert re.search(r"<td>vm-a</td>.*?SUCCEEDED", done, re.S)  # the attempt on its VM, billed
    # billed as zen usage bills an attempt, per second; the caption promised a one-minute minimum its figure lacks
    assert "each billed per second at its VM's price; GCE's one-minute minimum is the VM's" in done
    started = time.monotonic()
    stream = client.get("/jobs/a1/output").get_data(as_text=True)
    assert time.monotonic() - started < 10
    lines = [json.loads(m) for m in re.findall(r"event: line\ndata: (.+)\n", stream)]
    assert [entry["text"] for entry in lines] == ["hello from a1", "exit code 0"]
    assert 'event: end\ndata: {"status": "SUCCEEDED"}' in stream
    resumed = client.get("/jobs/a1/output", headers={"Last-Event-ID": "1:1"}).get_data(as_text=True)
    assert [json.loads(m)["text"] for m in re.findall(r"event: line\ndata: (.+)\n", resumed)] == ["exit code 0"]


def test_queues_clusters_and_usage_pages(setup, clock):
    zen, functions, client, _ = setup
    submit_all(functions, clock)
    queues = page(client, "/queues")
    assert re.search(r'data-job="a3">.*waiting for quota: queue research holds', queues, re.S)
    assert "<th scope=\"col\">quota</th>" in queues
    for beat in agent_run("a1", vm="vm-a"):
        functions.heartbeat(beat)
        clock.advance(60)
    assert re.search(r'data-job="a3">.*admitted by queue research; waiting for a VM', page(client, "/queues"), re.S)
    clusters = page(client, "/clusters")
    assert "Latest scaling decisions" in clusters and "per GPU-hour" in clusters
    usage = page(client, "/usage?by=user&window=30d")
    assert "<svg" in usage and "<rect" in usage and re.search(r"<th scope=\"row\">alice</th>", usage)
    page(client, "/usage?by=nobody", status=400)


@pytest.mark.parametrize("url", [
    "/jobs?user=%00", "/jobs?queue=" + "q" * 10_000, "/jobs?status=RUNNING%27%20OR%201%3D1", "/jobs?label=noequals",
    "/jobs?before=yesterday&before_id=x", "/jobs?before=2026-11-20T00:00:00&before_id=x", "/usage?window=%22%3E",
    "/jobs/" + "x" * 300,
])
def test_hostile_parameters_get_a_clear_400_page(setup, url):
    _, _, client, _ = setup
    answer = client.get(url)
    text = answer.get_data(as_text=True)
    assert answer.status_code == 400, text
    assert "Traceback" not in text and "<h1>400 Bad request</h1>" in text


def test_quotes_are_data_not_sql_and_nothing_writes(setup):
    _, _, client, _ = setup
    assert job_ids(page(client, "/jobs?user=%27%3B%20DROP%20TABLE%20jobs%3B%20--&fragment=1")) == []
    assert "&lt;script&gt;" in page(client, "/jobs/%3Cscript%3E", status=404)  # escaped, never markup
    for method in (client.post, client.put, client.delete):
        assert method("/jobs/a1").status_code == 405


def iap_key_pair():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return key, public.decode()


def iap_assertion(key, kid: str, **claims) -> str:
    import base64

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    now = int(datetime.now(timezone.utc).timestamp())
    body = {"iss": "https://cloud.google.com/iap", "aud": "/projects/1/global/backendServices/2", "iat": now,
            "exp": now + 600, "email": "bob@example.com", "sub": "accounts.google.com:1", **claims}
    signed = f"{b64(json.dumps({'alg': 'ES256', 'kid': kid}).encode())}.{b64(json.dumps(body).encode())}"
    r, s = decode_dss_signature(key.sign(signed.encode(), ec.ECDSA(hashes.SHA256())))
    return f"{signed}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def test_behind_iap_the_viewer_is_the_verified_assertions_email_and_anything_else_is_refused(config, db):
    from zen.adapters.iap import HEADER, IapAssertions
    from zen.console.viewers import iap_identity

    key, public = iap_key_pair()
    other, _ = iap_key_pair()
    assertions = IapAssertions("/projects/1/global/backendServices/2", fetch=lambda url: ({"k1": public}, 3600))
    client = create_app(config, db, iap_identity(assertions.email)).test_client()

    def status(assertion: str | None, **headers) -> tuple[int, str]:
        sent = {HEADER: assertion} if assertion is not None else {}
        answer = client.get("/jobs", headers={**sent, **headers})
        return answer.status_code, answer.get_data(as_text=True)

    code, html = status(iap_assertion(key, "k1"))
    assert code == 200 and 'id="viewer">bob@example.com<' in html and "Identity-Aware Proxy" in html
    assert status(None)[0] == 401
    assert status(None, **{"X-Goog-Authenticated-User-Email": "accounts.google.com:root@example.com"})[0] == 401
    assert status(None, **{LOCAL_HEADER: "root@example.com"})[0] == 401  # the local override means nothing here
    for forged in (iap_assertion(other, "k1"), iap_assertion(key, "k1", aud="/projects/1/global/backendServices/3"),
                   iap_assertion(key, "k1", iss="https://accounts.google.com"),
                   iap_assertion(key, "k1", exp=int(time.time()) - 3600), "not.a.jwt", "x" * 5000):
        code, html = status(forged)
        assert code == 403 and "Traceback" not in html, html


def test_iap_keys_out_of_reach_are_not_taken_for_an_unreadable_database(config, db):
    """The 503 said "the database cannot be read now; the page tries again": it was never read, and a whole
    page has no script that tries again."""
    from zen.adapters.iap import HEADER, IapAssertions
    from zen.console.viewers import iap_identity
    from zen.core.errors import TransientError

    def unreachable(url):
        raise TransientError(f"cannot fetch the certificates that verify identity tokens from {url}: timed out")

    key, _ = iap_key_pair()
    assertions = IapAssertions("/projects/1/global/backendServices/2", fetch=unreachable)
    answer = create_app(config, db, iap_identity(assertions.email)).test_client().get(
        "/jobs", headers={HEADER: iap_assertion(key, "k1")})
    html = answer.get_data(as_text=True)
    assert answer.status_code == 503 and "database" not in html, html
    assert "your identity cannot be verified now (cannot fetch the certificates" in html
    assert "reload the page in a moment" in html


def test_the_listing_query_never_returns_a_job_the_viewer_may_not_see(setup, clock):
    """The keyset and the viewer's scope are in the query (``recent_jobs``), not filtered after it."""
    from zen.store import repository

    zen, functions, _, _ = setup
    submit_all(functions, clock)
    with zen.db.transaction() as session:
        seen = repository.recent_jobs(session, viewer=("bob", ["vision"]), limit=10)
        before = repository.recent_jobs(session, before=(datetime.now(timezone.utc) + timedelta(days=1), "zzz"),
                                        limit=10)
    assert [j.job_id for j in seen] == ["b1"]
    assert len(before) == 4


def test_the_console_function_serves_the_app_through_functions_framework(config, db_url, monkeypatch):
    """functions/main.py ``console`` as Cloud Functions runs it: IAP's header is required (none here: 401),
    and a console on Cloud SQL without an IAP audience refuses to start."""
    import functions_framework

    from tests.conftest import ROOT
    from zen.console.serve import from_env
    from zen.core.errors import ConfigError

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    monkeypatch.setenv("ZEN_CONSOLE_IAP_AUDIENCE", "/projects/1/global/backendServices/2")
    client = functions_framework.create_app("console", str(ROOT / "functions" / "main.py")).test_client()
    answer = client.get("/jobs")
    assert answer.status_code == 401 and "x-goog-iap-jwt-assertion" in answer.get_data(as_text=True)
    with pytest.raises(ConfigError, match="ZEN_CONSOLE_IAP_AUDIENCE"):
        from_env({"ZEN_CLOUDSQL_INSTANCE": "p:r:i"})
    # Nor on a database given by URL: the function believed any caller's X-Zen-As (Host: localhost passes the
    # local check), so whoever reached it saw every job.
    with pytest.raises(ConfigError, match="the console runs as the console function but ZEN_CONSOLE_IAP_AUDIENCE"):
        from_env({"ZEN_DATABASE_URL": db_url})
    assert from_env({"ZEN_DATABASE_URL": db_url}, local=True)  # zen console on this machine


def test_zen_console_without_a_database_says_what_it_needs(no_database, capsys):
    from zen.cli.main import main

    assert main(["console", "--port", "1"]) == 1
    err = capsys.readouterr().err  # as every read command says it (it said "zen: zen console: ...")
    assert err.startswith("zen: no database to read: no local stack is running") and "ZEN_DATABASE_URL" in err


def test_the_console_reads_in_read_only_transactions(db):
    from zen.console.app import reading

    with reading(db) as session:
        assert session.sql("SELECT current_setting('transaction_read_only') AS ro")[0]["ro"] == "on"
    with pytest.raises(Exception, match="read-only transaction"):
        with reading(db) as session:
            session.sql("DELETE FROM jobs")


def test_a_jobs_page_names_its_env_keys_never_their_values(setup):
    _, functions, client, _ = setup
    functions.submit(job_request("with-env", user_id="alice", env={"WANDB_KEY": "s3cr3t-value-123"}))
    html = page(client, "/jobs/with-env")
    assert "WANDB_KEY" in html and "s3cr3t-value-123" not in html


def test_an_arrays_id_opens_its_tasks_with_the_arrays_progress(setup):
    _, functions, client, _ = setup
    functions.submit(job_request("sweep", user_id="alice", array={"count": 3, "max_parallel": 1}))
    opened = client.get("/jobs?id=sweep", follow_redirects=True)
    html = opened.get_data(as_text=True)
    assert opened.status_code == 200 and "array=sweep" in opened.request.full_path
    assert 'id="array-progress">array sweep: 3 tasks:' in html and "held by max_parallel" in html
    assert "no job sweep that bob may see" in page(client, "/jobs/sweep", who="bob", status=404)


def test_the_local_console_answers_requests_sent_to_this_machine_only(config, db):
    """DNS rebinding: a page whose own name resolves to 127.0.0.1 is same-origin with what it loads from there;
    the local console believed its X-Zen-As whatever the Host, so its scripts could read every job as an admin."""
    for hosts, host, code in (((), "rebind.attacker.example:8097", 403), ((), "127.0.0.1:8097", 200),
                              ((), "localhost", 200), ((), "[::1]:8097", 200), (("10.1.2.3",), "10.1.2.3:8097", 200),
                              (("0.0.0.0",), "any.name.example", 200)):
        client = create_app(config, db, local_identity("alice", hosts=hosts)).test_client()
        answer = client.get("/jobs", headers={"Host": host, LOCAL_HEADER: "root@example.com"})
        assert answer.status_code == code, (hosts, host)
        assert ("open it by one of those names" in answer.get_data(as_text=True)) == (code == 403)


def test_a_gangs_output_resumed_after_a_reconnect_misses_no_line(setup, clock):
    """Each node numbers its own lines from 1, and a line's id was ``attempt:seq`` alone: a browser that
    reconnected (a dropped connection, or the stream's 5 minutes up) skipped the other nodes' lines not
    sent yet, with nothing saying so. The id now holds each VM's last line."""
    _, functions, client, logs = setup
    functions.submit(job_request("g", user_id="alice", nodes=2))
    for status, seq in (("CLAIMED", 1), ("RUNNING", 2), ("SUCCEEDED", 3)):
        for vm in ("vm-1", "vm-2"):
            functions.heartbeat(heartbeat("g", status, seq, vm=vm, **(
                {"ip": f"10.0.0.{vm[-1]}"} if status == "CLAIMED" else {"exit_code": 0} if seq == 3 else {})))
    LocalSink(logs).write([OutputEntry("g", 1, "stdout", vm, seq, "t", f"{vm} line {seq}")
                           for vm in ("vm-1", "vm-2") for seq in (1, 2, 3)])

    def lines(headers=None):
        text = client.get("/jobs/g/output", headers=headers or {}).get_data(as_text=True)
        return [(m.group(1), json.loads(m.group(2))["text"])
                for m in re.finditer(r"id: (\S+)\nevent: line\ndata: (.+)\n", text)]

    full = lines()
    assert len(full) == 6 and len({event_id for event_id, _ in full}) == 6
    for cut in range(1, 6):  # the browser got the first `cut` lines, then reconnected
        assert lines({"Last-Event-ID": full[cut - 1][0]}) == full[cut:], cut
    # A page opened before, resuming with an id of the old form: its floor stays in the ids it gets, so the
    # next reconnect does not send the other nodes' lines below it again.
    after_old = lines({"Last-Event-ID": "1:2"})
    assert [text for _, text in after_old] == ["vm-1 line 3", "vm-2 line 3"]
    assert lines({"Last-Event-ID": after_old[0][0]}) == after_old[1:]


@pytest.mark.parametrize("before", ["0001-01-01T00:00:00%2B01:00", "9999-12-31T23:59:59-12:00"])
def test_a_page_key_with_no_moment_in_utc_is_a_400_naming_it(setup, before):
    """Converted to UTC it overflowed in the database: a 500, "the console failed to build this page"."""
    _, _, client, _ = setup
    answer = client.get(f"/jobs?before={before}&before_id=x", headers={"X-Zen-As": "root@example.com"})
    assert answer.status_code == 400 and "before is out of range" in answer.get_data(as_text=True)


def test_a_label_whose_value_holds_a_comma_is_found(setup):
    """Label values may hold any character; the filter split every comma, so tags=a,b was a 400."""
    _, functions, client, _ = setup
    functions.submit(job_request("c1", user_id="alice", labels={"tags": "a,b", "team": "nlp"}))
    functions.submit(job_request("c2", user_id="alice", labels={"tags": "a"}))
    assert job_ids(page(client, "/jobs?label=tags%3Da%2Cb", who="root@example.com")) == ["c1"]
    assert job_ids(page(client, "/jobs?label=tags%3Da%2Cb%2Cteam%3Dnlp", who="root@example.com")) == ["c1"]
    assert job_ids(page(client, "/jobs?label=tags%3Da", who="root@example.com")) == ["c2"]


def test_a_gangs_page_shows_its_nodes_as_zen_jobs_get_does(setup, clock, capsys):
    """A job's page is what ``zen jobs get`` prints: for a multi-node job it showed rank 0's VM and zone alone,
    nothing of the other node, its address or its exit code."""
    from zen.cli.main import main

    _, functions, client, _ = setup
    functions.submit(job_request("g", user_id="alice", nodes=2))
    zones = {"vm-1": "us-central1-a", "vm-2": "us-central1-b"}
    for vm, zone in zones.items():
        functions.heartbeat(heartbeat("g", "CLAIMED", 1, vm=vm, zone=zone, ip=f"10.0.0.{vm[-1]}"))
    for vm, zone in zones.items():
        functions.heartbeat(heartbeat("g", "RUNNING", 2, vm=vm, zone=zone))
    clock.advance(60)
    functions.heartbeat(heartbeat("g", "FAILED", 3, vm="vm-2", zone="us-central1-b", exit_code=3, message="boom"))
    capsys.readouterr()
    assert main(["jobs", "get", "g"]) == 0
    assert "rank 1: vm-2 us-central1-b 10.0.0.2 FAILED (exit code 3)" in capsys.readouterr().out
    fields = re.search(r'<dl class="fields" id="job-fields">(.*?)</dl>', page(client, "/jobs/g?fragment=1"),
                       re.S).group(1)
    assert "rank 1" in fields and "vm-2 us-central1-b 10.0.0.2 FAILED (exit code 3)" in fields, fields


def test_the_job_list_shows_submitted_times_in_utc_as_the_jobs_page_does(setup, clock, monkeypatch):
    """The list's ``submitted`` column was the console machine's local time, unlabelled, beside job pages in UTC:
    on a laptop in New York a job submitted at 00:00 UTC was listed at 19:00 the day before."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        _, functions, client, _ = setup
        functions.submit(job_request("a1", user_id="alice"))  # at the clock's now: 2026-01-01 00:00:00 UTC
        history = re.findall(r"<tr><td>(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)</td>", page(client, "/jobs/a1?fragment=1"))
        assert history[0] == "2026-01-01 00:00:00"
        listing = page(client, "/jobs?fragment=1")
        row = re.search(r'<tr data-job="a1">.*?</tr>', listing, re.S).group(0)
        assert re.findall(r"<td>(\d\d-\d\d \d\d:\d\d:\d\d)</td>", row) == ["01-01 00:00:00"]
        assert "submitted (UTC)" in listing
    finally:
        monkeypatch.undo()
        time.tzset()
