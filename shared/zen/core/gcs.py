"""``gs://`` URIs as jobs name their ``inputs`` and ``outputs``: parsing, and Cloud Storage's naming
rules checked up front so that a typo is refused at submission rather than found on the VM; an
``outputs`` prefix must leave ``OUTPUT_NAME_ROOM`` bytes for the files' paths under
``<outputs>/<job_id>/attempt-<n>/`` (``output_destination``, ``output_room_problem``).
The rules: docs/reference/messages.md (``inputs`` and ``outputs``).
"""

from __future__ import annotations

import re

SCHEME = "gs://"
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]\Z")  # \Z: "$" allows a final "\n"
_IP_ADDRESS = re.compile(r"^\d{1,3}(\.\d{1,3}){3}\Z")
MAX_OBJECT_BYTES = 1024
OUTPUTS_MANIFEST = "_ZEN_OUTPUTS.json"  # written last under an attempt's outputs once all are stored (zen.agent.output_manifest)
WHOLE, NOT_WHOLE = f"({OUTPUTS_MANIFEST} written last: whole)", f"(no {OUTPUTS_MANIFEST}: not whole)"  # the final report's
OUTPUT_NAME_ROOM = 128  # bytes an outputs prefix must leave for the path of a file under ZEN_OUTPUT_DIR
# Attempt numbers are Postgres integers: a preemption starts an attempt without spending the budget,
# so they are not bounded by max_attempts.
_LARGEST_ATTEMPT = 2**31 - 1


def bucket_problem(bucket: str) -> str | None:
    """Why ``bucket`` is not a valid bucket name, or ``None``."""
    if not 3 <= len(bucket) <= 222 or not _BUCKET.match(bucket):
        return ("bucket names are 3-63 characters of lowercase letters, digits, '-', '_' and '.', "
                "starting and ending with a letter or digit")
    if "." not in bucket and len(bucket) > 63 or any(len(part) > 63 for part in bucket.split(".")):
        return "bucket names are at most 63 characters (222 with dots, each part at most 63)"
    if ".." in bucket or _IP_ADDRESS.match(bucket) or bucket.startswith("goog"):
        return "bucket names cannot hold '..', look like an IP address or start with 'goog'"
    return None


def split_uri(uri: str) -> tuple[str, str]:
    """``gs://bucket/some/path`` -> ``("bucket", "some/path")``; raises ``ValueError`` with the reason."""
    if not uri.startswith(SCHEME):
        raise ValueError(f"{uri!r} is not a gs:// URI (gs://BUCKET or gs://BUCKET/PATH)")
    bucket, _, path = uri[len(SCHEME):].partition("/")
    problem = bucket_problem(bucket)
    if problem:
        raise ValueError(f"{uri!r}: {problem}")
    if len(path.encode()) > MAX_OBJECT_BYTES or "\r" in path or "\n" in path:
        raise ValueError(f"{uri!r}: object names are at most {MAX_OBJECT_BYTES} bytes, without CR or LF")
    if "//" in path or any(part in (".", "..") for part in path.split("/")):
        raise ValueError(f"{uri!r}: the path cannot hold empty, '.' or '..' parts")
    return bucket, path


def check_uri(uri: str) -> str:
    """A pydantic validator: ``uri`` unchanged when it is a valid ``gs://`` URI."""
    split_uri(uri)
    return uri


def input_name(uri: str) -> str:
    """Where an input lands under ``ZEN_INPUT_DIR``: the last part of its path (the bucket's name for
    a whole bucket). ``gs://b/data/train.csv`` -> ``train.csv``; ``gs://b/data/set/`` -> ``set``."""
    bucket, path = split_uri(uri)
    return path.rstrip("/").rpartition("/")[2] or bucket


def check_input_names(uris: list[str]) -> None:
    """Two inputs landing on the same name would overwrite each other: refuse them."""
    seen: dict[str, str] = {}
    for uri in uris:
        name = input_name(uri)
        if name in seen:
            raise ValueError(f"inputs {seen[name]} and {uri} would both be staged as {name!r} in ZEN_INPUT_DIR")
        seen[name] = uri


def output_destination(outputs: str, job_id: str, attempt: int, node: int | None = None) -> str:
    """``gs://bucket/prefix/<job_id>/attempt-<n>/``: where one attempt's ``ZEN_OUTPUT_DIR`` goes; a gang's
    node's (``node``: its rank) in ``node-<rank>/`` below it, so that nodes writing the same name keep both."""
    bucket, path = split_uri(outputs)
    prefix = f"{path.rstrip('/')}/" if path.strip("/") else ""
    return f"{SCHEME}{bucket}/{prefix}{job_id}/attempt-{attempt}/" + ("" if node is None else f"node-{node}/")


def output_room_problem(outputs: str, job_id: str, nodes: int = 1) -> str | None:
    """Why no file of job ``job_id`` (of ``nodes`` nodes) could be uploaded under ``outputs``, or ``None``."""
    bucket, path = split_uri(outputs)
    last = nodes - 1 if nodes > 1 else None
    used = output_destination(outputs, job_id, _LARGEST_ATTEMPT, last)[len(f"{SCHEME}{bucket}/"):]
    room = MAX_OBJECT_BYTES - len(used.encode())
    if room >= OUTPUT_NAME_ROOM:
        return None
    length = len(path.rstrip("/").encode())
    return (f"the outputs prefix is {length} bytes: each file goes to <outputs>/{job_id}/attempt-<n>/<its path>, "
            f"an object name of at most {MAX_OBJECT_BYTES} bytes, so it leaves {max(room, 0)} bytes for a file's "
            f"path ({OUTPUT_NAME_ROOM} needed): give a prefix of at most {length - (OUTPUT_NAME_ROOM - room)} "
            f"bytes, or a shorter job_id")
