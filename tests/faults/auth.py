"""The fault suite's "who is asking" check: a stack whose functions require each submission's and stop's
proof (``ZEN_AUTH=required``, tokens of a local issuer whose certificates a local server gives, as
Google's are), with queues that cap priorities and name their submitters. Hostile messages of every kind
the issue lists (expired, forged, wrong-audience, wrong-issuer, unverified, absent, malformed and huge
tokens; a token for one user with another's user_id; a stop of someone else's job; a priority above
its queue's cap; a queue its sender may not use; a secret reference no rule allows), shuffled with
valid ones and delivered 4 at a time: every one answered 2xx, every hostile one refused with its reason
recorded and nothing created or stopped, every valid one applied."""

from __future__ import annotations

import json
import random
import tempfile
import time
from pathlib import Path

import yaml

from tests.faults.checks import CheckResult, next_message_id
from tests.faults.harness import Delivery, FaultStack
from tests.token_support import CertsServer
from zen.adapters.message_key import b64decode, b64encode
from zen.adapters.submitters import auth_attributes
from zen.core.config import GCLOUD_CLIENT_IDS, load_config
from zen_dev.local.compute.issuer import TokenIssuer

OWNER, OTHER = "alice@lab.example", "eve@lab.example"
AUTH_BUDGETS = {"small": 45, "full": 1500}  # messages per run (every kind at least once)
QUEUES = [{"name": "research", "quota": {"4xa100-40gb": 400}, "submitters": ["*@lab.example"], "max_priority": 10},
          {"name": "prod", "quota": {"4xa100-40gb": 400}, "submitters": ["ci@proj.iam.gserviceaccount.com"]}]


class AuthStack:
    """A ``FaultStack`` with ``ZEN_AUTH=required``, its issuer and queues (a context manager)."""

    def __init__(self, threads: int = 4, log_dir: Path | None = None):
        self.issuer = TokenIssuer()
        self.certs = CertsServer.of(self.issuer)
        raw = load_config().model_dump(mode="json")
        raw.update(project="zen-faults", queues=QUEUES)
        self.config_path = Path(tempfile.mkdtemp(prefix="zen-faults-auth-")) / "zen.yaml"
        self.config_path.write_text(yaml.safe_dump(raw))
        self.stack = FaultStack(threads=threads, log_dir=log_dir, extra_env={
            "ZEN_AUTH": "required", "ZEN_AUTH_CERTS_URL": self.certs.url, "ZEN_CONFIG": str(self.config_path)})

    def __enter__(self) -> "AuthStack":
        self.stack.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.stack.__exit__(*exc)
        self.certs.close()

    def token(self, email: str = OWNER, **claims) -> str:
        return self.issuer.user_token(email=email, audience=GCLOUD_CLIENT_IDS[0], **claims)


def _job(job_id: str, user: str = OWNER, **fields) -> bytes:
    return json.dumps({"job_id": job_id, "user_id": user, "cluster": "4xa100-40gb", "queue": "research",
                       "command": ["python", "train.py"], **fields}).encode()


def _altered(token: str) -> str:
    head, body, signature = token.split(".")
    return f"{head}.{b64encode(json.dumps({**json.loads(b64decode(body)), 'email': OTHER}).encode())}.{signature}"


def _proofs(s: AuthStack) -> dict[str, dict[str, str]]:
    """Each kind's attributes, made once (a token is an RSA signature; a stranger's key takes a moment)."""
    now = time.time()
    sign = auth_attributes
    return {
        "valid": sign(s.token()), "no token": {}, "expired": sign(s.token(exp=now - 7200, iat=now - 10800)),
        "forged": sign(_altered(s.token())),
        "unknown key": sign(TokenIssuer().user_token(email=OWNER, audience=GCLOUD_CLIENT_IDS[0])),
        "wrong audience": sign(s.token(aud="another-service")),
        "wrong issuer": sign(s.token(iss="https://issuer.example")),
        "unverified": sign(s.token(email_verified=False)), "malformed": {"zen_auth": "a.b"},
        "huge": {f"zen_auth{'' if n == 0 else f'_{n}'}": "x" * 1000 for n in range(8)},
        "other": sign(s.token(OTHER)),
    }


