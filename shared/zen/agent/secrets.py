"""A job's secrets on its VM: each reference in its start message (``StartMessage.secrets``) read from
Secret Manager with the VM's service account as the attempt starts, before anything of the job runs
(``zen.agent.prestart``), into the job's environment only (``zen.agent.runner``: never on a command line).

A reference the VM may not read (permission denied, not found, disabled) fails the attempt: FAILED, the
final report naming the variable, the reference and the reason; running the job again cannot help. An
unavailable service is tried again with backoff for ``BUDGET_S`` at most, all the job's secrets together,
and no reference is read once that budget is spent (slow answers add up as failures do): the attempt
heartbeats meanwhile (``zen.agent.prestart`` reads them in the background), so Zen never takes it for lost
however short its ``heartbeat_timeout_s``. Then the attempt is reported PREEMPTED, as a staging the service failed
is (``zen.agent.transfer``), so Zen runs it again without spending an attempt; one whose last refusal was of the
VM's own token (401: ``vm_fault``) counts toward retiring the VM (``zen.agent.limits.DailyPulls.staged``). A STOP
that came meanwhile makes either STOPPED, the failure named beside
it (``zen.agent.prestart``; one that comes while a read hangs ends the attempt at once): the job's user stopped it
before it started. Why: docs/explanations/security.md#secrets
"""

from __future__ import annotations

import time
from typing import Callable

from zen.adapters.secret_manager import SecretDenied, SecretTokenRefused, SecretUnavailable
from zen.core.models import AgentStatus
from zen.core.secrets import REFERENCE

BUDGET_S = 30.0  # for all of an attempt's secrets, retries included
RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0)  # between tries of one reference while the service is unavailable


class SecretsFailed(Exception):
    """The attempt cannot have its secrets: the status to report and the note naming the variable; ``vm_fault``:
    the note too when the VM's own credentials were refused (its token: 401), else None."""

    def __init__(self, status: AgentStatus, note: str, vm_fault: bool = False):
        super().__init__(note)
        self.status = status
        self.note = note
        self.vm_fault = note if vm_fault else None

    def stopped(self, stop: str | None) -> tuple[AgentStatus, str]:
        """The attempt's end: this failure's, or STOPPED where a STOP came while the secrets were read (``stop``, its
        reason; None: none came): the job never ran and its user had stopped it (reported FAILED, Zen took it for
        the stopped job's own end), the failure still named."""
        if stop is None:
            return self.status, self.note
        return AgentStatus.STOPPED, f"{self.note}\nzen: stopped before it started ({stop})"


def resolve(references: dict[str, str], read: Callable[[str], bytes], *, clock: Callable[[], float] = time.monotonic,
            sleep: Callable[[float], None] = time.sleep) -> dict[str, str]:
    """Variable -> value for each of ``references``, or ``SecretsFailed`` for the first that cannot be read."""
    deadline = clock() + BUDGET_S
    return {variable: _one(variable, reference, read, clock, sleep, deadline)
            for variable, reference in sorted(references.items())}


def _one(variable: str, reference: str, read: Callable[[str], bytes], clock: Callable[[], float],
         sleep: Callable[[float], None], deadline: float) -> str:
    where = f"zen: secret {variable}: {reference}"
    if not REFERENCE.fullmatch(reference):  # Zen checked it at submission: a start from elsewhere
        raise SecretsFailed(AgentStatus.FAILED, f"{where}: not a secret version reference")
    if clock() >= deadline:  # slow answers, each in time, add up: the attempt sends no report meanwhile
        raise SecretsFailed(AgentStatus.PREEMPTED, f"{where}: Secret Manager too slow: the job's secrets were not "
                                                   f"all read within {BUDGET_S:.0f} s (requeued)")
    for delay in (*RETRY_DELAYS_S, None):
        try:
            data = read(reference)
        except SecretDenied as exc:
            raise SecretsFailed(AgentStatus.FAILED, f"{where}: {exc}") from None
        except SecretUnavailable as exc:
            if delay is None or clock() + delay >= deadline:
                raise SecretsFailed(AgentStatus.PREEMPTED, f"{where}: {exc} (requeued)",
                                    vm_fault=isinstance(exc, SecretTokenRefused)) from None
            sleep(delay)
            continue
        try:
            value = data.decode("utf-8")
        except UnicodeDecodeError:
            value = "\0"  # refused below, as a NUL would be
        if "\0" in value:
            raise SecretsFailed(AgentStatus.FAILED, f"{where}: its value is not UTF-8 text without NUL characters, "
                                                    "which an environment variable cannot hold")
        return value
    raise AssertionError("not reached: the last try returns or raises")
