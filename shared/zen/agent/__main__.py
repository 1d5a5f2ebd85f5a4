"""``python -m zen.agent`` (and ``zen agent``): run this VM's agent until SIGTERM.

Reads the configuration (``ZEN_CONFIG``, else the shipped default), the VM's identity and the
``ZEN_AGENT_*`` tunables, removes the ``zen-*`` containers an earlier agent left (first thing, in
container mode), reads the VM's shape and makes its job networks, then runs the loop; logs JSON lines
to stderr, and those of WARNING and above to Cloud Logging too (log ``zen-agent``) wherever job output
goes there. Jobs run as plain processes only with ``ZEN_AGENT_LOCAL=1``. Exit codes: 0 after a clean
shutdown, 1 when Pub/Sub stayed unreachable at start, 2 on a configuration or identity problem.
Startup, step by step: docs/reference/agent.md
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from dataclasses import asdict, replace
from typing import Sequence

from zen.agent.container import Sandbox, Shape, ensure_networks
from zen.agent.fence import fence_s
from zen.agent.identity import (
    MAINTENANCE_EVENT, PREEMPTED, TERMINATE_ON_HOST_MAINTENANCE, IdentityError, MetadataServer, resolve_identity,
    resolve_tags, watch_notice,
)
from zen.agent.limits import DailyPulls, resolve_pull_limits
from zen.agent.leftover import PowerOffAtStart
from zen.agent.ranlog import ran_since_boot
from zen.agent.retired import RetiredMark
from zen.agent.retired import path_for as retired_path
from zen.agent.removal import ContainersLeft, may_run, remove_leftover_containers
from zen.agent.settings import AgentSettings, with_deadlines, work_dir_of
from zen.agent.shutdown import HOST_MAINTENANCE
from zen.agent.slots import Slots, resolve_capacity
from zen.core.config import load_config
from zen.core.errors import ConfigError
from zen.logs import setup_logging

log = logging.getLogger("zen.agent")


class _IdentityFields(logging.Filter):
    """Puts vm / cluster / region on every log line of this process that does not carry them."""

    def __init__(self, fields: dict[str, str]):
        super().__init__()
        self._fields = fields

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in self._fields.items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def _output_sink(env, identity, local: bool):
    """Where job output goes (``zen.adapters.cloud_logging.sink_from_env``). A sink that cannot be set up is logged
    and the agent runs jobs without it: the final report still carries the output's tail."""
    from zen.adapters.cloud_logging import sink_from_env

    sink = _cloud_logging(sink_from_env, env, identity, local,
                          "job output sink unavailable; only the output's tail is reported")
    log.info("job output sink", extra={"sink": type(sink).__name__ if sink else None})
    return sink


def _cloud_logging(make, env, identity, local: bool, unavailable: str):
    """What ``make`` (a ``zen.adapters.cloud_logging`` ``*_from_env``) gives for this VM, labelled with its identity
    and zone; None when it gives none, or fails (logged as ``unavailable``: e.g. no credentials for Cloud Logging)."""
    try:
        return make(env, identity.project, cloud_by_default=not local,
                    labels={**identity.log_fields(), "zone": identity.zone})
    except Exception as exc:  # noqa: BLE001 - the agent runs jobs without it
        log.error(unavailable, extra={"error": str(exc)})
        return None


def _ship_own_log(env, identity, local: bool) -> logging.Handler | None:
    """The agent's WARNING and ERROR lines to Cloud Logging too (log ``zen-agent``, labels ``vm``, ``cluster``,
    ``region``, ``zone``: ``zen.adapters.cloud_logging.agent_log_handler``) wherever job output goes there: on a VM
    its stderr reaches only the journal, which no logging agent ships. Not set up: logged, and only the journal
    has them."""
    from zen.adapters.cloud_logging import own_log_from_env

    handler = _cloud_logging(own_log_from_env, env, identity, local, "the agent's own log is not shipped to Cloud Logging")
    if handler is not None:
        handler.addFilter(_IdentityFields(identity.log_fields()))
        logging.getLogger("zen").addHandler(handler)
    return handler


