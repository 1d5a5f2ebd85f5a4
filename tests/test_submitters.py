"""Who is asking (``zen.adapters.submitters``, ``zen.jobs.authorization``): through the functions with
``ZEN_AUTH=required``, a submission or stop is applied only with a valid Google ID token of its sender
(signature, issuer, audience, lifetime, a verified e-mail), the job's user is the proven one, queues
say who may submit and at what priority, and only a job's owner or an admin may stop it. Every refusal
is recorded with its reason (and its sender, once proven) and acked; none answers 500."""

from __future__ import annotations

import json

import pytest

from tests.messages import job_request
from tests.test_queues import CLUSTER, statuses, with_queues
from tests.test_explain_times_zone import new_york  # noqa: F401 - the fixture
from tests.token_support import certs, issuer  # noqa: F401  (fixtures)
from zen.adapters.submitters import auth_attributes
from zen.core.config import GCLOUD_CLIENT_IDS
from zen.store import repository
from zen_dev.local.compute.issuer import TokenIssuer

ALICE, BOB, LEAD, CI = "alice@lab.example", "bob@lab.example", "lead@lab.example", "ci@proj.iam.gserviceaccount.com"
QUEUES = [
    {"name": "research", "quota": {CLUSTER: 8}, "submitters": ["*@lab.example", "group:robots"],
     "admins": [LEAD], "max_priority": 100},
    {"name": "prod", "quota": {CLUSTER: 8}, "submitters": [CI]},
]
AUTH = {"groups": {"robots": [CI]}}


@pytest.fixture
def zen(config, db, publisher, clock, certs, monkeypatch):
    from zen.app import Zen

    monkeypatch.setenv("ZEN_AUTH", "required")
    monkeypatch.setenv("ZEN_AUTH_CERTS_URL", certs.url)
    zen = Zen(with_queues(config, QUEUES, auth=AUTH), db, publisher, clock)
    yield zen
    zen.relay.marks.flush()


@pytest.fixture
def sign(issuer, clock, project):
    """``sign(email, **claims)``: the attributes of a message sent by ``email`` (a user's token, with
    gcloud's client as its audience; a service account's, for Zen's own audience)."""
    def make(email: str, **claims) -> dict[str, str]:
        audience = f"zen:{project}" if email.endswith("gserviceaccount.com") else GCLOUD_CLIENT_IDS[0]
        return auth_attributes(issuer.user_token(email=email, audience=audience, now=clock().timestamp(), **claims))
    return make


def a100s(job_id: str, user: str, queue: str = "research", priority: int = 0) -> dict:
    return job_request(job_id, cluster=None, gpu_type="nvidia-tesla-a100", gpu_count=4, priority=priority,
                       user_id=user, queue=queue)


def refusals(zen) -> list[tuple[str | None, str]]:
    with zen.db.transaction() as session:
        return [(row["principal"], row["reason"]) for row in repository.list_rejections(session)]


def send(functions, target: str, payload: dict, attributes: dict[str, str]) -> int:
    return functions.send(target, json.dumps(payload).encode(), attributes=attributes).status_code


def test_a_job_is_its_proven_senders_and_each_queue_takes_whom_it_names(functions, zen, sign):
    assert send(functions, "on_job_submitted", a100s("a1", ALICE), sign(ALICE)) == 200
    assert send(functions, "on_job_submitted", a100s("c1", CI, queue="prod"), sign(CI)) == 200
    assert send(functions, "on_job_submitted", a100s("c2", CI), sign(CI)) == 200  # research, through group:robots
    assert send(functions, "on_job_submitted", a100s("a2", ALICE, queue="prod"), sign(ALICE)) == 200
    assert statuses(zen, "a1", "c1", "c2") == ["QUEUED", "QUEUED", "QUEUED"]
    with zen.db.transaction() as session:
        assert repository.get_job(session, "a1").user_id == ALICE
        assert repository.job_history(session, "a1")[0]["actor"] == f"user:{ALICE}"
    [(who, why)] = refusals(zen)
    assert who == ALICE and f"{ALICE} may not submit to queue prod (its submitters: {CI}" in why


def test_a_job_keeps_its_proven_senders_e_mail_whatever_case_its_request_wrote(functions, zen, sign):
    """A request's user_id in another case than the proven e-mail was taken (the checks compare them lowercased)
    and kept as written: `zen jobs list --user` and usage by user counted it as someone else."""
    assert send(functions, "on_job_submitted", a100s("a1", ALICE.upper()), sign(ALICE)) == 200
    with zen.db.transaction() as session:
        assert repository.get_job(session, "a1").user_id == ALICE
        assert repository.job_history(session, "a1")[0]["actor"] == f"user:{ALICE}"


