"""A job's image pulled before its ``docker run`` (``pull``), under a progress bound: when the VM does not hold it, and
before every attempt when it is named by the tag ``latest`` or by no tag (docker reads ``latest`` then) and no digest
(``mutable``), as Kubernetes' default ``imagePullPolicy`` does. Such a tag is one a user pushes again under the same
name: a copy held by a VM that ran it before may be older than the registry's, and a job would run old code on a warm
VM and new code on a fresh one (silently wrong results, reruns of one job running different code). Other tags and
digests (``@sha256:``) are pulled only when absent. A re-pull that fails leaves the job's ``docker run`` to pull once
more (``--pull always``, ``JobSpec.pull_always``), not to run the copy held (but below): as on a VM that holds none, an
image docker could not get says why (``zen.agent.container.docker_fault``, ``exit_note``): a registry unreachable or its
5xx requeues the attempt unspent and the VM retires, an image not found or denied is the job's FAILED. Why not run the
copy held, with a word in the attempt's note: which code a job ran would then depend on which VM it landed on and on the
registry's minute, and a note is read, if at all, after the results are used; a registry's outage costs a requeue
instead, which a fresh VM (holding no copy) pays anyway. The exception: a registry that refuses the re-pull for its rate
limit (Docker Hub's 429, ``toomanyrequests``, counted per address: every VM behind the same NAT shares it for hours),
where the VM holds a copy: the copy runs, a line of the job's output saying so (``RATE_LIMITED``, ``said``): requeued
instead, every attempt of such an image would retire VM after VM, each refused the same way, for as long as the limit
holds.
A pull whose docker shows no progress for ``AgentSettings.pull_stall_s`` (a registry or a network that stops sending
without closing: docker would wait for hours, the attempt RUNNING, the VM billed) is killed, and the attempt is
requeued unspent as for a pull the network cut short (``zen.agent.container.PULL_CUT``): the VM's or passing, it
retires. The attempt heartbeats RUNNING meanwhile, saying it pulls; a STOP, the VM's shutdown, the fence and
``max_runtime_s`` (the pull's time counts, as in ``docker run``) cut it. A gang's node pulls its image ahead while the
gang assembles (``pull_ahead``).

Progress is docker's output on a terminal (``docker pull`` writes its progress bars only to one: off a terminal it is
silent while a large layer downloads): a line it had not shown, a layer's new count. Not a line redrawn as it was:
with the containerd image store the daemon resends every download's count each 100 ms, moved or not, and docker
redraws it, the registry silent. A pull that fails otherwise is left to the job's
``docker run``, which pulls again and says why (``zen.agent.container.docker_fault``, ``exit_note``).
Why: docs/reference/agent.md#a-jobs-container
"""

from __future__ import annotations

import codecs
import logging
import math
import os
import pty
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from zen.agent.runner import JobSpec, remove_image
from zen.agent.settings import AgentSettings
from zen.agent.transfer import Listen
from zen.core.models import AgentStatus, ControlAction, OverLimit, StartMessage

log = logging.getLogger("zen.agent.attempt")  # the attempt's logger: its lines are the attempt's
INSPECT_TIMEOUT_S = 30.0  # ``docker image inspect``: past it, the job's ``docker run`` pulls as it would
LAST_CHARS = 120  # of docker's last line, in the RUNNING heartbeat's message
WHAT = "pulling the job's image"
RATE_LIMITED = re.compile(r"toomanyrequests|429 Too Many Requests|rate limit", re.IGNORECASE)  # a registry's refusal
# What a terminal reads as cursor moves, line clearing and colours (ECMA-48 CSI sequences, and two-byte escapes).
TERMINAL_CODES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


@dataclass(frozen=True)
class PullCut:
    """How a pull ended the attempt before its command ran: its status, note, limit, and why the VM retires."""

    status: AgentStatus
    note: str
    over_limit: OverLimit | None = None
    retire: str | None = None


def mutable(image: str) -> bool:
    """Whether ``image`` is named by the tag ``latest`` or by none, and no digest: pulled before every attempt."""
    if "@" in image:
        return False
    name = image.rsplit("/", 1)[-1]  # a registry's port (``host:5000/train``) is no tag
    return ":" not in name or name.endswith(":latest")