def _runs_containers(env) -> bool:
    """Container mode, from the environment alone (no metadata read), as ``main`` decides it below:
    always, unless ``ZEN_AGENT_LOCAL`` says local (host processes only by explicit configuration)."""
    return env.get("ZEN_AGENT_LOCAL", "").strip().lower() not in ("1", "true", "yes")


def _remove_leftovers(env) -> tuple[ContainersLeft | None, PowerOffAtStart | None]:
    """Remove the containers an earlier agent left (container mode only): why some may be left, else None, and the
    VM's power-off, if it is due. One docker cannot remove and does not say has stopped powers the VM off
    (``ZEN_AGENT_FENCE_FILE``): no agent reports its attempt any more, and Zen runs the job again elsewhere once the
    attempt's reports stop. So does docker listing none at all once an agent of this boot ran an attempt here
    (``ranlog.ran_since_boot``); else the VM only retires (one whose docker never works is not powered off at every
    boot). The power-off comes once the earlier agent's other attempts, their containers gone, are reported
    (``zen.agent.restart``), and ``POWER_OFF_S`` from now at most (``leftover.PowerOffAtStart``)."""
    if not _runs_containers(env):
        return None, None
    docker = env.get("ZEN_AGENT_DOCKER") or "docker"
    try:
        removed = remove_leftover_containers(docker)
    except ContainersLeft as exc:
        log.error("containers left by a previous agent could not be removed; the VM retires",
                  extra={"reason": str(exc)})
        running = [cid for cid in exc.found if may_run(cid, docker)]
        fence_file = env.get("ZEN_AGENT_FENCE_FILE")
        off = None
        if running and fence_file:
            off = PowerOffAtStart(fence_file, f"containers of earlier attempts may still run ({' '.join(running)}) "
                                              "and docker cannot remove them: Zen runs their jobs again elsewhere once "
                                              "their reports stop")
        elif fence_file and not exc.found and ran_since_boot(work_dir_of(env)):
            off = PowerOffAtStart(fence_file, "docker cannot list containers, and an agent of this boot ran attempts "
                                              "here: one's container may still run: Zen runs its job again elsewhere "
                                              "once its reports stop")
        return exc, off
    if removed:
        log.warning("removed containers left by a previous agent", extra={"containers": removed})
    return None, None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="zen agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="print the identity and settings the agent would use, then exit")
    args = parser.parse_args(argv)
    setup_logging()
    env = os.environ
    left, off = (None, None) if args.check else _remove_leftovers(env)  # first: any read below may fail and exit
    try:
        return _start(args, env, left, off)
    finally:  # whatever ended the agent (an error, a read that failed), the power-off it decided on is not lost
        if off is not None:
            off.now()