@pytest.mark.parametrize("claims, attributes, reason", [
    ({}, None, "carries no zen_auth attribute"),
    ({"exp": 0, "iat": 0}, None, "the zen_auth token expired"),
    ({"aud": "someone-else"}, None, "is for audience 'someone-else', which this Zen does not take"),
    ({"iss": "https://evil.example"}, None, "issuer 'https://evil.example' is not Google's"),
    ({"email_verified": False}, None, "names no verified e-mail"),
    (None, {"zen_auth": "x" * 900, "zen_auth_1": "y" * 900, "zen_auth_2": "z" * 900, "zen_auth_3": "w" * 900,
            "zen_auth_4": "v" * 900}, "characters long, over 4096"),
    (None, {"zen_auth": "not.a.jwt"}, "the zen_auth token is not a JWT"),
])
def test_a_submission_without_a_valid_proof_is_refused_recorded_and_acked(functions, zen, sign, issuer, clock,
                                                                           claims, attributes, reason):
    if attributes is None:
        attributes = sign(ALICE, **claims) if claims else {}
    assert send(functions, "on_job_submitted", a100s("a1", ALICE), attributes) == 200
    [(who, why)] = refusals(zen)
    assert reason in why and who is None
    with zen.db.transaction() as session:
        assert repository.get_job(session, "a1") is None


def test_a_token_altered_or_signed_by_another_key_is_refused(functions, zen, issuer, clock):
    """Alice's token with Bob's e-mail put in (her signature kept), and a token from a key Google's
    certificates do not list."""
    from zen.adapters.message_key import b64decode, b64encode

    head, body, signature = issuer.user_token(email=ALICE, audience=GCLOUD_CLIENT_IDS[0],
                                              now=clock().timestamp()).split(".")
    claims = {**json.loads(b64decode(body)), "email": BOB}
    altered = f"{head}.{b64encode(json.dumps(claims).encode())}.{signature}"
    stranger = TokenIssuer().user_token(email=BOB, audience=GCLOUD_CLIENT_IDS[0], now=clock().timestamp())
    for n, token in enumerate((altered, stranger)):
        assert send(functions, "on_job_submitted", a100s(f"b{n}", BOB), auth_attributes(token)) == 200
    (_, first), (_, second) = refusals(zen)
    assert "the zen_auth token's signature does not verify" in first
    assert "which http://" in second and "does not list: it is not a Google-signed identity token" in second
    with zen.db.transaction() as session:
        assert repository.get_job(session, "b0") is None and repository.get_job(session, "b1") is None


def test_a_job_claimed_for_another_user_is_refused_naming_both(functions, zen, sign):
    assert send(functions, "on_job_submitted", a100s("a1", BOB), sign(ALICE)) == 200
    [(who, why)] = refusals(zen)
    assert who == ALICE and f"says user_id '{BOB}' but its zen_auth token proves {ALICE}" in why


def test_a_priority_above_the_queues_cap_is_refused(functions, zen, sign):
    assert send(functions, "on_job_submitted", a100s("a1", ALICE, priority=500), sign(ALICE)) == 200
    assert send(functions, "on_job_submitted", a100s("a2", ALICE, priority=100), sign(ALICE)) == 200
    [(_, why)] = refusals(zen)
    assert "priority 500 is above queue research's max_priority 100: ask for 100 or less" in why
    assert statuses(zen, "a2") == ["QUEUED"]


def test_only_the_owner_or_an_admin_stops_a_job(functions, zen, sign):
    for job_id in ("a1", "a2"):
        send(functions, "on_job_submitted", a100s(job_id, ALICE), sign(ALICE))
    assert send(functions, "on_stop_requested", {"job_id": "a1"}, sign(BOB)) == 200
    assert statuses(zen, "a1") == ["QUEUED"]
    [(who, why)] = refusals(zen)
    assert who == BOB and f"{BOB} may not stop job a1, which is {ALICE}'s" in why and LEAD in why
    assert send(functions, "on_stop_requested", {"job_id": "a1"}, sign(ALICE)) == 200
    assert send(functions, "on_stop_requested", {"job_id": "a2"}, sign(LEAD)) == 200  # the queue's admin
    assert statuses(zen, "a1", "a2") == ["CANCELLED", "CANCELLED"]
    assert send(functions, "on_stop_requested", {"job_id": "a2"}, {}) == 200  # no proof: refused
    assert "carries no zen_auth attribute" in refusals(zen)[-1][1]


