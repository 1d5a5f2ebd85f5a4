"""``gs://`` URIs as jobs name their ``inputs`` and ``outputs``: parsing, and Cloud Storage's naming
rules checked up front so that a typo is refused at submission rather than found on the VM.

A URI is ``gs://BUCKET`` or ``gs://BUCKET/PATH``; the path names an object, or a prefix when it ends
in ``/`` or when no object has exactly that name (the agent decides by listing; see
``zen.agent.staging``). Bucket names: 3-63 characters (up to 222 when dotted, each dot-separated
part at most 63) of lowercase letters, digits, ``-``, ``_`` and ``.``, starting and ending with a
letter or digit, not an IP address, not starting with ``goog``. Object names: at most 1024 bytes of
UTF-8 without carriage return or line feed.
"""

from __future__ import annotations

import re

SCHEME = "gs://"
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]\Z")  # \Z: "$" allows a final "\n"
_IP_ADDRESS = re.compile(r"^\d{1,3}(\.\d{1,3}){3}\Z")
MAX_OBJECT_BYTES = 1024


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
