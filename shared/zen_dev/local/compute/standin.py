"""``ComputeStandIn``: the world, the HTTP server and a ticker thread, started and stopped together.

    with ComputeStandIn("scenario.yaml", clock=ManualClock()) as cloud:
        os.environ["ZEN_COMPUTE_ENDPOINT"] = cloud.endpoint      # "127.0.0.1:PORT"
        cloud.advance(120)                                       # tests: move cloud time

Without a clock, a :class:`ScaledClock` with the scenario's ``time_scale`` is used.
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

from zen.core.config import ZenConfig, load_config
from zen_dev.capacity.scenario import Scenario, load_scenario, scenario_from_dict
from zen_dev.local.compute import maintenance
from zen_dev.local.compute.build import MigDef, build_capacity, project_of, resolve_migs
from zen_dev.local.compute.clock import ScaledClock
from zen_dev.local.compute.faults import Outages, RateLimiter
from zen_dev.local.compute.processes import VmProcesses
from zen_dev.local.compute.server import ComputeApi, ComputeHTTPServer
from zen_dev.local.compute.world import World

log = logging.getLogger("zen_dev.local.compute")
DEFAULT_LOG_DIR = Path(".zen") / "compute-vms"


def coerce_scenario(scenario: Scenario | str | os.PathLike | Mapping[str, Any]) -> Scenario:
    """A :class:`Scenario` from itself, a file path, or a dict (validated like a file)."""
    if isinstance(scenario, Scenario):
        return scenario
    if isinstance(scenario, Mapping):
        return scenario_from_dict(dict(scenario), source="scenario")
    return load_scenario(scenario)


class ComputeStandIn:
    """A local Compute Engine stand-in for regional MIGs, served over the REST protocol."""

    def __init__(
        self,
        scenario: Scenario | str | os.PathLike | Mapping[str, Any],
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Any = None,
        *,
        config: ZenConfig | str | os.PathLike | None = None,
        startup_command: Sequence[str] | None = None,
        log_dir: str | os.PathLike | None = None,
        tick_interval_s: float = 0.05,
        preempt_notice_s: float = 30.0,
        maintenance_notice_s: float = maintenance.NOTICE_S,
        names_salt: str = "",
    ):
        self.scenario = coerce_scenario(scenario)
        if config is not None and not isinstance(config, ZenConfig):
            config = load_config(config)
        self.config = config
        self.migs: list[MigDef] = resolve_migs(self.scenario, config)
        self.project = project_of(self.scenario, config)
        self.clock = clock if clock is not None else ScaledClock(self.scenario.time_scale)
        startup = self.scenario.startup
        if log_dir is None:
            log_dir = self.scenario.resolve_path(startup.log_dir) if startup.log_dir else DEFAULT_LOG_DIR
        self.log_dir = Path(log_dir)
        self.processes = VmProcesses(
            startup_command or startup.command, self.log_dir,
            grace_s=startup.stop_grace_s, extra_env=startup.env,
        )
        self.world = World(
            project=self.project, migs=self.migs, capacity=build_capacity(self.scenario),
            scenario=self.scenario, clock=self.clock, processes=self.processes, names_salt=names_salt,
        )
        # A preempted VM's processes get SIGTERM with its notice and SIGKILL this many real seconds later
        # (GCE: about 30 s); its metadata's instance/preempted turns TRUE meanwhile (notice.py).
        self.world.preempt_notice_s = preempt_notice_s
        # A standard or flex-start VM's host maintenance (simulateMaintenanceEvent): its metadata's
        # instance/maintenance-event turns TERMINATE_ON_HOST_MAINTENANCE, and it is terminated this many real seconds
        # later (GCE: an hour for a VM with GPUs), then boots again under its name (maintenance.py).
        self.world.maintenance_notice_s = maintenance_notice_s
        self.rate_limiter = RateLimiter(self.scenario.faults.rate_limit, random.Random(f"{self.scenario.seed}/ratelimit"))
        self.outages = Outages(self.scenario.faults.unavailable)
        self.api = ComputeApi(self.world, self.rate_limiter, self.outages)
        self._host, self._port = host, port
        self._server: ComputeHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._tick = tick_interval_s

    # ----- lifecycle -------------------------------------------------------------------------
    def start(self) -> "ComputeStandIn":
        if self._server is not None:
            return self
        self._server = ComputeHTTPServer((self._host, self._port), self.api)
        self.world.proof_host = f"{self.endpoint}/zen-local/vms"  # each VM's agent asks for its own token
        serve = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                 name="compute-standin-http", daemon=True)
        ticker = threading.Thread(target=self._ticker, name="compute-standin-clock", daemon=True)
        self._threads = [serve, ticker]
        for thread in self._threads:
            thread.start()
        atexit.register(self.stop)  # VM processes must not outlive a forgotten stand-in
        log.info("compute stand-in serving %d MIGs of project %s on %s", len(self.migs), self.project, self.endpoint)
        return self

    def _ticker(self) -> None:
        while not self._stopping.wait(self._tick):
            try:
                self.world.advance()
            except Exception:  # keep the clock going; the error is a bug to read in the log
                log.exception("compute stand-in: advancing the world failed")

    def stop(self) -> None:
        """Stop serving and stop every VM process. Safe to call twice."""
        self._stopping.set()
        atexit.unregister(self.stop)
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []
        self.processes.stop_all()

    def __enter__(self) -> "ComputeStandIn":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ----- access ----------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the stand-in is not started")
        return self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        """``HOST:PORT`` for ``ZEN_COMPUTE_ENDPOINT`` and the REST transport's ``host``."""
        return f"{self._host}:{self.port}"

    @property
    def certs_url(self) -> str:
        """``ZEN_VM_PROOF_CERTS_URL`` for functions that check this stand-in's VMs' tokens."""
        return f"http://{self.endpoint}/oauth2/v1/certs"

    def advance(self, seconds: float) -> float:
        """Move a manual clock forward by ``seconds`` cloud seconds and run what became due."""
        if not hasattr(self.clock, "advance"):
            raise TypeError("advance() needs a clock with advance(), such as ManualClock")
        self.clock.advance(seconds)
        return self.world.advance()

    def vm_pid(self, vm_name: str) -> int | None:
        """Pid of a VM's running startup process (for tests and debugging)."""
        return self.processes.pid(vm_name)
