"""A host-process job's task limit (local mode only: a container has docker's ``--pids-limit``), kept by
its supervisor (``zen.agent.launch``, which loads this file: standard library only).

``RLIMIT_NPROC`` cannot do it: it counts every process of the user, and every job (and the agent, and on
the local stack the developer's own programs) runs as the same user. Two mechanisms, the first that works:

- **A cgroup** (``pids`` controller): the supervisor makes ``zen-job-<its pid>`` under its own cgroup,
  writes the limit to ``pids.max`` and moves the job into it before the job's program runs. The kernel
  then refuses any fork past the limit (``EAGAIN``), however fast the job forks, and counts whatever the
  job starts, daemons included. Possible where the supervisor may write there: cgroup v2 whose own
  cgroup enables ``pids`` for its children (a delegated subtree; the supervisor does not enable it: the
  cgroup holding processes, v2 would refuse), or a writable cgroup v1 ``pids`` hierarchy (as root).
- **Counting** (anywhere else, e.g. a developer's desktop session): every ``LOOK_S`` the supervisor counts
  the tasks (threads included, like ``pids.max``) of every process descended from it, read down the tree
  (``/proc/PID/task/TID/children``; a kernel without it: a walk of all of ``/proc``, the job's session
  too). It is a child subreaper, so a daemonized grandchild stays its descendant. A job can outrun it
  briefly: between two looks it may start what it forks in a tenth of a second (a few hundred processes
  for a Python loop, thousands for a tight fork loop) before it is stopped.

Either way the job over its limit (a fork refused by the cgroup, or more tasks counted than the limit) is
stopped at once: every task it runs gets SIGKILL (no grace: it would only fork on), and the agent reports
it FAILED with the reason (``reason``). Its limit is the container's ``--pids-limit`` for the same slot
(``zen.agent.container.slot_limits``; ``ZEN_AGENT_TASKS_PER_JOB`` sets it).
Why: docs/reference/agent.md#a-jobs-processes
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

LOOK_S = 0.1  # between two counts (and two reads of the cgroup's events)
PR_SET_CHILD_SUBREAPER = 36
KILL_ROUNDS = 200  # SIGKILL to what is left, at most this many times (a job forking while it is killed)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _write(path: str, text: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write(text)
        return True
    except OSError:
        return False


def own_cgroups(proc: str = "/proc/self") -> list[tuple[str, str]]:
    """(version, directory) of this process's own cgroup, in each hierarchy that has the ``pids``
    controller: ``("2", ...)`` first (the unified hierarchy), then ``("1", ...)``."""
    mounts: dict[str, str] = {}
    for line in (_read(f"{proc}/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        fields, kind = left.split(), right.split()
        if len(fields) < 5 or len(kind) < 3:
            continue
        if kind[0] == "cgroup2":
            mounts.setdefault("2", fields[4])
        elif kind[0] == "cgroup" and "pids" in kind[2].split(","):
            mounts.setdefault("1", fields[4])
    found = {}
    for line in (_read(f"{proc}/cgroup") or "").splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        version = "2" if number == "0" and not controllers else "1" if "pids" in controllers.split(",") else None
        if version in mounts:
            found[version] = os.path.join(mounts[version], path.lstrip("/"))
    return [(version, found[version]) for version in ("2", "1") if version in found]


class TaskLimit:
    """At most ``limit`` tasks for the job the supervisor forks (``by``: ``any``, a cgroup where one can be
    made, else counting; ``poll``, counting only). Use: ``TaskLimit(...)`` before the fork, ``enter(child)``
    in the supervisor once forked (before the child runs the job's program), ``over()`` at each look,
    ``stop()`` when over, ``close()`` at the end."""

    def __init__(self, limit: int, by: str = "any"):
        self.limit = limit
        self.look_s = LOOK_S
        self.group: str | None = None  # the job's cgroup directory
        self.peak = 0
        self._me = os.getpid()
        # Its session, when it leads one (zen.agent.runner starts it so): else only its descendants count.
        self._session = self._me if os.getsid(0) == self._me else None
        if by != "poll":
            self.group = self._make_group()
        if self.group is None and sys.platform.startswith("linux"):  # orphans stay descendants, to be counted
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    @property
    def mechanism(self) -> str:
        return "cgroup" if self.group else "counted"

    def _make_group(self) -> str | None:
        for version, parent in own_cgroups():
            if version == "2" and "pids" not in (_read(os.path.join(parent, "cgroup.subtree_control")) or "").split():
                continue  # not delegated with pids: a child would have no pids.max
            _sweep(parent)
            group = os.path.join(parent, f"zen-job-{self._me}")
            try:
                os.mkdir(group)
            except FileExistsError:
                pass
            except OSError:
                continue
            if _write(os.path.join(group, "pids.max"), str(self.limit)):
                return group
            _rmdir(group)
        return None

    def enter(self, child: int) -> None:
        """Move the job's first process into its cgroup (falling back to counting if that fails)."""
        if self.group is not None and not _write(os.path.join(self.group, "cgroup.procs"), str(child)):
            _rmdir(self.group)
            self.group = None
            if sys.platform.startswith("linux"):
                ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    def over(self) -> bool:
        """Whether the job went over its limit: a fork refused by its cgroup, or more tasks counted."""
        if self.group is not None:
            events = _read(os.path.join(self.group, "pids.events")) or ""
            current = (_read(os.path.join(self.group, "pids.current")) or "0").strip()
            self.peak = max(self.peak, int(current) if current.isdigit() else 0)
            return any(line.split()[:1] == ["max"] and line.split()[1:2] != ["0"] for line in events.splitlines())
        counted = sum(self._tasks().values())
        self.peak = max(self.peak, counted)
        return counted > self.limit

    def reason(self) -> str:
        how = ("a fork past it was refused (its cgroup's pids.max)" if self.group is not None
               else f"{self.peak} counted")
        return (f"zen: stopped: the job forked more than {self.limit} processes (its limit: {self.limit} processes "
                f"and threads at once, its share of this VM's, as a container's --pids-limit; {how}); fork less, or "
                "run it alone on a VM (a cluster with max_jobs_per_vm 1)")

    def stop(self, job: int) -> None:
        """SIGKILL every task of the job, again while any is left (it may fork meanwhile); ``job``: its
        first process, the supervisor's child (left for the supervisor to reap)."""
        for _ in range(KILL_ROUNDS):
            pids = self._members() if self.group is not None else set(self._tasks(alive=True))
            if not pids:
                return
            if self.group is None or not _write(os.path.join(self.group, "cgroup.kill"), "1"):
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            self.reap(job)
            time.sleep(0.01)

    def reap(self, job: int) -> None:
        """Reap the orphans the supervisor adopted (a child subreaper) that ended; never ``job``."""
        for pid in set(self._tasks(alive=False, children=True)) - {job}:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass

    def close(self) -> None:
        if self.group is not None:
            _rmdir(self.group)

    def _members(self) -> set[int]:
        text = _read(os.path.join(self.group or "", "cgroup.procs")) or ""
        return {int(pid) for pid in text.split() if pid.isdigit()}

    def _tasks(self, alive: bool = False, children: bool = False) -> dict[int, int]:
        """The job's processes (the supervisor's descendants) and their task counts; ``alive``: zombies left
        out; ``children``: only the zombies the supervisor may reap. Read down the tree from the supervisor
        (``/proc/PID/task/TID/children``): a look costs what the job runs, not what the machine does."""
        if not os.path.exists(f"/proc/{self._me}/task/{self._me}/children"):  # a kernel without it
            return self._walk_all(alive, children)
        counts: dict[int, int] = {}
        todo = [self._me]
        while todo:
            parent = todo.pop()
            try:
                threads = os.listdir(f"/proc/{parent}/task")
            except OSError:
                continue
            for tid in threads:
                for kid in (_read(f"/proc/{parent}/task/{tid}/children") or "").split():
                    pid = int(kid)
                    stat = _read(f"/proc/{pid}/stat")
                    if stat is None or pid in counts:
                        continue
                    fields = stat.rsplit(")", 1)[1].split()  # state ppid pgrp session ... num_threads (the 18th)
                    if children or (alive and fields[0] == "Z"):
                        if children and fields[0] == "Z":
                            counts[pid] = 1
                        continue
                    counts[pid] = max(1, int(fields[17]))  # a zombie still holds its pid
                    todo.append(pid)
        return counts

    def _walk_all(self, alive: bool, children: bool) -> dict[int, int]:
        """``_tasks`` from a walk of every process: the job's session's, and the supervisor's descendants."""
        parents: dict[int, int] = {}
        counts: dict[int, int] = {}
        ours: set[int] = set()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            stat = _read(f"/proc/{name}/stat")
            if stat is None:
                continue
            fields = stat.rsplit(")", 1)[1].split()  # state ppid pgrp session ... num_threads (the 18th)
            pid = int(name)
            if children:
                if int(fields[1]) == self._me and fields[0] == "Z":
                    counts[pid] = 1
                continue
            if alive and fields[0] == "Z":
                continue
            parents[pid] = int(fields[1])
            counts[pid] = max(1, int(fields[17]))  # a zombie still holds its pid
            if int(fields[3]) == self._session and pid != self._me:
                ours.add(pid)
        if children:
            return counts
        for pid in parents:
            seen: list[int] = []
            up = pid
            while up in parents and up not in ours and up != self._me and len(seen) < 1000:
                seen.append(up)
                up = parents[up]
            if up == self._me or up in ours:
                ours.update(seen)
        ours.discard(self._me)
        return {pid: counts[pid] for pid in ours}


def _sweep(parent: str) -> None:
    """Remove the empty cgroups of supervisors gone (one killed has no time to remove its own)."""
    try:
        names = [name for name in os.listdir(parent) if name.startswith("zen-job-")]
    except OSError:
        return
    for name in names:
        owner = name[len("zen-job-"):]
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            _rmdir(os.path.join(parent, name))  # refused while it holds a task: then it stays


def _rmdir(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass
