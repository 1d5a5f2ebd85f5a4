"""Removing a job's container once its attempt has ended or been stopped (``remove_container``), and
the ``zen-*`` containers an earlier agent left (``remove_leftover_containers``): a container is not the
docker CLI, and one still there may hold the GPUs. Each docker call has a short timeout; what docker
cannot be made to remove is reported, never raised past the caller's budget. A container goes with its anonymous
volumes (``docker rm -f -v``): an image's ``VOLUME`` gives each container one, writable whatever ``--read-only``
says, which ``docker run --rm`` would remove and ``docker rm -f`` alone keeps on the VM's disk (what one user's
job wrote there, left to the next job's VM). Standard library only: the job's supervisor loads it from its file (``launch.py``).
"""

from __future__ import annotations

import logging
import math
import subprocess
import time

log = logging.getLogger("zen.agent.removal")
REMOVE_TRIES = 3  # docker rm -f of a container still there, at most
REMOVE_PAUSE_S = 1.0  # between two tries
DOCKER_TIMEOUT_S = 10.0  # each docker ps / rm of a removal


# Every state but "removing": a container docker is removing (an ``rm -f`` whose call timed out; a big layer
# takes a while) is as good as gone, and ``rm -f`` of it fails ("already in progress").
NOT_REMOVING = [f"--filter=status={state}" for state in ("created", "restarting", "running", "paused", "exited",
                                                          "dead")]


def _containers(docker: str, pattern: str, timeout_s: float = DOCKER_TIMEOUT_S) -> list[str] | None:
    """The ids of the containers, running or not (but not being removed), whose name matches ``pattern``
    (docker's regular expression); None when docker cannot say (no docker, an error, a timeout)."""
    try:
        listed = subprocess.run([docker, "ps", "-aq", "--filter", f"name={pattern}", *NOT_REMOVING],
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s,
                                check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("docker ps failed", extra={"error": str(exc)})
        return None
    if listed.returncode != 0:
        log.warning("docker ps failed", extra={"error": listed.stderr.strip()[-300:]})
        return None
    return listed.stdout.split()


def _remove(docker: str, pattern: str, tries: int, name: str | None = None,
            budget_s: float = math.inf) -> tuple[list[str], bool]:
    """``docker rm -f -v`` the containers matching ``pattern``, their anonymous volumes with them (by ``name`` if
    given, even when docker cannot list them; else by the ids listed) until docker lists none, ``tries`` times at
    most and within ``budget_s`` (each docker call's timeout cut to what is left): (the ids found, whether none is
    left)."""
    found: list[str] = []
    deadline = time.monotonic() + budget_s

    def left() -> float:
        return min(DOCKER_TIMEOUT_S, deadline - time.monotonic())

    for n in range(tries + 1):
        if n:
            time.sleep(min(REMOVE_PAUSE_S, max(0.0, left())))
        if left() <= 0:
            break
        ids = _containers(docker, pattern, left())
        if ids == []:
            return found, True
        found += [cid for cid in ids or () if cid not in found]
        targets = [name] if name else ids
        if n == tries or not targets:
            continue
        if left() <= 0:
            break
        try:
            subprocess.run([docker, "rm", "-f", "-v", *targets], stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=left(), check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("docker rm failed", extra={"containers": targets, "error": str(exc)})
    return found, False


def remove_container(name: str, docker: str = "docker", *, tries: int = REMOVE_TRIES,
                     budget_s: float = math.inf) -> bool:
    """Make sure no container is named ``name``: ``docker rm -f`` it until ``docker ps -a`` lists none of
    that name (or only one docker is removing), ``tries`` times at most, within ``budget_s``. True once
    docker says it is gone; False (logged as an error) when it is still there or docker cannot say.
    Never raises."""
    found, gone = _remove(docker, _exactly(name), tries, name, budget_s)
    if not gone:
        log.error("a job's container could not be removed: it may still run", extra={
            "container": name, "containers": found})
    return gone


def _exactly(name: str) -> str:
    """Docker's name filter matching the container ``name`` alone."""
    return "^" + name.replace(".", r"\.") + "$"


def listed_gone(name: str, docker: str = "docker", timeout_s: float = DOCKER_TIMEOUT_S) -> bool:
    """Whether docker lists no container named ``name`` (or only one it is removing): False when it lists one, or
    cannot say (an error, a timeout). Never raises."""
    return _containers(docker, _exactly(name), timeout_s) == []


def may_run(name: str, docker: str = "docker", timeout_s: float = DOCKER_TIMEOUT_S) -> bool:
    """Whether the container ``name`` may still run: False only when docker says it does not (exited, dead, or
    gone); True when it runs or docker cannot say (an error, a timeout). Never raises."""
    try:
        said = subprocess.run([docker, "inspect", "--format", "{{.State.Running}}", name], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return True
    if said.returncode != 0:
        return "no such" not in said.stderr.lower()
    return said.stdout.strip() != "false"


class ContainersLeft(Exception):
    """Containers of earlier attempts that could not be removed (or docker could not say); ``found``: their ids."""

    def __init__(self, message: str, found: list[str] | None = None):
        super().__init__(message)
        self.found = found or []


def remove_leftover_containers(docker: str = "docker", *, tries: int = REMOVE_TRIES) -> list[str]:
    """Remove the ``zen-*`` containers a previous agent left (it crashed, or was killed), as
    ``remove_container`` does one: returns the ids removed. Raises ``ContainersLeft`` when some are still
    there, or docker cannot list them (no docker): the agent then retires its VM, as one of them may
    hold its GPUs, and powers it off when docker does not say one of them has stopped. Called first thing at
    agent start in container mode (``zen.agent.__main__``)."""
    found, gone = _remove(docker, "^zen-", tries)
    if not gone:
        left = " ".join(found) if found else "docker cannot list them"
        raise ContainersLeft(f"containers of earlier attempts could not be removed ({left}): one may hold the GPUs",
                             found)
    return found

