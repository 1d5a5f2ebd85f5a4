"""A job's ``secrets``: environment variables whose values the agent reads from Secret Manager as its
attempt starts (``zen.agent.secrets``). Zen checks and stores only the references; a value never
reaches the functions or Postgres. Which references a job may name is its queue's rule
(``QueueConfig.secrets``, or the top-level ``secrets`` without queues), checked at submission.
Why and the limits: docs/explanations/security.md#secrets
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from typing import Annotated, Final

from pydantic import AfterValidator, Field

MAX_SECRETS: Final = 16
# projects/<project id or number>/secrets/<secret id>/versions/<version number, latest or an alias>: the
# shapes Secret Manager accepts for a global secret's version (project ids: 6-30 lowercase letters, digits
# and '-'; secret ids: up to 255 letters, digits, '_' and '-'); a regional secret's version (one whose data stays
# in its location, served only by that location's endpoint: zen.adapters.secret_manager) has
# /locations/<location>/ after the project, a location being a region's name (us-central1, europe-west4,
# northamerica-northeast1: lowercase words joined by '-', ending in a number; regional secrets live in regions
# only, so a multi-region such as us or eu, as a mistyped region, is refused at submission).
LOCATION = r"[a-z]+(?:-[a-z]+)+[0-9]{1,2}"
REFERENCE = re.compile(r"projects/(?:[a-z][a-z0-9-]{4,28}[a-z0-9]|[0-9]{1,20})"
                       rf"(?:/locations/(?P<location>{LOCATION}))?"
                       r"/secrets/[A-Za-z0-9_-]{1,255}/versions/(?:latest|[0-9]{1,20}|[A-Za-z][A-Za-z0-9_-]{0,62})")
REFERENCE_SHAPE: Final = ("projects/<project>/secrets/<name>/versions/<version number or latest> (a regional secret: "
                          "projects/<project>/locations/<location>/secrets/<name>/versions/<version number or latest>)")
# An environment variable's name: the rule for a job's ``env`` and ``secrets`` alike.
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
_PATTERN = re.compile(r"projects/[^/\s]+(?:/locations/[^/\s]+)?/secrets/[^/\s]+/versions/[^/\s]+")


def check_reference(variable: str, reference: str) -> str:
    """``reference`` if it names a secret version, else ``ValueError`` naming the variable. The value is quoted
    only when it starts as a reference does (``projects/``, one with a mistake in it): anything else given in a
    reference's place may be the credential itself (a token, a webhook's URL), and the reason is logged, stored
    and announced on ``zen-job-events``."""
    if not REFERENCE.fullmatch(reference):
        given = (repr(reference[:300]) if reference.startswith("projects/")
                 else "its value (not quoted: it may be the secret itself)")
        raise ValueError(f"{variable}: {given} is not a Secret Manager secret version: give "
                         f"{REFERENCE_SHAPE}, e.g. projects/my-project/secrets/hf-token/versions/latest")
    return reference


def secret_parts(reference: str) -> tuple[str, str | None, str]:
    """(project, location or None for a global secret, secret id) of a reference ``check_reference`` accepted."""
    parts = reference.split("/")
    if parts[2] == "locations":
        return parts[1], parts[3], parts[5]
    return parts[1], None, parts[3]


def check_secrets(value: dict[str, str]) -> dict[str, str]:
    """A job's ``secrets``: at most ``MAX_SECRETS``, each a secret version."""
    if len(value) > MAX_SECRETS:
        raise ValueError(f"at most {MAX_SECRETS} secrets per job ({len(value)} given)")
    for variable, reference in value.items():
        check_reference(variable, reference)
    return value


Secrets = Annotated[dict[EnvName, Annotated[str, Field(max_length=1024)]], AfterValidator(check_secrets)]


