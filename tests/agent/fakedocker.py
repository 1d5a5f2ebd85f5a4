"""A stand-in docker CLI for the agent tests: a script that records its argv and keeps its containers
as files (``containers/<name>``, holding the id), so that a container outlives its ``docker run``
as a real one does.

- ``run --name NAME ...``: the container exists until ``kill`` or ``rm -f`` removes it; the CLI ignores
  SIGTERM meanwhile (a container stuck in shutdown), then exits 137. With ``leaves()``, the container ends at once,
  its CLI exiting 0, and the exited container stays (for the agent to remove). With
  ``ends(code, stderr, oom_killed)``, the container ends at once: the CLI writes ``stderr`` and exits ``code``,
  and the exited container stays (``--rm``: docker removes it, and what ``inspect`` would have said with it);
  ``only``: that container alone ends so, the others run as without ``ends``;
  ``writes``: files the job writes in its ``ZEN_OUTPUT_DIR`` (mounted at the same path) before it ends, ``caches``:
  in its ``HOME``. ``home(name)``: the HOME a container was given, and its mode as it started.
- ``inspect --format {{.State.OOMKilled}} NAME`` (or its id): ``true`` for a container ``ends(..., oom_killed=True)`` ended,
  else ``false``; ``{{.State.Running}}``: ``false`` for a container ``ends`` ended, else ``true``; exits 1 for a
  container that does not exist.
- ``cli_pid(name)``: the ``run`` CLI's own process, which a test may kill while its container runs on;
  ``finish(name, code)``: the container ends with ``code`` (its ``run`` or ``attach`` CLI exits it, ``inspect --format
  '{{.State.Status}} {{.State.ExitCode}}'`` says ``exited CODE``; ``running 0`` while it runs); ``created(name)``:
  docker never started it (``created 0``).
- ``attach NAME``: follows a running container until it ends (exits its code; 137 when removed); exits 1 for one
  that runs no more or does not exist.
- ``slow_exit(seconds)``: a ``run`` CLI ends that long after its container was killed or removed.
- ``kill NAME``: removes the container (with ``kill_keeps()``: ends it, and it stays, as docker's does); ``rm -f X...``: removes those named or with those ids.
- ``pulls(lines, every_s, stalls)``: images are absent until pulled (``image inspect`` exits 1; without it every
  image is held); ``pull`` (and ``run``, pulling first) prints a progress line every ``every_s`` (on a terminal, in
  docker's cursor moves), then ends, or with ``stalls`` goes silent for an hour (a registry that stops sending without
  closing).
- ``pull_fails(line)``: ``pull``, and a ``run`` that pulls (its image absent, or ``--pull always``), fail with docker's
  ``line`` (the registry's answer), ``run`` exiting 125.
- ``image_declares_volume()``: every container run from now on gets an anonymous volume (an image's ``VOLUME``;
  ``volumes/<name>``, as ``add(..., volume=True)`` gives an earlier agent's); ``rm`` removes it only with ``-v``
  (``--volumes``), as docker does: without it the volume, and what the job wrote there, stays on the VM.
- ``ps -aq --filter name=RE``: the ids of the containers whose name matches.
- ``network inspect NAME``: exits 1 unless ``network create ... NAME`` made it (``networks/<name>``).
- ``fail(command)``: that command (``kill``, ``rm``, ``ps``) exits 1 and does nothing from now on;
  ``hang(command)``: it never answers; ``removing(name)``: docker is removing that container; ``stuck(name)``:
  docker cannot remove nor kill that container (the others an ``rm -f`` names go).
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

SCRIPT = """\
#!{python}
import json, os, pathlib, re, signal, sys, time
root = pathlib.Path({root!r})
containers = root / "containers"
args = sys.argv[1:]
if args[0] == "run" and not (root / "leaves").exists():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # before the call is seen: a test waiting for it may stop it
with open(root / "calls.jsonl", "a") as out:
    out.write(json.dumps(args) + "\\n")
if (root / ("fail-" + args[0])).exists():
    print("Error response from daemon: injected failure", file=sys.stderr)
    sys.exit(1)
if (root / ("hang-" + args[0])).exists():
    time.sleep(3600)
pulls = json.loads((root / "pulls").read_text()) if (root / "pulls").exists() else None
absent = pulls is not None and not (root / "pulled").exists()
repull = args[0] == "run" and "--pull" in args[:args.index("--")] and args[args.index("--pull") + 1] == "always"
if (root / "pull-fails").exists() and (args[0] == "pull" or args[0] == "run" and (absent or repull)):
    print(("docker: " if args[0] == "run" else "") + (root / "pull-fails").read_text(), file=sys.stderr)
    sys.exit(125 if args[0] == "run" else 1)
