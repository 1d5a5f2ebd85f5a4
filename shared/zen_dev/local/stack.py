"""``zen local up`` / ``zen local down``: the whole system on one machine, as separate processes.

Started in order (the embedded Postgres, the Pub/Sub stand-in and the topology, the Cloud Storage,
Billing Catalog and Secret Manager stand-ins, the webhook sink, the Compute stand-in whose VMs run the real agent, the
functions (the four of the job lifecycle and the notifier), the web console, the bridge and the ticker), recorded in ``.zen/stack.json``, stopped in reverse order. What each does and where it logs:
docs/how-to/local.md."""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from zen.core.config import DEFAULT_CONFIG_PATH, load_config
from zen.core.notify import NOTICE_FILTER
from zen_dev.local.bridge import DeliveryPolicy, EventBridge, Route
from zen_dev.local.environment import overridden_environ
from zen_dev.local.functions_server import (ForkedGroup, Function, FunctionGroup, WarmForks, start_logged,
                                            wait_for_port)
from zen_dev.local.roles import function_logins
from zen_dev.local.stackfile import named_home, process_alive, read_stack, running_home, stack_file

FUNCTIONS = {
    "on_job_submitted": "job_submitted",
    "on_heartbeat": "heartbeats",
    "on_stop_requested": "job_stop",
    "on_scale_tick": "scale_tick",
    "on_job_event": "job_events",  # the notifier (zen.jobs.notifications)
}
DEFAULT_SCENARIO = Path(__file__).parent / "compute" / "scenarios" / "stockout.yaml"
BRIDGE_POLICY = DeliveryPolicy(minimum_backoff_s=0.5, maximum_backoff_s=10.0)
DEMO_SECRET_VALUE = "zen-local-demo-token"  # what a job's secret named demo_secret(project) reads


def demo_secret(project: str) -> str:
    """The secret the local stack's Secret Manager serves (its version 1 is also ``latest``)."""
    return f"projects/{project}/secrets/demo-token"


# Secrets holding the webhook sink's URLs (zen_dev.local.webhook_sink), which a job's notify may name as
# projects/<project>/secrets/<name>/versions/latest: answered 200, 500 (retried, then dead-lettered), 404 (refused).
SINK_SECRETS = {"zen-notify-local-sink": "local-sink", "zen-notify-local-sink-500": "status/500/local-sink",
                "zen-notify-local-sink-404": "status/404/local-sink"}


def sink_secrets(project: str, port: int) -> dict[str, str]:
    """Secret name -> the sink URL it holds."""
    return {f"projects/{project}/secrets/{name}": f"http://127.0.0.1:{port}/{path}" for name, path in SINK_SECRETS.items()}


def keep_dead_letters(project: str, routes: list[Route]) -> None:
    """A subscription named as each dead-letter topic, as terraform makes (pubsub.tf): a topic without one
    drops what reaches it. ``gcloud``-free inspection: pull it with the official client."""
    from google.api_core import exceptions as gexc
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    for route in routes:
        try:
            subscriber.create_subscription(name=subscriber.subscription_path(project, route.dead_letter_topic),
                                           topic=f"projects/{project}/topics/{route.dead_letter_topic}")
        except gexc.AlreadyExists:
            pass


class StackError(RuntimeError):
    """The stack cannot start (port taken, a stack already running) or a part failed to come up."""


