"""What docker says of a container job's end, asked before the agent removes the container (docker forgets it then):
whether the kernel killed one of its processes for want of memory (``oom_killed``), and whether the job's own process
chose an exit code docker also ends ``docker run`` with (``container_end``).

Docker's CLI writes its errors where the job's output goes (``docker run`` attached), so the output cannot tell a
job that printed ``docker: Cannot connect to the Docker daemon ...`` (a docker CLI run inside it, or the words written
on purpose) and exited 125 from docker failing the container's start: such a job had its VM retired and its attempt
requeued free (``zen.agent.container.docker_fault``), VM after VM. Docker's state tells them apart: a container whose
process ran and ended is ``exited`` with its code; one whose start failed is ``created``, and one docker lost runs
on or cannot be read (``zen.agent.launch``, whose inspection this is).
"""

from __future__ import annotations

import logging
import subprocess

from zen.agent.container import DOCKER_EXITS
from zen.agent.launch import container_state

log = logging.getLogger("zen.agent.container")


def container_end(container: str | None, exit_code: int, stopped: bool, docker: str = "docker") -> tuple[bool, bool]:
    """(``oom``, ``ran``) for ``container``'s end with ``exit_code`` (both False for a host process, ``container``
    None, and for a container Zen stopped: its end is Zen's doing). ``oom``: ``oom_killed``, asked of a container
    that failed on its own (not 0, nor docker's 125). ``ran``: docker says the container's process exited with
    ``exit_code``, one of docker's own (``DOCKER_EXITS``): the job chose it, and no line of its output is docker's."""
    if container is None or stopped:
        return False, False
    oom = exit_code not in (0, 125) and oom_killed(container, docker)
    if exit_code not in DOCKER_EXITS:
        return oom, False
    state = container_state(docker, container)
    return oom, state is not None and not state[0] and state[1] == exit_code


def oom_killed(container: str, docker: str = "docker", timeout_s: float = 10.0) -> bool:
    """Whether docker says the kernel killed a process of ``container`` for want of memory (``State.OOMKilled``:
    the container's memory limit, or the VM's memory, ran out). False when docker cannot say (the container is gone:
    hence no ``docker run --rm``, ``zen.agent.runner.docker_argv``). Never raises."""
    try:
        done = subprocess.run([docker, "inspect", "--format", "{{.State.OOMKilled}}", container],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("docker inspect failed", extra={"container": container, "error": str(exc)})
        return False
    return done.returncode == 0 and done.stdout.strip() == "true"