if args[:2] == ["image", "inspect"]:
    if absent:
        print("Error response from daemon: No such image: " + args[-1], file=sys.stderr)
    sys.exit(1 if absent else 0)


def pull(out):  # as docker's: a line per step, then silence (``stalls``) or done; on a terminal, as docker 28 redraws
    for step in range(pulls["lines"]):  # a layer's line in place: up, clear, the line, then back down (no newline)
        line = f"{{step}}: Downloading [{{'=' * step}}>] {{step}}MB"
        out.write("\\x1b[1A\\x1b[2K\\r" + line + "\\r\\x1b[1B" if out.isatty() else line + "\\n")
        out.flush()
        if step + 1 < pulls["lines"] or not pulls["stalls"]:
            time.sleep(pulls["every_s"])
    while pulls["stalls"] and pulls.get("redraws") and pulls["lines"]:  # the daemon resends the count, unmoved
        out.write("\\x1b[1A\\x1b[2K\\r" + line + "\\r\\x1b[1B" if out.isatty() else line + "\\n")
        out.flush()
        time.sleep(pulls["every_s"])
    if pulls["stalls"]:
        time.sleep(3600)
    (root / "pulled").touch()


if args[0] == "pull":
    if pulls is not None:
        pull(sys.stdout)
    sys.exit(0)
if args[0] == "run" and absent:  # docker run pulls the image first
    print("Unable to find image '" + args[args.index("--") + 1] + "' locally", file=sys.stderr, flush=True)
    pull(sys.stderr)
if args[0] == "network":
    network = root / "networks" / args[-1]
    if args[1] == "inspect" and not network.exists():
        print("Error response from daemon: network " + args[-1] + " not found", file=sys.stderr)
        sys.exit(1)
    if args[1] == "create":
        network.parent.mkdir(exist_ok=True)
        network.touch()
    sys.exit(0)
if args[0] == "run":
    name = args[args.index("--name") + 1]
    (containers / name).write_text("id-" + name)
    (root / ("cli-" + name)).write_text(str(os.getpid()))  # this CLI's process (``cli_pid``), not the container
    if (root / "image-volume").exists():
        (root / "volumes").mkdir(exist_ok=True)
        (root / "volumes" / name).write_text("written by the job")
    home = next((a.split("=", 1)[1] for a in args if a.startswith("HOME=")), None)
    if home is not None:  # what the job's HOME is as it starts
        seen = os.stat(home) if os.path.isdir(home) else None
        (root / ("home-" + name)).write_text(json.dumps({{"path": home, "mode": seen and seen.st_mode & 0o7777}}))
    end = json.loads((root / "ends").read_text()) if (root / "ends").exists() else None
    if end and end.get("only") in (None, name):
        (root / ("oom-" + name)).write_text("true" if end["oom_killed"] else "false")
        (root / ("exit-" + name)).write_text(str(end["code"]))
        if not end["started"]:  # docker failed its start: ``created``, as ``created(name)`` says
            (root / ("created-" + name)).touch()
        outputs = next((a.split("=", 1)[1] for a in args if a.startswith("ZEN_OUTPUT_DIR=")), None)
        for file, text in end.get("writes", {{}}).items() if outputs else ():
            (pathlib.Path(outputs) / file).write_text(text)
        for file, text in end.get("caches", {{}}).items() if home else ():
            (pathlib.Path(home) / file).parent.mkdir(parents=True, exist_ok=True)
            (pathlib.Path(home) / file).write_text(text)
        if "--rm" in args:
            (containers / name).unlink()
        sys.stderr.write(end["stderr"])
        sys.exit(end["code"])
    if (root / "leaves").exists():  # its container ended (0) and stays, for the agent to remove
        (root / ("oom-" + name)).write_text("false")
        sys.exit(0)
    while (containers / name).exists() and not (root / ("oom-" + name)).exists():  # (``kill_keeps``: ended)
        time.sleep(0.05)
    if (root / "slow-exit").exists():  # the container is gone, its CLI not yet
        time.sleep(float((root / "slow-exit").read_text()))
    sys.exit(int((root / ("exit-" + name)).read_text()) if (root / ("exit-" + name)).exists() else 137)
if args[0] == "attach":  # the container's output and end, as its ``docker run`` would have them
    name = next((p.name for p in containers.iterdir() if p.read_text() == args[-1]), args[-1])
    if not (containers / name).exists():
        print("Error: No such container: " + name, file=sys.stderr)
        sys.exit(1)
    if (root / ("oom-" + name)).exists():
        print("You cannot attach to a stopped container, start it first", file=sys.stderr)
        sys.exit(1)
    print("attached to " + name, flush=True)  # (output the container prints from now on)
    (root / ("attached-" + name)).write_text("")  # (``attached``: its line printed)
    while (containers / name).exists() and not (root / ("oom-" + name)).exists():
        time.sleep(0.05)
    sys.exit(int((root / ("exit-" + name)).read_text()) if (root / ("exit-" + name)).exists() else 137)