def _start(args: argparse.Namespace, env, left: ContainersLeft | None, off: PowerOffAtStart | None) -> int:
    metadata = MetadataServer.from_env(env)
    try:
        settings = AgentSettings.from_env(env)
        config = load_config()
        settings = with_deadlines(settings, config.deadlines, env)  # zen.agent.fence
        # Its reads at the start wait out a metadata server that gives no answer for a while (a boot may meet one):
        # exiting at once, the agent was restarted by systemd 5 s later, at most 5 times, then never on that boot.
        reads = metadata.waiting(settings.metadata_wait_s)
        identity = resolve_identity(env, reads, default_project=config.project)
        cluster = config.cluster(identity.cluster)
        if cluster is None:
            raise ConfigError(f"cluster {identity.cluster!r} is not in the configuration "
                              f"(known: {', '.join(c.name for c in config.clusters)})")
        if identity.region not in cluster.regions:
            raise ConfigError(f"region {identity.region} is not a region of cluster {cluster.name} {cluster.regions}")
        # Its execution groups: ZEN_VM_TAGS, else its template's zen-tags, else the configuration's.
        identity = replace(identity, tags=resolve_tags(env, reads, identity, cluster.tags_of(identity.region)))
        # Its pull limits: ZEN_AGENT_MAX_*, else its template's attributes, else the configuration's.
        limits = resolve_pull_limits(settings, reads, identity, cluster)
        # Its GPUs and jobs at once: ZEN_AGENT_GPUS / _MAX_JOBS_PER_VM, else its template's, else the configuration's.
        capacity = resolve_capacity(settings, reads, identity, cluster)
        # Its containers' confinement: the cluster's choices, limits from this VM's shape (zen.agent.container).
        sandbox = Sandbox(run_as=cluster.containers.run_as, network=cluster.containers.network,
                          shape=Shape.of_host(capacity.gpus, capacity.max_jobs, tasks_per_job=settings.tasks_per_job),
                          read_only_root=cluster.containers.read_only_root)
    except (ConfigError, IdentityError, OSError, ValueError) as exc:
        log.error("agent cannot start", extra={"reason": str(exc)})
        return 2
    for handler in logging.getLogger("zen").handlers:
        handler.addFilter(_IdentityFields(identity.log_fields()))
    local = settings.local is True  # host processes only when ZEN_AGENT_LOCAL=1 says so
    if args.check:
        print(json.dumps({"identity": asdict(identity), "settings": asdict(settings), "local": local,
                          "pull_limits": asdict(limits), "capacity": asdict(capacity),
                          "fence_s": fence_s(settings), "sandbox": asdict(sandbox)}, indent=2))
        return 0
    _ship_own_log(env, identity, local)

    # Imported here: the client library is heavy, and --check / errors above do not need it.
    from zen.agent.agent import Agent
    from zen.agent.restart import gone_after
    from zen.agent.transport import PubSubTransport, TransportError

    pulls = DailyPulls(limits, capacity.gpus)
    pulls.remember_in(RetiredMark(retired_path(settings.work_dir, identity.vm)))  # an earlier agent's of this boot
    if left is not None and not local:
        pulls.retire(str(left))
    networks = None if local else ensure_networks(sandbox, settings.docker)  # the slots' job networks
    if networks is not None:
        log.error("job networks could not be made; the VM retires", extra={"reason": networks})
        pulls.retire(networks)
    log.info("pull limits", extra={"limits": limits.describe(), "gpus": capacity.gpus,
                                   "max_jobs_per_vm": capacity.max_jobs, "fence_s": fence_s(settings)})
    agent = Agent(identity, settings, PubSubTransport(config, identity), local=local,
                  sink=_output_sink(env, identity, local), pulls=pulls,
                  slots=Slots.of_vm(capacity, settings.work_dir, identity.vm), sandbox=sandbox,
                  left_gone=None if local else gone_after(left, settings.docker),  # (restart.py)
                  power_off=off)  # once those attempts are reported
    signal.signal(signal.SIGTERM, lambda *_: agent.request_shutdown("SIGTERM"))
    signal.signal(signal.SIGINT, lambda *_: agent.request_shutdown("SIGINT"))
    done = threading.Event()
    # another metadata server's instance/preempted and instance/maintenance-event (a stand-in)
    notices = env.get("ZEN_PREEMPTION_METADATA_HOST")
    if notices or not identity.from_environment:
        server = MetadataServer(notices) if notices else metadata
        watch_notice(server, PREEMPTED, "TRUE", agent.shutdown.preempted, done)
        watch_notice(server, MAINTENANCE_EVENT, TERMINATE_ON_HOST_MAINTENANCE, lambda: _maintenance(agent), done)
    try:
        return agent.run()
    except TransportError as exc:
        log.error("agent cannot reach Pub/Sub", extra={"reason": str(exc)})
        return 1
    finally:
        done.set()


def _maintenance(agent) -> None:
    """A host maintenance's notice (``instance/maintenance-event``: GCE gives a GPU VM an hour, then stops it): the VM
    takes no more jobs (RETIRED: Zen deletes it once its jobs are over and asks for VMs elsewhere meanwhile), its jobs
    run on (one that ends within the hour loses nothing; stopped at the notice, it would lose up to an hour of work
    and the VM sit idle, billed, to the end), and GCE's stop, a shutdown as a preemption's (SIGTERM: the jobs' notice,
    their last checkpoint save, PREEMPTED), is told as host maintenance, the job requeued, not preempted. An attempt
    whose job has not started (a claim awaiting its answer or its gang's assembly, one confirmed still staging or
    pulling) is given back before it starts, PREEMPTED, requeued unspent, unless its ``max_runtime_s`` surely ends it
    before GCE's stop (``zen.agent.shutdown.Shutdown.before_start``)."""
    agent.shutdown.notice()
    agent.pulls.retire(HOST_MAINTENANCE)


if __name__ == "__main__":
    sys.exit(main())
