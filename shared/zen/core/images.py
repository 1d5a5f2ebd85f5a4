"""Container image references as jobs name their ``image``: checked at submission against Docker's
reference grammar (distribution/reference), so that nothing but an image reaches ``docker run``
(``zen.agent.runner`` puts it after the options, where a value such as ``--privileged`` would
otherwise be read as one of them). The grammar: docs/reference/messages.md (``image``).
"""

from __future__ import annotations

import re

MAX_NAME = 255
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::{_TAG})?(?:@{_DIGEST})?", re.ASCII)
EXAMPLE = "us-docker.pkg.dev/my-project/my-repo/train:1"


def image_problem(image: str) -> str | None:
    """Why ``image`` is not a container image reference, or ``None``."""
    shown = repr(image[:100] + ("..." if len(image) > 100 else ""))
    if image.startswith("-"):
        return (f"image {shown} starts with '-', which docker run would read as one of its options: "
                f"give an image reference such as {EXAMPLE}")
    found = REFERENCE.fullmatch(image)
    if found is None:
        lowered = REFERENCE.fullmatch(image.lower())
        hint = "the repository path must be lowercase; " if lowered and image != image.lower() else ""
        return (f"image {shown} is not a container image reference: {hint}give [HOST[:PORT]/]PATH[:TAG]"
                f"[@sha256:DIGEST], the path of lowercase letters, digits and '.', '_' or '-' between them, "
                f"e.g. {EXAMPLE}")
    if len(found["name"]) > MAX_NAME:
        return f"image {shown}: the name before its tag or digest is at most {MAX_NAME} characters"
    return None


def check_image(image: str) -> str:
    """A pydantic validator: ``image`` unchanged when it is a container image reference."""
    problem = image_problem(image)
    if problem:
        raise ValueError(problem)
    return image