def test_a_stop_kept_before_its_job_applies_only_if_its_sender_may_stop_it(functions, zen, sign):
    assert send(functions, "on_stop_requested", {"job_id": "early-1"}, sign(BOB)) == 200  # not Alice's to stop
    assert send(functions, "on_stop_requested", {"job_id": "early-2"}, sign(ALICE)) == 200
    send(functions, "on_job_submitted", a100s("early-1", ALICE), sign(ALICE))
    send(functions, "on_job_submitted", a100s("early-2", ALICE), sign(ALICE))
    assert statuses(zen, "early-1", "early-2") == ["QUEUED", "CANCELLED"]
    with zen.db.transaction() as session:
        notes = [r["reason"] for r in repository.job_history(session, "early-1")]
    assert any(f"a stop sent before the job came is not applied: {BOB} may not stop" in (n or "") for n in notes)


def test_a_strangers_early_stop_does_not_take_the_place_of_the_owners(functions, zen, sign):
    """One stop was kept a job id, whoever sent it first: Bob's made Alice's own early stop a no-op, and
    hers, refused, left her job running."""
    assert send(functions, "on_stop_requested", {"job_id": "pipeline-7"}, sign(BOB)) == 200
    assert send(functions, "on_stop_requested", {"job_id": "pipeline-7", "reason": "not today"}, sign(ALICE)) == 200
    send(functions, "on_job_submitted", a100s("pipeline-7", ALICE), sign(ALICE))
    assert statuses(zen, "pipeline-7") == ["CANCELLED"]
    with zen.db.transaction() as session:
        rows = repository.job_history(session, "pipeline-7")
    assert rows[-1]["actor"] == f"user:{ALICE}" and "stopped before it arrived: not today" in rows[-1]["reason"]
    assert any(f"{BOB} may not stop" in (r["reason"] or "") and r["actor"] == f"user:{BOB}" for r in rows)


def test_a_replayed_submission_does_nothing_new(functions, zen, sign):
    attributes = sign(ALICE)
    for _ in range(3):
        assert send(functions, "on_job_submitted", a100s("a1", ALICE), attributes) == 200
    assert statuses(zen, "a1") == ["QUEUED"] and refusals(zen) == []


def test_a_token_is_verified_once_and_then_remembered(functions, zen, sign):
    attributes = sign(ALICE)
    for n in range(5):
        send(functions, "on_job_submitted", a100s(f"a{n}", ALICE), attributes)
    assert zen.jobs._auth.verifications == 1


def test_an_early_stop_the_tick_applies_names_its_sender(functions, zen, sign, clock):
    """A stop kept while its job's submission was committing (each missed the other) is applied by the
    tick's sweep; the job's history names the user who sent it, as when the submission applies it."""
    send(functions, "on_job_submitted", a100s("raced-1", ALICE), sign(ALICE))
    with zen.jobs._store.transaction() as tx:  # kept as if its job were unknown when it came
        tx.remember_early_stop("raced-1", "not today", clock(), ALICE)
    assert zen.jobs.sweeps.apply_early_stops() == 1
    assert statuses(zen, "raced-1") == ["CANCELLED"]
    with zen.db.transaction() as session:
        last = repository.job_history(session, "raced-1")[-1]
    assert last["actor"] == f"user:{ALICE}" and "not today" in last["reason"]


def test_a_stop_kept_without_proof_does_not_apply_once_proof_is_required(functions, zen, sign, clock):
    """A stop kept while ZEN_AUTH was off has no proven sender: anyone could have sent it. Once proof is
    required it stops nothing (the job's history says why), whether the submission or the tick finds it."""
    with zen.jobs._store.transaction() as tx:
        tx.remember_early_stop("kept-1", "sent while unproven", clock(), None)
    send(functions, "on_job_submitted", a100s("kept-1", ALICE), sign(ALICE))
    send(functions, "on_job_submitted", a100s("kept-2", ALICE), sign(ALICE))
    with zen.jobs._store.transaction() as tx:  # kept as if kept-2's submission had raced it
        tx.remember_early_stop("kept-2", "sent while unproven", clock(), None)
    zen.jobs.sweeps.apply_early_stops()
    assert statuses(zen, "kept-1", "kept-2") == ["QUEUED", "QUEUED"]
    for job_id in ("kept-1", "kept-2"):
        with zen.db.transaction() as session:
            notes = [r["reason"] or "" for r in repository.job_history(session, job_id)]
        assert any("without proof of its sender" in n for n in notes), notes


