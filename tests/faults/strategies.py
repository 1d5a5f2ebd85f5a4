"""Hypothesis strategies for hostile messages: every schema Zen reads, and the CloudEvent around it.

A case starts from a valid message of its schema and takes zero to three mutations: a field set to a
hostile value (wrong JSON type, NUL or a lone surrogate, a number beyond int64, a timestamp that
overflows once converted to UTC, deep nesting, ...), a field removed, a hostile key added; or the
whole payload is replaced (random bytes, invalid UTF-8, non-object JSON, parser bombs). The JSON is
written with or without ``ensure_ascii`` (a surrogate then arrives as ``\\ud800`` or as invalid
UTF-8). Placeholders ``@JOB`` and ``@MSG`` are replaced by the harness with unique ids, so that a
case's outcome can be found again.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

JOB = "@JOB"  # replaced by a fresh, unique job id
KNOWN_JOB = "@KNOWN"  # replaced by the id of a job submitted before the burst

ODD_TEXT = [
    "", " ", "\x00", "a\x00b", "\ud800", "x\udfffy", "\ud83d", "\u202e", "é", "😀", "1", "60", "true", "null",
    "-1", "9" * 400, "x" * 70_000, "9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00",
    "2026-01-01T00:00:00", "2026-13-45T99:99:99Z", "\\u0000", "../../etc/passwd", "' OR 1=1 --", "%s%n",
    "RUNNING", "CLAIMED", "vm", "job", "4xa100-40gb", "us-central1",
]
ODD_NUMBERS = [0, -1, 1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**80, 2**200]

any_char = st.characters(exclude_categories=())  # includes lone surrogates and NUL
hostile_text = st.one_of(
    st.sampled_from(ODD_TEXT),
    st.text(any_char, max_size=24),
    st.text(max_size=24),
)
hostile_scalar = st.one_of(
    st.none(), st.booleans(), st.sampled_from(ODD_NUMBERS), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), hostile_text,
)
hostile_json = st.recursive(
    hostile_scalar,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text, inner, max_size=4),
    max_leaves=10,
)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


hostile_value = st.one_of(
    hostile_scalar, hostile_json, st.sampled_from([_nested(300), {"a": _nested(100)}, [[]] * 2000]),
)

timestamp = st.sampled_from(["2026-11-21T10:00:00Z", "2026-11-21T10:00:00+02:00", "2026-11-21T10:00:00.123456Z"])

# -- valid messages of each schema -------------------------------------------------------------
valid_job_request = st.fixed_dictionaries(
    {"job_id": st.just(JOB), "user_id": st.sampled_from(["alice", "bob"])},
    optional={
        "command": st.lists(st.text(max_size=8).filter(str.strip), min_size=1, max_size=3),
        "image": st.just("us-docker.pkg.dev/p/r/train:1"),
        "env": st.dictionaries(st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,8}\Z"), st.text(max_size=8), max_size=3),
        "priority": st.integers(-1000, 1000),
        "max_runtime_s": st.integers(1, 86_400),
        "max_attempts": st.integers(1, 10),
        "labels": st.dictionaries(st.sampled_from(["team", "exp"]), st.text(max_size=8), max_size=2),
        "version": st.just(1),
        # Sweeps, pipelines and retries (zen.core.arrays, dependencies, retries): small, so a case stays cheap.
        "array": st.fixed_dictionaries({"count": st.integers(1, 3)}, optional={"max_parallel": st.integers(1, 2)}),
        "after": st.just([KNOWN_JOB]),
        "max_retries": st.integers(0, 2),
    },
).flatmap(lambda request: st.one_of(
    st.just(request | {"cluster": "4xa100-40gb", "command": request.get("command", ["python", "train.py"])}),
    st.just(request | {"gpu_type": "nvidia-tesla-a100", "gpu_count": 2,
                       "command": request.get("command", ["python", "train.py"])}),
    st.just(request | {"cluster": "1xl4", "regions": ["us-east4"], "image": "us-docker.pkg.dev/p/r/x:2"}),
))

_statuses = st.sampled_from(["CLAIMED", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED", "PREEMPTED"])
valid_job_heartbeat = st.fixed_dictionaries({
    "job_id": st.sampled_from([KNOWN_JOB, JOB]), "attempt": st.integers(1, 2),
    "vm": st.sampled_from(["vm-a", "vm-b"]), "region": st.just("us-central1"), "zone": st.just("us-central1-a"),
    "status": _statuses, "seq": st.integers(1, 6), "sent_at": timestamp,
}, optional={"exit_code": st.integers(-15, 3), "message": st.text(max_size=40), "kind": st.just("job")})
valid_vm_heartbeat = st.fixed_dictionaries({
    "kind": st.just("vm"), "vm": st.sampled_from(["vm-a", "vm-b", "vm-c"]),
    "cluster": st.sampled_from(["4xa100-40gb", "1xl4"]), "region": st.just("us-central1"),
    "zone": st.just("us-central1-a"), "state": st.sampled_from(["IDLE", "BUSY", "STOPPING"]),
    "seq": st.integers(1, 2**40), "sent_at": timestamp,
}, optional={"job_id": st.just(KNOWN_JOB), "attempt": st.integers(1, 2)})
valid_stop = st.fixed_dictionaries({"job_id": st.sampled_from([KNOWN_JOB, JOB])},
                                   optional={"reason": st.text(max_size=20)})

VALID = {
    "on_job_submitted": valid_job_request,
    "on_heartbeat": st.one_of(valid_job_heartbeat, valid_vm_heartbeat),
    "on_stop_requested": valid_stop,
}
FIELDS = {
    "on_job_submitted": ["job_id", "user_id", "cluster", "gpu_type", "gpu_count", "image", "command", "env",
                         "priority", "regions", "max_runtime_s", "max_attempts", "labels", "checkpoint", "version",
                         "array", "after", "after_condition", "max_retries", "retry_exit_codes", "retry_backoff_s",
                         "provisioning", "notify"],
    "on_heartbeat": ["kind", "job_id", "attempt", "vm", "cluster", "region", "zone", "status", "state", "seq",
                     "sent_at", "exit_code", "message", "version"],
    "on_stop_requested": ["job_id", "reason", "version"],
}


def _mutation(target: str) -> st.SearchStrategy:
    field = st.sampled_from(FIELDS[target])
    return st.one_of(
        st.tuples(st.just("set"), field, hostile_value),
        st.tuples(st.just("del"), field, st.none()),
        st.tuples(st.just("add"), hostile_text, hostile_value),
        st.tuples(st.just("set-inner"), st.sampled_from(["env", "labels", "command", "array"]), hostile_json),
    )


def _apply(message: dict[str, Any], mutations: list[tuple]) -> dict[str, Any]:
    message = dict(message)
    for op, key, value in mutations:
        if op == "set" or op == "add":
            message[key] = value
        elif op == "del":
            message.pop(key, None)
        elif op == "set-inner" and isinstance(message.get(key), dict) and isinstance(value, dict):
            message[key] = {**message[key], **value}
        elif op == "set-inner" and isinstance(message.get(key), list):
            message[key] = message[key] + [value]
    return message


def _to_bytes(value: Any, ascii_only: bool) -> bytes:
    text = json.dumps(value, ensure_ascii=ascii_only)
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate becomes invalid UTF-8


whole_payload = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"", b"{", b"null", b"[]", b"\xff\xfe", b"{\"a\": 1" + b"1" * 5000 + b"}",
                     b"[" * 30_000 + b"]" * 30_000, b"{\"job_id\": NaN}", b"\"\\ud800\""]),
    hostile_json.map(lambda v: json.dumps(v).encode("utf-8", "surrogatepass")),
)


def payloads(target: str) -> st.SearchStrategy[tuple[bytes, str]]:
    """(payload bytes, a short note of what was done) for ``target``."""
    mutated = st.tuples(VALID[target], st.lists(_mutation(target), max_size=3), st.booleans()).map(
        lambda t: (_to_bytes(_apply(t[0], t[1]), t[2]), f"{len(t[1])} mutations" if t[1] else "valid"))
    return st.one_of(mutated, mutated, mutated, whole_payload.map(lambda raw: (raw, "whole payload")))


# -- the CloudEvent around it ------------------------------------------------------------------
def envelopes() -> st.SearchStrategy[tuple[dict[str, Any], bool, str]]:
    """(keys replacing the CloudEvent's, binary mode?, note)."""
    message_id = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), hostile_text)
    message = st.fixed_dictionaries({}, optional={
        "data": st.one_of(hostile_text, hostile_json, st.just("!!!not base64!!!")),
        "attributes": st.one_of(hostile_json, st.dictionaries(hostile_text, hostile_text, max_size=3)),
        "messageId": message_id, "message_id": message_id,
        "publishTime": st.one_of(hostile_text, hostile_scalar),
    })
    data = st.one_of(
        st.fixed_dictionaries({"message": message}, optional={"subscription": hostile_value}),
        hostile_json,
    )
    replaced = st.fixed_dictionaries({}, optional={
        "type": st.sampled_from(["", "google.cloud.pubsub.topic.v1.messagePublished", "x", "\x00", "\ud800"]),
        "data": data,
        "id": st.text(any_char, min_size=1, max_size=12),
        "time": hostile_text,
        "datacontenttype": st.sampled_from(["application/json", "text/plain", ""]),
    })
    return st.tuples(replaced, st.booleans(), st.just("envelope"))