def held(image: str, docker: str) -> bool:
    """Whether the VM holds ``image`` (True too when docker cannot say: the job's ``docker run`` pulls it then)."""
    try:
        done = subprocess.run([docker, "image", "inspect", "--format", "{{.Id}}", "--", image], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=INSPECT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("docker image inspect failed", extra={"image": image, "error": str(exc)})
        return True
    return done.returncode == 0


class Pull:
    """``docker pull -- IMAGE`` on a pseudo-terminal, in a process group of its own; a thread reads its output."""

    def __init__(self, image: str, docker: str):
        self.image = image
        self.began = self.heard = time.monotonic()
        self.last = ""
        self._shown: dict[str, str] = {}  # each line docker redraws in place (by its layer: ``ID: ...``), as last shown
        ours, theirs = pty.openpty()
        try:
            self.process = subprocess.Popen([docker, "pull", "--", image], stdin=subprocess.DEVNULL, stdout=theirs,
                                            stderr=theirs, start_new_session=True)
        except BaseException:
            os.close(ours)
            raise
        finally:
            os.close(theirs)
        self._fd = ours
        threading.Thread(target=self._read, name="zen-image-pull", daemon=True).start()

    def _read(self) -> None:
        decoder, rest = codecs.getincrementaldecoder("utf-8")(errors="replace"), ""
        try:
            while chunk := os.read(self._fd, 65536):
                *lines, rest = (rest + decoder.decode(chunk)).replace("\r", "\n").split("\n")
                self._keep(lines)
                rest = rest[-4096:]  # a line not ended yet (a chunk may end inside it, or inside a cursor move)
        except OSError:  # EIO: docker ended, the terminal closed
            pass
        finally:
            os.close(self._fd)
        self._keep([rest])

    def _keep(self, lines: list[str]) -> None:
        """``lines`` once the terminal's control sequences are gone (docker redraws each layer's line in place, ending
        it with a cursor move, ``ESC[1B``, which alone says nothing): the last with text is ``last``; one that differs
        from its layer's line as last shown is progress (``heard``)."""
        for line in (TERMINAL_CODES.sub("", line).strip() for line in lines):
            if not line:
                continue
            if self._shown.get(key := line.split(": ", 1)[0]) != line:
                self._shown[key] = line
                self.heard = time.monotonic()
            self.last = line

    def silent_s(self) -> float:
        return time.monotonic() - self.heard

    def describe(self) -> str:
        return (f"{time.monotonic() - self.began:.0f} s, last progress {self.silent_s():.0f} s ago"
                + (f" ({self.last[-LAST_CHARS:]})" if self.last else ""))

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.process.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            log.error("docker pull not ended after SIGKILL", extra={"image": self.image})


def pull(spec: JobSpec, settings: AgentSettings, vm: str, clock: Callable[[], float], *, listen: Listen,
         stopping: Callable[[], bool], fenced: Callable[[], str | None], max_runtime_s: float | None = None,
         shut_down: Callable[[str], str], spent: Sequence[str] = (),
         said: Callable[[str], None] = lambda line: None) -> JobSpec | PullCut | None:
    """Pull ``spec``'s image unless the VM holds it and it is not ``mutable`` (or it has none), heartbeating the attempt
    through ``listen``. ``spec`` with what the pull left of its ``max_runtime_s`` once docker is done (pulled, or
    failed: the job's ``docker run`` then says why, pulling a ``mutable`` image again, ``pull_always``; docker pull not
    started: ``spec`` with ``pull_always`` alone); None: nothing pulled. Else how the attempt ends: its pull stalled
    (PREEMPTED, the VM retires), a STOP (STOPPED), the VM's shutdown or the fence (PREEMPTED), its ``max_runtime_s``
    (FAILED). ``spec.max_runtime_s`` is what is left of the job's ``max_runtime_s`` (the one its note names; staging
    may have taken some: ``spent`` says so, in the same note). ``said``: a line of the job's output (the copy held run
    for a registry's rate limit). ``shut_down(WHAT)``: the note of a pull the VM's shutdown cut ("VM ... shut down
    while ...", Zen's word for a preemption; a host maintenance's own: ``zen.agent.shutdown.Shutdown.cut``)."""
    image, limit_s = spec.image, spec.max_runtime_s
    named = max_runtime_s if max_runtime_s is not None else limit_s
    if not image or (not (always := mutable(image)) and held(image, settings.docker)):
        return None
    try:
        pulling = Pull(image, settings.docker)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        log.warning("could not start docker pull", extra={"image": image, "error": str(exc)})
        return replace(spec, pull_always=always)
    next_beat, limit_at = clock(), pulling.began + (limit_s if limit_s is not None else math.inf)
    try:
        while pulling.process.poll() is None:
            if stopping():
                return PullCut(AgentStatus.PREEMPTED, f"zen: {shut_down(WHAT)}")
            if (note := fenced()) is not None:
                return PullCut(AgentStatus.PREEMPTED, note)
            if time.monotonic() >= limit_at:  # its command never ran: not "killed"
                return PullCut(AgentStatus.FAILED, over(named, spent, pulling), "max_runtime_s")
            if pulling.silent_s() >= settings.pull_stall_s:
                why = (f"docker's pull of the job's image {image} made no progress for {settings.pull_stall_s:g} s (the "
                       f"registry or the VM's network stopped sending): cancelled after {pulling.describe()}")
                return PullCut(AgentStatus.PREEMPTED, f"zen: {why} (requeued; VM {vm} takes no more jobs)", retire=why)
            next_beat, order = listen(next_beat, message=f"zen: {WHAT} {image}: {pulling.describe()}")
            if order is not None and order.action is ControlAction.STOP:
                return PullCut(AgentStatus.STOPPED, f"zen: stopped while {WHAT} ({order.reason or 'stop requested'})")
        if failed := always and pulling.process.returncode != 0:  # not the copy held: docker run pulls, or says why
            log.warning("docker pull failed", extra={"image": image, "error": pulling.last[-LAST_CHARS:]})
            if RATE_LIMITED.search(pulling.last) and held(image, settings.docker):  # but for a registry's rate limit
                failed = False
                said(f"zen: the registry refused to pull {image} again for its rate limit ({pulling.last[-LAST_CHARS:]}):"
                     f" the job runs the copy this VM holds, which may be older than the registry's")
        if always and not failed and pulling.process.returncode == 0:
            prune(settings.docker)
        if (left := limit_at - time.monotonic()) <= 0:  # done just past it, between two looks
            return PullCut(AgentStatus.FAILED, over(named, spent, pulling), "max_runtime_s")
        return replace(spec, max_runtime_s=left if limit_s is not None else None, pull_always=failed)
    finally:
        pulling.stop()


def prune(docker: str) -> None:
    """The images no tag names any more removed (``docker image prune``: never one a container uses): each re-pull
    of a ``mutable`` image a user pushed again leaves the one before it unnamed, which no eviction by name reaches
    (``zen.agent.cache``), warm VMs filling their disks push after push."""
    try:
        subprocess.run([docker, "image", "prune", "--force"], stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=INSPECT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("docker image prune failed", extra={"error": str(exc)})


def over(max_runtime_s: float | None, spent: Sequence[str], pulling: Pull) -> str:
    """The note of a pull cut at the job's ``max_runtime_s``: its command never ran (not "killed")."""
    return (f"zen: {WHAT} exceeded max_runtime_s={max_runtime_s:g} (its command never ran; "
            + "".join(f"{line} of it; " for line in spent) + f"{pulling.describe()})")


def killed_note(max_runtime_s: float | None, counted: Sequence[str]) -> str:
    """The note of a job the agent killed at its ``max_runtime_s``, naming what took some of it before its command
    ran (``counted``: staging its inputs, pulling its image)."""
    return f"zen: killed after exceeding max_runtime_s={max_runtime_s}" + (
        f" ({' and '.join(counted)} of it)" if counted else "")


def pull_ahead(start: StartMessage, docker: str, local: bool, holds_image: Callable[[str], bool],
               log: logging.LoggerAdapter[logging.Logger]) -> Callable[[bool], None]:
    """A gang's node (``start.nodes`` set) pulls the job's image while it waits for the others to claim
    (up to ``assemble_s``, minutes when they boot), in the background: once the last node claims,
    every node's ``docker run`` finds the image here instead of pulling it then, so the gang's command
    starts sooner. A one-node job is answered at once: nothing to gain. Returns what to call when the
    claim is over (True: the attempt runs here): otherwise (released, unanswered, the agent stopping)
    a pull still going is stopped, and an image it brought that no job here ran (``holds_image``) is removed again."""
    if start.nodes is None or not start.image or local:
        return lambda runs: None
    image = start.image
    pulling = start_pull(image, docker)

    def over(runs: bool) -> None:
        if pulling is None:
            return
        try:
            if runs:  # docker run waits for the same layers; the pull is reaped when it ends
                threading.Thread(target=pulling.wait, name="zen-image-pull", daemon=True).start()
            elif pulling.poll() is None:
                pulling.kill()
                pulling.wait()
            elif pulling.returncode == 0 and not holds_image(image):
                threading.Thread(target=remove_image, args=(image, docker), name="zen-image-rm", daemon=True).start()
        except Exception:  # noqa: BLE001 - best effort, as the pull itself
            log.exception("the image pulled ahead was not settled", extra={"image": image})

    return over


def start_pull(image: str, docker: str = "docker") -> subprocess.Popen[bytes] | None:
    """``docker pull -- IMAGE`` started in the background, its output dropped (the image after ``--``, as
    ``docker run`` gets it: never read as an option). Best effort: None when docker could not be started
    (logged); the job's ``docker run`` pulls the image anyway, and says why if it cannot."""
    try:
        return subprocess.Popen([docker, "pull", "--", image], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        log.warning("could not pull an image ahead", extra={"image": image, "error": str(exc)})
        return None
