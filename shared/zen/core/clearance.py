"""Data clearance: which execution groups (tags) may read which data (``data_clearance:`` in the
configuration). A job whose ``inputs`` or ``outputs`` touch a bound prefix runs only on VMs carrying
every tag of the binding, whether or not it asked: its ``requires_tags`` are widened at submission
(``zen.jobs.placement``) and the claim check computes the same tags again from its data
(``zen.jobs.claims``), so a job stored without them still cannot be claimed by an uncleared VM.

A binding is a plain string prefix of ``gs://`` URIs (a bucket alone stands for ``gs://bucket/``), so
``gs://b/data`` also covers ``gs://b/database/``: reading too much as bound errs on the safe side.
Why and the limits (IAM grants are per bucket): docs/how-to/data-placement.md, docs/explanations/security.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from pydantic import Field, field_validator

from zen.core.cluster_config import NAME, ClusterConfig, Strict
from zen.core.gcs import SCHEME, split_uri


class ClearanceBinding(Strict):
    """One entry of ``data_clearance``: only VMs carrying all of ``tags`` may read data under ``prefix``."""

    prefix: str = Field(max_length=1100, description="gs://bucket/ or gs://bucket/some/prefix")
    tags: list[str] = Field(min_length=1, max_length=16, description="A VM must carry every one of them")
    readers: list[str] | None = Field(default=None, max_length=64, description=(
        "Who may name its data in a job (principal patterns: zen.core.principals); unset: whoever may submit"))

    @field_validator("prefix")
    @classmethod
    def _prefix_shape(cls, value: str) -> str:
        bucket, path = split_uri(value)  # ValueError naming the URI and its problem
        return f"{SCHEME}{bucket}/{path}"  # gs://bucket -> gs://bucket/: not gs://bucket-2/

    @field_validator("tags")
    @classmethod
    def _tag_shape(cls, value: list[str]) -> list[str]:
        bad = [t for t in value if not NAME.match(t)]
        if bad:
            raise ValueError(f"tags are lowercase letters, digits and '-': {', '.join(bad)}")
        return sorted(set(value))

    @property
    def bucket(self) -> str:
        return split_uri(self.prefix)[0]


@dataclass(frozen=True)
class Clearance:
    """What a job's data needs: every tag of the bindings it touches, and those bindings' prefixes."""

    tags: tuple[str, ...]
    prefixes: tuple[str, ...]

    def because(self) -> str:
        """Why, in words a user reads in a rejection, a refusal or the job's history."""
        return (f"its data under {', '.join(self.prefixes)} may be read only by VMs tagged "
                f"{list(self.tags)} (data_clearance)")


def check_bindings(bindings: list[ClearanceBinding], clusters: list[ClusterConfig]) -> None:
    """``ValueError`` naming the entry unless each binding's tags are carried together by the VMs of at
    least one cluster region: else no job could ever read its data, which is a typo far more often."""
    carried = [set(c.tags_of(r)) for c in clusters for r in c.regions]
    known = sorted(set().union(*carried)) if carried else []
    seen: set[str] = set()
    for number, binding in enumerate(bindings):
        entry = f"data_clearance[{number}] ({binding.prefix})"
        if binding.prefix in seen:
            raise ValueError(f"{entry}: the prefix is bound twice: give it one entry with all its tags")
        seen.add(binding.prefix)
        unknown = [t for t in binding.tags if t not in known]
        if unknown:
            raise ValueError(f"{entry}: no cluster carries the tags {unknown} (a cluster's tags or region_tags); "
                             f"tags in use: {', '.join(known) or 'none'}")
        if not any(set(binding.tags) <= tags for tags in carried):
            raise ValueError(f"{entry}: no cluster region carries all of {binding.tags} together, so no VM could "
                             "read its data: give the tags to one cluster (or region), or bind fewer")


def touches(uri: str, prefix: str) -> bool:
    """Whether staging or uploading ``uri`` may read or write an object under ``prefix``: ``uri`` lies
    under it, or, taken as a prefix as the agent does when no object has its name
    (``zen.agent.staging``), holds it."""
    bucket, _, path = uri.removeprefix(SCHEME).partition("/")  # checked at submission; never raises on a row
    listed = f"{SCHEME}{bucket}/{path.rstrip('/')}/" if path.strip("/") else f"{SCHEME}{bucket}/"
    return uri.startswith(prefix) or listed.startswith(prefix) or prefix.startswith(listed)


def data_uris(request: dict[str, Any]) -> list[str]:
    """The ``gs://`` URIs a job's request (``Job.request``, or ``JobRequest.canonical``) reads or writes."""
    uris = [spec["uri"] for spec in request.get("inputs") or () if isinstance(spec, dict) and "uri" in spec]
    return uris + ([request["outputs"]] if request.get("outputs") else [])


def clearance_of(bindings: Iterable[ClearanceBinding], uris: Iterable[str]) -> Clearance | None:
    """The tags VMs must carry to read or write ``uris``; None when they touch no bound prefix."""
    uris = list(uris)
    hits = [b for b in bindings if any(touches(uri, b.prefix) for uri in uris)] if uris else []
    if not hits:
        return None
    return Clearance(tuple(sorted({t for b in hits for t in b.tags})), tuple(b.prefix for b in hits))


def for_request(bindings: Iterable[ClearanceBinding], request: dict[str, Any]) -> Clearance | None:
    """``clearance_of`` a stored or canonical request: cheap (a few string comparisons per input and
    binding), so the claim check computes it on every claim rather than trusting the stored tags."""
    return clearance_of(bindings, data_uris(request))