# Names a job may not give: Zen's own (ZEN_*: what Zen tells the job, ZEN_NODE_RANK and the rest for a gang's
# node; and torchrun's four, which a gang's node gets from Zen); and for a secret, whose value is also in the
# environment of the agent's launcher, of the docker CLI (``docker run -e NAME`` reads it there) and of what
# that CLI starts (the registry's credential helper, gcloud's shell wrapper, when ``docker run`` pulls), the
# names those programs read: the dynamic loader's (LD_*), Python's (PYTHON*), the docker CLI's (DOCKER_*),
# gcloud's and Google's auth library's (CLOUDSDK_*: CLOUDSDK_PYTHON chose the program the helper ran, on the VM
# outside the container; GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_CLOUD_*, GOOGLE_API_USE_*, GCE_METADATA_*; not
# GOOGLE_API_KEY, which none of them reads and Gemini's SDKs do), OpenSSL's (OPENSSL_CONF loads a library), the
# resolver's (HOSTALIASES, LOCALDOMAIN, RES_OPTIONS), glibc's GCONV_PATH, a shell's (BASH_ENV, ENV, IFS, ...),
# proxies' and CA bundles', PATH and HOME. A list, so never complete: the secrets' values leave the CLI's
# environment only with a pull made before `docker run` (not done).
_RESERVED = re.compile(r"ZEN_.*|MASTER_ADDR|MASTER_PORT|NNODES|NODE_RANK")
_RESERVED_FOR_SECRETS = re.compile(
    r"LD_.*|PYTHON.*|DOCKER_.*|CLOUDSDK_.*|GOOGLE_APPLICATION_CREDENTIALS|GOOGLE_CLOUD_.*|GOOGLE_API_USE_.*"
    r"|GCE_METADATA_.*|OPENSSL_.*|HOSTALIASES|LOCALDOMAIN|RES_OPTIONS|GCONV_PATH"
    r"|BASH_ENV|ENV|IFS|PS4|SHELLOPTS|BASHOPTS|CDPATH"
    r"|(?i:(HTTPS?|FTP|NO|ALL)_PROXY)|SSL_CERT_.*|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|PATH|HOME")


def reserved_secret(name: str) -> bool:
    """A name no secret may have, as ``reserved_names`` refuses it (the agent refuses it too)."""
    return bool(_RESERVED.fullmatch(name) or _RESERVED_FOR_SECRETS.fullmatch(name))


def zens_names(env: dict[str, str]) -> str | None:
    """Why these environment variables (a job's ``env``, an array task's parameters) may not be set: names Zen
    sets itself, over the job's own."""
    taken = sorted(n for n in env if _RESERVED.fullmatch(n))
    if taken:
        return (f"{', '.join(taken)}: names Zen sets itself (ZEN_*, and MASTER_ADDR, MASTER_PORT, NNODES, "
                f"NODE_RANK for a gang's nodes); name your variables otherwise")
    return None


def reserved_names(env: dict[str, str], secrets: dict[str, str] | None) -> str | None:
    """Why a job may not have these ``env`` and ``secrets`` names: one Zen sets itself, or (a secret) one the
    programs that start its container read."""
    if taken := zens_names(env):
        return f"env: {taken}"
    unsafe = sorted(n for n in secrets or {} if reserved_secret(n))
    if unsafe:
        return (f"secrets: {', '.join(unsafe)}: a secret may not be named as Zen's variables or those the programs "
                f"that start the job's container read (ZEN_*, MASTER_ADDR, MASTER_PORT, NNODES, NODE_RANK, LD_*, "
                f"PYTHON*, DOCKER_*, CLOUDSDK_*, Google auth's, OPENSSL_*, the resolver's, a shell's, proxies', "
                f"CA bundles', PATH, HOME: docs/reference/messages.md); "
                f"name it otherwise")
    return None


def env_clash(env: dict[str, str], secrets: dict[str, str] | None) -> str | None:
    """Why a job may not have these ``env`` and ``secrets``: a variable in both (which value would win?)."""
    clash = sorted(set(secrets or {}) & set(env))
    return f"secrets: {', '.join(clash)} also in env: name each variable in env or in secrets, not both" if clash else None


def check_pattern(pattern: str) -> str:
    """A configured pattern of allowed references: the reference's shape, with ``*`` wildcards."""
    if not _PATTERN.fullmatch(pattern):
        raise ValueError(f"secrets: {pattern!r} is not a pattern of secret versions: give "
                         "projects/<project>/secrets/<name>/versions/<version> (a regional secret's: "
                         "projects/<project>/locations/<location>/secrets/<name>/versions/<version>), each part may "
                         "use * wildcards, e.g. projects/my-project/secrets/hf-*/versions/*")
    return pattern


SecretPattern = Annotated[str, AfterValidator(check_pattern)]


def allowed(reference: str, patterns: list[str]) -> bool:
    """Whether one of ``patterns`` allows ``reference``: part by part (between slashes), with fnmatch's
    wildcards, so a ``*`` never reaches into another project or secret."""
    parts = reference.split("/")
    for pattern in patterns:
        wanted = pattern.split("/")
        if len(wanted) == len(parts) and all(fnmatchcase(part, want) for part, want in zip(parts, wanted)):
            return True
    return False


def refused_reference(secrets: dict[str, str] | None, patterns: list[str], owner: str) -> str | None:
    """The reason a job's ``secrets`` may not be read under ``owner``'s rule (``patterns``), or None.
    ``owner``: "queue research", or "this Zen (no queues)"."""
    for variable, reference in sorted((secrets or {}).items()):
        if not allowed(reference, patterns):
            rule = (f"its secrets: {patterns}" if patterns else
                    "its secrets: none; the configuration's secrets: lists the references a job may name")
            return f"secret {variable}: {owner} allows no reference {reference} ({rule})"
    return None
