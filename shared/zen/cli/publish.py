"""What ``zen submit`` and ``zen stop`` publish, and how a failure to is said: one line, with the local stack's advice
only where a local stack is what the command talks to (``zen.cli.kit.deployed``). Ctrl-C while a publish is on its
way is such a failure (``Interrupted``, exit 130): the message may have gone out, so the caller says what to do."""

from __future__ import annotations

from typing import Any

from zen.cli import submitted
from zen.cli.kit import CliError, deployed


def publish(topic_field: str, payload: bytes, attributes: dict[str, str] | None = None) -> str:
    from google.cloud import pubsub_v1

    client = pubsub_v1.PublisherClient(credentials=_checked_credentials())
    topic = submitted.topic(topic_field)
    try:
        return client.publish(topic, payload, **(attributes or {})).result(timeout=30)
    except KeyboardInterrupt:  # the request may be out: not the silent exit 130 (a job run with nobody told its id)
        raise Interrupted(f"publishing to {topic} was interrupted (Ctrl-C)", 130) from None
    except Exception as exc:  # noqa: BLE001 - any publishing failure is told in one line
        if type(exc).__name__ == "DefaultCredentialsError":
            raise
        said = (f"could not publish to {topic}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                + ("" if deployed() else " (is the stack up? `zen local up`)"))
        raise (NotPublished if type(exc).__name__ in REFUSED else CliError)(said) from None


REFUSED = ("NotFound", "PermissionDenied", "InvalidArgument", "Unauthenticated")  # Pub/Sub kept nothing


class NotPublished(CliError):
    """A publish Pub/Sub refused outright (no such topic, no permission): nothing went out, unlike a timeout or an
    answer lost, after which the message may have been published all the same."""


class Interrupted(CliError):
    """Ctrl-C while a publish was on its way: like a timeout, the message may have been published all the same."""


def _checked_credentials() -> Any:
    """A deployed Zen's publisher's credentials, refreshed now: refused (a revoked key, an expired login), they are
    said at once (``zen.cli.kit.credentials_problem``), not as a publish timing out after 30 s. None: the emulator's."""
    if not deployed():
        return None
    import google.auth
    from google.auth.transport.requests import Request

    credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    credentials.refresh(Request())
    return credentials