@dataclass(frozen=True)
class Ports:
    pubsub: int = 8085
    compute: int = 8086
    functions: int = 8091  # one port per function, consecutive
    storage: int = 8087
    billing: int = 8088
    secrets: int = 8089
    sink: int = 8090  # the webhook sink the notifier posts to
    console: int = 8097  # the web console (zen.console); base + 12 leaves room for more functions

    @classmethod
    def from_base(cls, base: int) -> "Ports":
        return cls(base, base + 1, base + 6, base + 2, base + 3, base + 4, base + 5, base + 12)

    def all(self) -> dict[str, int]:
        ports = {"pubsub stand-in": self.pubsub, "compute stand-in": self.compute, "storage stand-in": self.storage,
                 "billing stand-in": self.billing, "secret manager stand-in": self.secrets, "webhook sink": self.sink}
        ports.update({name: self.functions + i for i, name in enumerate(FUNCTIONS)})
        ports["console"] = self.console
        return ports


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_ports() -> range:
    """The ports the kernel picks connections' source ports from (Linux: net.ipv4.ip_local_port_range;
    elsewhere the IANA range). A stack's port among them can be taken by any connection before the stack
    binds it, and a wait for it can connect to itself. Empty where the range leaves no block of a stack's
    13 ports above 1023 below it: there is nothing to avoid it with, and a stack takes its chances."""
    try:
        low, high = (int(n) for n in EPHEMERAL_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        low, high = 49152, 65535
    return range(low, high + 1) if low > 1024 + 12 else range(0)


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_for_line(path: Path, text: str, timeout_s: float, process: subprocess.Popen | ForkedGroup,
                  after: int = 0) -> None:
    """Return once ``path`` holds ``text`` past its first ``after`` bytes (what an earlier run of the same
    process wrote to the log it appends to); raise if ``process`` ends first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text.encode() in path.read_bytes()[after:]:
            return
        if process.poll() is not None:
            raise StackError(f"{path.stem} exited with {process.returncode} before saying {text.strip()!r}; "
                             f"see {path}")
        time.sleep(0.05)
    raise StackError(f"{path} did not say {text.strip()!r} within {timeout_s:g} s")


class LocalStack:
    def __init__(self, home: Path = Path(".zen"), config_path: Path | None = None, scenario: Path | None = None,
                 time_scale: float | None = None, tick_every_s: float = 5.0, ports: Ports = Ports(),
                 fresh: bool = False, agent_env: dict[str, str] | None = None,
                 buckets: dict[str, str] | None = None, forks: WarmForks | None = None):
        self.home = home.resolve()
        self.forks = forks  # its processes forked from there (tests: one per test worker, STACK_WARM), else started
        self.config_path = (config_path or Path(os.environ.get("ZEN_CONFIG") or DEFAULT_CONFIG_PATH)).resolve()
        self.config = load_config(self.config_path if config_path else None)  # ZEN_CONFIG's: its hint names it
        self.scenario = (scenario or DEFAULT_SCENARIO).resolve()
        self.time_scale = time_scale
        self.tick_every_s = tick_every_s
        self.ports = ports
        self.fresh = fresh
        self.agent_env = agent_env or {}
        # Bucket -> location to create in the storage stand-in: the configured ones, then those asked for.
        self.buckets = {**self.config.data.bucket_locations, **(buckets or {})}
        if self.config.checkpoints.bucket:  # jobs' checkpoints (zen.core.checkpoints)
            self.buckets.setdefault(self.config.checkpoints.bucket, "US")
        self.logs = self.home / "logs"
        self.processes: list[dict] = []
        self.env: dict[str, str] = {}
        self.republished = 0  # starts of jobs QUEUED before, published again by `up` (_publish_queued_starts)

    # -- up ------------------------------------------------------------------------------------
    def up(self) -> dict:
        previous = read_stack(self.home)
        if previous:
            pids = ", ".join(str(p["pid"]) for p in previous["processes"])
            raise StackError(f"a stack is already running (pids {pids}); stop it with `zen local down"
                             + ("`" if self.home.name == ".zen" else f" --home {self.home}`"))  # the demo's: .zen/demo
        ephemeral = ephemeral_ports()
        if clashing := sorted(port for port in self.ports.all().values() if port in ephemeral):
            raise StackError(f"port(s) {', '.join(map(str, clashing))} lie in the range the kernel gives connections "
                             f"as their source ports ({ephemeral.start}-{ephemeral.stop - 1}): any connection may "
                             f"take one before the stack binds it; pick --base-port below {ephemeral.start - 12}")
        taken = [f"{port} ({what})" for what, port in self.ports.all().items() if not port_free(port)]
        if taken and (elsewhere := running_home(self.home.resolve().parent)) is not None:
            raise StackError(f"a stack is already running in {elsewhere.parent} (its ports: {', '.join(taken)}); "
                             "`zen` commands from here use it; stop it there with `zen local down`")
        if taken:
            raise StackError(f"port(s) taken: {', '.join(taken)}; free them or pick others with --base-port")
        (self.logs / "vms").mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.home / "vms", ignore_errors=True)  # new VMs boot with empty disks (no warm cache)
        try:
            self._start_all()
        except BaseException:
            self.down()
            raise
        return self.record()

    def _start_all(self) -> None:
        database_url = self._database()
        project = self.config.project
        pubsub = f"127.0.0.1:{self.ports.pubsub}"
        compute = f"127.0.0.1:{self.ports.compute}"
        self.env = {
            "PUBSUB_EMULATOR_HOST": pubsub, "ZEN_COMPUTE_ENDPOINT": compute, "ZEN_DATABASE_URL": database_url,
            "ZEN_CONFIG": str(self.config_path), "ZEN_PROJECT": project,
            # Job output (zen.adapters.joblogs): the agents the Compute stand-in boots write it here, `zen logs` reads it.
            "ZEN_JOB_LOGS_DIR": str(self.home / "joblogs"),
            # Cloud Storage (zen_dev.local.storage): the official client uses it, with anonymous credentials.
            "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{self.ports.storage}",
            # The Cloud Billing Catalog (zen_dev.local.billing: SKUs of the committed price snapshot), which
            # the scale tick reads prices from once a day through the official client.
            "ZEN_BILLING_ENDPOINT": f"http://127.0.0.1:{self.ports.billing}",
            # Secret Manager (zen_dev.local.secret_manager), where the agents read jobs' secrets.
            "ZEN_SECRETS_ENDPOINT": f"127.0.0.1:{self.ports.secrets}",
            # The VMs' disks: jobs' data and each agent's warm cache (<dir>/.cache/<vm>: zen.agent.cache).
            "ZEN_AGENT_WORK_DIR": str(self.home / "vms"),
            # The agents run jobs as plain processes (no docker here): said explicitly, as an agent that is
            # not told runs containers (zen.agent.__main__).
            "ZEN_AGENT_LOCAL": "1",
            # Who `zen submit` and `zen stop` say they are: a token the Compute stand-in signs, for $ZEN_AS
            # (else $USER), which the functions verify as a deployed Zen verifies Google's (ZEN_AUTH).
            "ZEN_IDENTITY_ENDPOINT": f"http://{compute}/zen-local/identity",
        }
        self._serve("pubsub", "zen_dev.local.pubsub", self.ports.pubsub)
        self._topology()
        # The functions' trigger subscriptions exist with their topics (terraform creates them together in
        # production): a message published while `up` still starts the rest is kept for the functions (the
        # stand-in drops what a topic without subscriptions is given: `zen submit` during `zen local up &`
        # said "submitted" and the job was never seen).
        # The notifier's subscription lets through only the events that can be a notice, as terraform's does.
        routes_made = [Route(getattr(self.config.topics, field), "http://unused/",
                             NOTICE_FILTER if field == "job_events" else "") for field in FUNCTIONS.values()]
        self._with_pubsub(lambda: EventBridge(project, routes_made, BRIDGE_POLICY).ensure_subscriptions())
        self._with_pubsub(lambda: keep_dead_letters(project, routes_made))
        self._serve("storage", "zen_dev.local.storage", self.ports.storage,
                    *(arg for name, where in self.buckets.items() for arg in ("--bucket", f"{name}={where}")))
        self._serve("billing", "zen_dev.local.billing", self.ports.billing)
        self._serve("sink", "zen_dev.local.webhook_sink", self.ports.sink, "--out", str(self.home / "notifications.jsonl"))
        sinks = [arg for name, url in sink_secrets(project, self.ports.sink).items() for arg in ("--secret", f"{name}={url}")]
        self._serve("secrets", "zen_dev.local.secret_manager", self.ports.secrets,
                    "--secret", f"{demo_secret(project)}={DEMO_SECRET_VALUE}", *sinks)
        self._serve("compute", "zen_dev.local.compute", self.ports.compute,
                    "--scenario", str(self.scenario), "--config", str(self.config_path),
                    "--startup-command", json.dumps([sys.executable, "-m", "zen.agent"]), "--log-dir", str(self.logs / "vms"),
                    *(["--time-scale", str(self.time_scale)] if self.time_scale else []), extra_env=self.agent_env)
        # Heartbeats must carry their VM's identity token (zen.adapters.vm_proof), which the Compute stand-in issues
        # and whose certificates it serves; ZEN_VM_PROOF=off in the environment turns the check off. A
        # secret of this stack's own derives the VMs' MAC keys (ZEN_PROOF_SECRET: zen.adapters.message_key).
        proof = {"ZEN_VM_PROOF": os.environ.get("ZEN_VM_PROOF") or "required",
                 "ZEN_VM_PROOF_CERTS_URL": f"http://{compute}/oauth2/v1/certs",
                 "ZEN_PROOF_SECRET": secrets.token_urlsafe(32),
                 # Submissions and stops carry their sender's token (zen.adapters.submitters), signed by the
                 # same stand-in key; ZEN_AUTH=off in the environment believes the user_id they claim.
                 "ZEN_AUTH": os.environ.get("ZEN_AUTH") or "required",
                 "ZEN_AUTH_CERTS_URL": f"http://{compute}/oauth2/v1/certs"}
        routes, functions = [], []
        logins = function_logins(database_url)  # each core function as its own database role (migration 0030)
        for index, (target, topic_field) in enumerate(FUNCTIONS.items()):
            port = self.ports.functions + index
            own = {"ZEN_DATABASE_URL": logins[target]} if target in logins else {}
            functions.append(Function(target, port, self.logs / f"{target}.log", own))
            routes += ["--route", f"{getattr(self.config.topics, topic_field)}=http://127.0.0.1:{port}/"]
        # One process per function, forked from one that imported their libraries once; a failed start stops it.
        group = FunctionGroup(functions, {**self.env, **proof, "PYTHONUNBUFFERED": "1"}, self.logs / "functions.log",
                              forks=self.forks)
        self._record("functions", group.start(timeout_s=60).process)
        # The web console, reading the stack's database and job output; viewers are $ZEN_AS or $USER.
        self._serve("console", "zen.console", self.ports.console)
        bridge_log = self.logs / "bridge.log"
        said_before = bridge_log.stat().st_size if bridge_log.exists() else 0  # a previous `up`'s words
        self._spawn("bridge", [sys.executable, "-m", "zen_dev.local.bridge", "--project", project, *routes,
                               "--tick-topic", self.config.topics.scale_tick, "--tick-every", str(self.tick_every_s),
                               "--min-backoff", str(BRIDGE_POLICY.minimum_backoff_s),
                               "--max-backoff", str(BRIDGE_POLICY.maximum_backoff_s)])
        # It listens on no port: `up` returns once it says it pulls and ticks, so a job submitted then is
        # delivered at once (and a bridge that cannot start fails `up`, not the job).
        wait_for_line(bridge_log, "event bridge: ", 60, self._popen("bridge"), after=said_before)
        self._save()
        self.republished = self._publish_queued_starts(database_url)

    def _publish_queued_starts(self, database_url: str) -> int:
        """The start of every job QUEUED when this stack comes up on an earlier one's database, published
        again, as the tick republishes a start nobody claimed (here at once, not after
        ``start_republish_s``, an hour): the Pub/Sub stand-in keeps messages in memory only, so the starts
        of the jobs a stopped stack's VMs handed back (each reports its job PREEMPTED: requeued) went with
        it, and those jobs waited the hour beside idle VMs. Returns how many."""
        if self.fresh:
            return 0
        from zen.adapters.pubsub import PubSubPublisher
        from zen.app import Zen
        from zen.core.clock import utc_now
        from zen.store.db import Database, parse_database_url

        deadlines = self.config.deadlines.model_copy(update={"start_republish_s": 0.001})
        config = self.config.model_copy(update={"deadlines": deadlines})
        now = utc_now()  # one instant: a start published again is not older than it, so each goes once
        published = 0
        said = logging.getLogger("zen")  # each republished job logs a warning: one line on `up`'s screen says it
        level = said.level
        said.setLevel(logging.ERROR)
        with overridden_environ({"PUBSUB_EMULATOR_HOST": self.env["PUBSUB_EMULATOR_HOST"]}):
            db = Database.from_target(parse_database_url(database_url))
            try:
                zen = Zen(config, db, PubSubPublisher(config.project), lambda: now)
                while (done := zen.jobs.sweeps.republish_unclaimed()) > 0:
                    published += done
                zen.relay.marks.flush()
            finally:
                db.close()
                said.setLevel(level)
        return published

    def _database(self) -> str:
        from zen.store.db import Database, parse_database_url
        from zen_dev.embedded import embedded_database_url
        from zen.store.migrate import migrate

        url = embedded_database_url(self.home, fresh=self.fresh)
        if self.fresh:  # the jobs' output goes with their rows: `zen logs` must not show an old run's, nor
            shutil.rmtree(self.home / "joblogs", ignore_errors=True)  # the webhook sink an old run's notices
            (self.home / "notifications.jsonl").unlink(missing_ok=True)
        db = Database.from_target(parse_database_url(url))
        migrate(db)
        db.close()
        return url

    def _topology(self) -> None:
        from zen_dev.local.topology import ensure_topology

        self._with_pubsub(lambda: ensure_topology(self.config))

    def _with_pubsub(self, action) -> None:
        """Run ``action`` with the official client pointed at this stack's Pub/Sub stand-in."""
        with overridden_environ({"PUBSUB_EMULATOR_HOST": self.env["PUBSUB_EMULATOR_HOST"]}):
            action()

    def _spawn(self, name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> None:
        """Start ``argv`` in a session of its own, its output to logs/<name>.log, and record it."""
        env = {**os.environ, **self.env, **(extra_env or {}), "PYTHONUNBUFFERED": "1"}
        self._record(name, start_logged(argv, env, self.logs / f"{name}.log", self.forks))

    def _record(self, name: str, process: subprocess.Popen | ForkedGroup | None) -> None:
        assert process is not None
        self.processes.append({"name": name, "pid": process.pid, "argv": process.args, "_popen": process})
        self._save()

    def _serve(self, name: str, module: str, port: int, *args: str, extra_env: dict[str, str] | None = None,
               timeout_s: float = 30.0) -> None:
        """``python -m module --port port *args`` as :meth:`_spawn` starts it, returned once it listens there; else a
        StackError naming it, its last word and its log (a mistyped --scenario was "RuntimeError: process exited with
        2 before listening on 28701")."""
        self._spawn(name, [sys.executable, "-m", module, "--port", str(port), *args], extra_env=extra_env)
        try:
            wait_for_port(port, timeout_s, self._popen(name))
        except (RuntimeError, TimeoutError) as exc:
            log = self.logs / f"{name}.log"
            said = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            raise StackError(f"the {name} stand-in did not start ({exc})" + (f": {said[0].strip()}" if said else "")
                             + f"; see {log}") from None

    def _popen(self, name: str) -> subprocess.Popen | ForkedGroup:
        return next(p["_popen"] for p in self.processes if p["name"] == name)

    def record(self) -> dict:
        return {
            "env": self.env,
            "ports": self.ports.all(),
            "console": f"http://127.0.0.1:{self.ports.console}/",
            "logs": str(self.logs),
            "processes": [{k: v for k, v in p.items() if not k.startswith("_")} for p in self.processes],
        }

    def sender(self, who: str) -> dict[str, str]:
        """The attributes of a submission or stop sent by ``who``: its ID token from this stack's identity
        endpoint (the Compute stand-in signs it, the functions verify it: zen.adapters.submitters)."""
        from zen.cli.identity import attributes, from_local_stack

        return attributes(from_local_stack(self.env["ZEN_IDENTITY_ENDPOINT"], who, self.config))

    def _save(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        stack_file(self.home).write_text(json.dumps(self.record(), indent=2))

    # -- down ----------------------------------------------------------------------------------
    def down(self, grace_s: float = 10.0) -> list[str]:
        """Stop every process of the stack and its Postgres. Ctrl-C and SIGTERM are ignored meanwhile (in the main
        thread): a second Ctrl-C while `zen local up` or the demo stopped ended it with the stand-ins, the VMs'
        agents and Postgres left running, the record saying a stack was up, and no word."""
        main = threading.current_thread() is threading.main_thread()
        before = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
        try:
            hand_back(self.processes, self.env)
            stopped = stop_processes(self.processes, grace_s, stack_file(self.home))
            return stopped + _stop_database(self.home)
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)


HAND_BACK_S = 30.0  # how long `down` waits for the VMs' agents to report their jobs and Zen to record them


def hand_back(processes: list[dict], env: dict[str, str], wait_s: float = HAND_BACK_S) -> int:
    """Stop the Compute stand-in first, so its VMs' agents are told to stop (SIGTERM, as GCE's ACPI
    shutdown) while Pub/Sub, the bridge and the functions still run: each reports its job PREEMPTED,
    and Zen requeues it at once. Then wait (at most ``wait_s``) until no job is left holding a VM.
    Stopped in the order they started, the VMs' last reports had no function to reach: after a
    restart a job showed RUNNING on a VM that was gone, and was rerun as LOST two minutes later.
    Returns how many jobs still hold a VM (0: all handed back)."""
    compute = next((p for p in processes if p["name"] == "compute"), None)
    if compute is None:
        return 0
    try:
        os.killpg(compute["pid"], signal.SIGTERM)
    except ProcessLookupError:
        return 0
    deadline = time.monotonic() + wait_s
    popen = compute.get("_popen")
    while time.monotonic() < deadline and process_alive(compute["pid"]) and (popen is None or popen.poll() is None):
        time.sleep(0.1)
    url = env.get("ZEN_DATABASE_URL")
    if not url:
        return 0
    from zen.core.models import JobStatus
    from zen.store import stats
    from zen.store.db import Database, parse_database_url

    db = Database.from_target(parse_database_url(url))
    try:
        while True:
            with db.transaction() as session:  # the jobs in flight, as `zen stats` counts them
                holding = sum(r["jobs"] for r in stats.active_jobs(session) if JobStatus(r["status"]).holds_vm)
            if holding == 0 or time.monotonic() >= deadline:
                return holding
            time.sleep(0.2)
    except Exception:  # noqa: BLE001 - the database may be gone already: stopping goes on
        return 0
    finally:
        db.close()


def stop_processes(processes: list[dict], grace_s: float, record: Path | None) -> list[str]:
    """SIGTERM each process group (last started first), wait, then SIGKILL what is left."""
    stopped = []
    for process in reversed(processes):
        try:
            os.killpg(process["pid"], signal.SIGTERM)
            stopped.append(process["name"])
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    for process in processes:
        popen = process.get("_popen")
        while process_alive(process["pid"]) and time.monotonic() < deadline:
            if popen is not None and popen.poll() is not None:
                break
            time.sleep(0.05)
        if process_alive(process["pid"]) and (popen is None or popen.poll() is None):
            try:
                os.killpg(process["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
    if record is not None and record.exists():
        record.unlink()
    return stopped


def _stop_database(home: Path) -> list[str]:
    from zen_dev.embedded import stop_embedded_server

    return ["postgres"] if stop_embedded_server(home) else []


def down(home: Path | None = None) -> list[str]:
    """``zen local down``: stop a stack left behind, from its record, and its Postgres. ``home``: its folder or the
    one it runs in (``named_home``); None: the stack running here or the nearest folder above, as the other commands
    find it (``running_home``), else the demo's left running here (``.zen/demo``: no command stopped it, and ``make
    demo`` refused to start while it ran), else this folder's ``.zen`` (a Postgres left running without a record)."""
    demo = Path(".zen") / "demo"
    home = named_home(home) if home else running_home() or (demo if read_stack(demo.resolve()) else Path(".zen"))
    record = read_stack(home.resolve())
    if record:
        hand_back(record["processes"], record["env"])
    stopped = stop_processes(record["processes"], 10.0, stack_file(home.resolve())) if record else []
    return stopped + _stop_database(home.resolve())