if args[0] == "kill" and (root / ("stuck-" + args[1])).exists():
    print("Error response from daemon: cannot kill container " + args[1] + ": injected failure", file=sys.stderr)
    sys.exit(1)
if args[0] == "kill" and (root / "kill-keeps").exists():
    (root / ("oom-" + args[1])).write_text("false")  # it has run out, and stays
elif args[0] == "kill":
    (containers / args[1]).unlink(missing_ok=True)
if args[0] == "inspect":  # by name, or by id (as ``ps -q`` gives them)
    args[-1] = next((p.name for p in containers.iterdir() if p.read_text() == args[-1]), args[-1])
    if not (containers / args[-1]).exists():
        print("Error: No such object: " + args[-1], file=sys.stderr)
        sys.exit(1)
    oom = root / ("oom-" + args[-1])
    ended = root / ("exit-" + args[-1])
    created = (root / ("created-" + args[-1])).exists()  # (``created``: never started, its exit code 0)
    if "{{{{.State.Status}}}} {{{{.State.ExitCode}}}}" in args:  # (``finish``: its exit code)
        print("created 0" if created else ("exited " + (ended.read_text() if ended.exists() else "0"))
              if oom.exists() else "running 0")
    elif "{{{{.State.Running}}}} {{{{.State.ExitCode}}}}" in args:
        print("false 0" if created else ("false " + (ended.read_text() if ended.exists() else "0"))
              if oom.exists() else "true 0")
    elif "{{{{.State.Running}}}}" in args:  # one ``ends`` ended has run out; the others run until removed
        print("false" if oom.exists() else "true")
    else:
        print(oom.read_text() if oom.exists() else "false")
removing = set(p.name.removeprefix("removing-") for p in root.glob("removing-*"))
if args[0] == "rm":
    targets = [a for a in args[1:] if not a.startswith("-")]
    stuck = []
    for path in containers.iterdir():
        if path.name in targets or path.read_text() in targets:
            if path.name in removing:
                print("Error response from daemon: removal of container is already in progress", file=sys.stderr)
                sys.exit(1)
            if (root / ("stuck-" + path.name)).exists():  # the others named are removed, as docker does
                stuck.append(path.name)
                continue
            path.unlink()
            if "-v" in args or "--volumes" in args:
                (root / "volumes" / path.name).unlink(missing_ok=True)
    if stuck:
        print("Error response from daemon: cannot remove container " + stuck[0] + ": injected failure",
              file=sys.stderr)
        sys.exit(1)
if args[0] == "ps":
    pattern = args[args.index("--filter") + 1].removeprefix("name=")
    states = [a.removeprefix("--filter=status=") for a in args if a.startswith("--filter=status=")]
    shown = [p for p in sorted(containers.iterdir()) if re.search(pattern, p.name)
             and not (states and "removing" not in states and p.name in removing)]
    print("\\n".join(p.read_text() for p in shown))