def test_a_service_accounts_token_for_another_audience_is_refused(functions, zen, issuer, clock, project):
    """A service account may ask Google for any audience: its token for gcloud's client (what a plain `gcloud auth
    print-identity-token` gives it, as any service it calls may hold) put a job into the queue only it may use.
    Zen takes a service account's token for Zen's own audience alone; a person's for a client id as before."""
    token = issuer.user_token(email=CI, audience=GCLOUD_CLIENT_IDS[0], now=clock().timestamp())
    assert send(functions, "on_job_submitted", a100s("c9", CI, queue="prod"), auth_attributes(token)) == 200
    with zen.db.transaction() as session:
        assert repository.get_job(session, "c9") is None
    [(_, why)] = refusals(zen)
    assert why == (f"the zen_auth token is service account {CI}'s for audience '{GCLOUD_CLIENT_IDS[0]}': a service "
                   f"account's token must be asked for Zen's own, 'zen:{project}', which no other service takes "
                   f"(`gcloud auth print-identity-token --audiences=zen:{project}`, or fetch_id_token)")


def test_zen_submit_logged_in_to_gcloud_as_a_service_account_asks_for_zens_audience(issuer, clock, project, tmp_path,
                                                                                    monkeypatch, config):
    """gcloud's token is the last source `zen submit` tries; logged in as a service account, the token it gave was
    for gcloud's client, which Zen now refuses: it asks again with --audiences."""
    from zen.cli import identity
    from zen.adapters.google_tokens import unverified_claims

    tokens = {flag: issuer.user_token(email=CI, audience=audience, now=clock().timestamp())
              for flag, audience in (("", GCLOUD_CLIENT_IDS[0]), (f"--audiences=zen:{project}", f"zen:{project}"))}
    gcloud = tmp_path / "gcloud"
    gcloud.write_text("#!/bin/sh\n" + "".join(f'[ "$3" = "{flag}" ] && echo {token} && exit 0\n'
                                              for flag, token in tokens.items()) + "exit 1\n")
    gcloud.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    for name in ("ZEN_ID_TOKEN", "ZEN_IDENTITY_ENDPOINT", "PUBSUB_EMULATOR_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))  # no ADC here
    found = identity.current(config.model_copy(update={"project": project}))
    assert found is not None and unverified_claims(found.token)["aud"] == f"zen:{project}"
    assert found.source == f"gcloud auth print-identity-token --audiences=zen:{project}"


@pytest.mark.parametrize("account", [CI, ALICE])
def test_terraforms_submit_command_proves_a_service_account_and_a_person(functions, zen, issuer, clock, project,
                                                                         tmp_path, account):
    """terraform's submit_job_command (and stop_job_command) attached a plain `gcloud auth print-identity-token`:
    logged in to gcloud as a service account (CI), that token is for gcloud's client, which Zen refuses from one."""
    import re
    import subprocess

    from tests.conftest import ROOT

    hcl = (ROOT / "terraform" / "outputs.tf").read_text()
    proof = re.search(r'sender_proof += "(.*)"\n', hcl).group(1).replace("$${", "${").replace('\\"', '"')
    proof = proof.replace("${local.zen_audience}", f"zen:{project}")
    tokens = {"": issuer.user_token(email=account, audience=GCLOUD_CLIENT_IDS[0], now=clock().timestamp()),
              f"--audiences=zen:{project}": issuer.user_token(email=account, audience=f"zen:{project}",
                                                              now=clock().timestamp())}
    gcloud = tmp_path / "gcloud"
    gcloud.write_text(f'#!/bin/sh\n[ "$1" = config ] && echo {account} && exit 0\n' + "".join(
        f'[ "$3" = "{flag}" ] && echo {token} && exit 0\n' for flag, token in tokens.items()) + "exit 1\n")
    gcloud.chmod(0o755)
    out = subprocess.run(["bash", "-c", f'{proof} && printf %s "$A"'], capture_output=True, text=True, check=True,
                         env={"PATH": f"{tmp_path}:/usr/bin:/bin"}).stdout
    attributes = dict(part.split("=", 1) for part in out.split(","))
    queue = "prod" if account == CI else "research"
    assert send(functions, "on_job_submitted", a100s("tf1", account, queue=queue), attributes) == 200
    with zen.db.transaction() as session:
        assert repository.get_job(session, "tf1") is not None, refusals(zen)


def test_an_expired_tokens_refusal_names_the_time_in_utc_whatever_the_machines_zone(new_york):
    """It said when the token expired as a naive time in the machine's zone (19:00 the day before in New York for
    00:00 UTC), unlabelled: `zen rejected` showed an hour that could not be placed."""
    from datetime import datetime, timezone

    from zen.adapters.google_tokens import GoogleTokens
    from zen.core.errors import Rejected

    expired = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()
    minted = TokenIssuer()
    tokens = GoogleTokens("http://certs.invalid", fetch=lambda url: (minted.certs(), 3600))
    token = minted.user_token(email="alice@example.com", audience="zen", now=expired - 3600)
    with pytest.raises(Rejected) as refused:
        tokens.verify(token, expired + 600, "the zen_auth token", "zen submit")
    assert "expired at 2026-01-01T00:00:00+00:00" in str(refused.value), str(refused.value)