def _cases(proofs: dict[str, dict[str, str]], job_id: str, owned: str
           ) -> list[tuple[str, str, bytes, dict[str, str], str | None]]:
    """(kind, target, payload, attributes, what its refusal says; None: it is valid)."""
    valid = proofs["valid"]
    return [
        ("valid", "on_job_submitted", _job(job_id), valid, None),
        ("no token", "on_job_submitted", _job(job_id), proofs["no token"], "carries no zen_auth attribute"),
        ("expired", "on_job_submitted", _job(job_id), proofs["expired"], "expired"),
        ("forged", "on_job_submitted", _job(job_id, OTHER), proofs["forged"], "signature does not verify"),
        ("unknown key", "on_job_submitted", _job(job_id), proofs["unknown key"], "does not list"),
        ("wrong audience", "on_job_submitted", _job(job_id), proofs["wrong audience"], "which this Zen does not take"),
        ("wrong issuer", "on_job_submitted", _job(job_id), proofs["wrong issuer"], "not Google's"),
        ("unverified", "on_job_submitted", _job(job_id), proofs["unverified"], "no verified e-mail"),
        ("malformed", "on_job_submitted", _job(job_id), proofs["malformed"], "not a JWT"),
        ("huge", "on_job_submitted", _job(job_id), proofs["huge"], "over 4096"),
        ("another's user_id", "on_job_submitted", _job(job_id, OTHER), valid, "but its zen_auth token proves"),
        ("priority over the cap", "on_job_submitted", _job(job_id, priority=500), valid,
         "above queue research's max_priority 10"),
        ("queue not theirs", "on_job_submitted", _job(job_id, queue="prod"), valid, "may not submit to queue prod"),
        ("secret not allowed", "on_job_submitted",
         _job(job_id, secrets={"HF": "projects/zen-faults/secrets/hf-token/versions/latest"}), valid, "secret HF"),
        ("someone else's stop", "on_stop_requested", json.dumps({"job_id": owned}).encode(), proofs["other"],
         "may not stop job"),
    ]


def auth_refusals(s: AuthStack, n: int, seed: int) -> CheckResult:
    """``n`` messages drawn from the cases above (each hostile kind at least once), shuffled."""
    began = time.monotonic()
    stack = s.stack
    rng = random.Random(seed)
    owned = f"owned-{seed}"
    stack.deliver_all([Delivery("on_job_submitted", _job(owned), next_message_id(), attributes=auth_attributes(s.token()))])
    proofs = _proofs(s)
    kinds = len(_cases(proofs, "x", owned))
    deliveries, expected = [], {}
    for i in range(max(n, kinds)):
        message_id = next_message_id()
        kind, target, payload, attributes, says = _cases(proofs, f"au-{message_id}", owned)[
            i if i < kinds else rng.randrange(kinds)]
        deliveries.append(Delivery(target, payload, message_id, attributes=attributes, note=kind))
        expected[message_id] = (kind, says)
    rng.shuffle(deliveries)
    stack.deliver_all(deliveries)
    result = CheckResult("who is asking")
    result.cases = len(deliveries)
    refused = {r["message_id"]: r["reason"] for r in stack.query("SELECT message_id, reason FROM rejected_messages")}
    jobs = {r["job_id"] for r in stack.query("SELECT job_id FROM jobs")}
    [owned_row] = stack.query("SELECT status FROM jobs WHERE job_id = :j", j=owned)
    for delivery in deliveries:
        kind, says = expected[delivery.message_id]
        status = delivery.final_status
        result.statuses[status] += 1
        if status >= 500:
            result.content_5xx += 1
            result.problems.append(f"{kind}: answered {status}")
        elif says is None:
            if f"au-{delivery.message_id}" not in jobs:
                result.problems.append(f"valid submission au-{delivery.message_id} made no job")
        else:
            result.rejected += 1
            why = refused.get(delivery.message_id)
            if why is None or says not in why:
                result.problems.append(f"{kind}: refusal {why!r} does not say {says!r}")
            if delivery.target == "on_job_submitted" and f"au-{delivery.message_id}" in jobs:
                result.problems.append(f"{kind}: made job au-{delivery.message_id}")
    if owned_row["status"] != "QUEUED":
        result.problems.append(f"{owned} is {owned_row['status']}: someone else's stop applied")
    result.seconds = time.monotonic() - began
    return result