"""


class FakeDocker:
    def __init__(self, root: Path):
        self.root = root
        self.containers = root / "containers"
        self.containers.mkdir(parents=True, exist_ok=True)
        script = root / "docker"
        script.write_text(textwrap.dedent(SCRIPT.format(python=sys.executable, root=str(root))))
        script.chmod(0o755)
        self.path = str(script)

    def calls(self) -> list[list[str]]:
        path = self.root / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def fail(self, command: str) -> None:
        (self.root / f"fail-{command}").touch()

    def hang(self, command: str) -> None:
        """That command (``kill``, ``rm``, ``ps``) never answers (a hung daemon) from now on."""
        (self.root / f"hang-{command}").touch()

    def removing(self, name: str) -> None:
        """Docker is removing that container (an ``rm -f`` that timed out): ``ps`` shows it only without a
        status filter, ``rm -f`` of it fails ("already in progress")."""
        (self.root / f"removing-{name}").touch()

    def stuck(self, name: str) -> None:
        """Docker cannot remove (nor kill) that container from now on: ``rm -f`` of it exits 1, and removes the others
        it names (as docker does), ``kill`` of it exits 1; it runs on."""
        (self.root / f"stuck-{name}").touch()

    def slow_exit(self, seconds: float) -> None:
        """A ``run`` CLI ends ``seconds`` after its container was killed (a slow daemon's answer, a full pipe)."""
        (self.root / "slow-exit").write_text(repr(seconds))

    def kill_keeps(self) -> None:
        """``kill`` ends a container and leaves it there (exited: ``rm -f`` removes it)."""
        (self.root / "kill-keeps").touch()

    def cli_pid(self, name: str) -> int | None:
        """The process of the ``docker run`` CLI of container ``name`` (None: not run yet): killing it leaves the
        container running, as a real one's does (docker's daemon runs it, not its CLI)."""
        said = self.root / f"cli-{name}"
        return int(said.read_text()) if said.exists() and said.read_text() else None

    def attached(self, name: str) -> bool:
        """Whether a ``docker attach`` follows container ``name`` (its ``attached to`` line printed)."""
        return (self.root / f"attached-{name}").exists()

    def finish(self, name: str, code: int) -> None:
        """The running container ``name`` ends with exit code ``code`` and stays (``inspect`` says it runs no more,
        ``{{.State.ExitCode}}`` says ``code``): its ``run`` or ``attach`` CLI, if any, exits ``code``."""
        (self.root / f"exit-{name}").write_text(str(code))
        (self.root / f"oom-{name}").write_text("false")

    def created(self, name: str) -> None:
        """The container ``name`` exists but docker never started it (its CLI ended between its create and its start,
        or the start is still under way): ``inspect`` says ``created``, its exit code 0, ``{{.State.Running}}``
        false."""
        (self.root / f"created-{name}").touch()
        (self.root / f"oom-{name}").write_text("false")

    def leaves(self) -> None:
        (self.root / "leaves").touch()

    def ends(self, code: int, stderr: str = "", oom_killed: bool = False, writes: dict[str, str] | None = None,
             only: str | None = None, caches: dict[str, str] | None = None, started: bool = True) -> None:
        """Every container run from now on ends at once: the CLI writes ``stderr`` and exits ``code``; ``oom_killed``:
        the kernel killed it for want of memory (docker's ``State.OOMKilled``); ``writes``: the files (name: text) it
        wrote in its ``ZEN_OUTPUT_DIR`` first, ``caches``: in its ``HOME``; ``only``: the container of that name alone
        (the others run on); not ``started``: docker failed the container's start, or lost it (its CLI's ``stderr`` is
        docker's: ``inspect`` says ``created``), else its process ran and exited ``code``."""
        (self.root / "ends").write_text(json.dumps({"code": code, "stderr": stderr, "oom_killed": oom_killed,
                                                    "writes": writes or {}, "only": only, "caches": caches or {},
                                                    "started": started}))

    def home(self, name: str) -> dict | None:
        """The ``HOME`` container ``name`` was given (``-e HOME=...``) as it started: its path, and its mode then
        (None: not a directory), or None when it was given none."""
        seen = self.root / f"home-{name}"
        return json.loads(seen.read_text()) if seen.exists() else None

    def add(self, name: str, container_id: str, volume: bool = False, exited: bool = False) -> None:
        """A container some earlier agent started; ``volume``: with an anonymous volume (its image's ``VOLUME``);
        ``exited``: it has run out (``inspect`` says it runs no more), and stays."""
        (self.containers / name).write_text(container_id)
        if exited:
            (self.root / ("oom-" + name)).write_text("false")
        if volume:
            (self.root / "volumes").mkdir(exist_ok=True)
            (self.root / "volumes" / name).write_text("written by the job")

    def pulls(self, lines: int, every_s: float, stalls: bool = False, redraws: bool = False) -> None:
        """Images are absent (``image inspect`` exits 1) until a ``pull`` (or a ``run``'s own) brought them: it prints
        ``lines`` progress lines ``every_s`` apart, then ends; ``stalls``: after them it waits, silent, for an hour;
        ``redraws`` too: it writes its last line again every ``every_s`` meanwhile (docker with the containerd image
        store: its daemon resends each download's count every 100 ms, moved or not)."""
        (self.root / "pulls").write_text(json.dumps({"lines": lines, "every_s": every_s, "stalls": stalls,
                                                     "redraws": redraws}))

    def pull_fails(self, line: str) -> None:
        """Every pull from now on (``pull``, a ``run``'s own) fails with docker's ``line``: the registry's answer."""
        (self.root / "pull-fails").write_text(line)

    def image_declares_volume(self) -> None:
        """Every container run from now on gets an anonymous volume, as an image with a ``VOLUME`` gives it."""
        (self.root / "image-volume").touch()

    def volumes(self) -> list[str]:
        """The anonymous volumes left on the VM, by the name of the container they were made for."""
        made = self.root / "volumes"
        return sorted(path.name for path in made.iterdir()) if made.exists() else []

    def networks(self) -> list[str]:
        """The networks made with ``network create``."""
        made = self.root / "networks"
        return sorted(path.name for path in made.iterdir()) if made.exists() else []

    def names(self) -> list[str]:
        """The containers that exist (running or not)."""
        return sorted(path.name for path in self.containers.iterdir())
