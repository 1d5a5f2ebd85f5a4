"""Building the console from the environment, and serving it: ``python -m zen.console`` (the local stack's
process, ``zen console``) or the ``console`` HTTP function (functions/main.py).

- ``ZEN_DATABASE_URL`` or ``ZEN_CLOUDSQL_INSTANCE`` (+ ``ZEN_DB_USER``): the database, read through a
  read-only role where the deploy has one (terraform: the console's own IAM user, granted ``zen_reader``);
- ``ZEN_CONSOLE_IAP_AUDIENCE``: the audience of Identity-Aware Proxy's signed header; the ``console``
  function refuses to start without it, whatever its database (it would believe any caller's
  ``X-Zen-As`` and show every job to whoever reaches it), and so does a local console on Cloud SQL;
- ``ZEN_JOB_LOGS_DIR`` (a local stack) or Cloud Logging: where job output is read (as ``zen logs``);
- ``ZEN_CONSOLE_REFRESH_S``: how often a page fetches its live part again (default 2 s).
"""

from __future__ import annotations

import errno
import os
import socket
from typing import Callable, Mapping

from flask import Flask

from zen.core.errors import ConfigError

AUDIENCE_ENV = "ZEN_CONSOLE_IAP_AUDIENCE"


def from_env(env: Mapping[str, str] = os.environ, hosts: tuple[str, ...] = (), *, local: bool = False) -> Flask:
    """The console for this environment; ``local``: ``zen console`` on this machine, which may name its
    viewer itself (``X-Zen-As``) when there is no IAP audience and no Cloud SQL; the function never may."""
    from zen.adapters.cloud_logging import reader_from_env
    from zen.console.app import REFRESH_S, create_app
    from zen.console.viewers import iap_identity, local_identity
    from zen.core.config import load_config
    from zen.store.db import Database

    config = load_config()
    audience = env.get(AUDIENCE_ENV)
    if audience:
        from zen.adapters.iap import IapAssertions

        identify = iap_identity(IapAssertions(audience).email)
    elif env.get("ZEN_CLOUDSQL_INSTANCE") or not local:
        where = "reads Cloud SQL" if env.get("ZEN_CLOUDSQL_INSTANCE") else "runs as the console function"
        raise ConfigError(f"the console {where} but {AUDIENCE_ENV} is not set: it serves viewers named "
                          "by Identity-Aware Proxy's signed header only (terraform sets it)")
    else:
        identify = local_identity(hosts=hosts)  # the address it listens on, besides loopback names
    project = env.get("ZEN_PROJECT") or config.project
    if project != config.project:  # the project deployed (terraform sets ZEN_PROJECT), as the functions take it
        config = config.model_copy(update={"project": project})
    refresh_s = float(env.get("ZEN_CONSOLE_REFRESH_S") or REFRESH_S)
    # As `zen logs -f` reads (zen.cli.follow.open_reader): a local stack's files twice a second; Cloud Logging,
    # which allows a project about one read a second, every 5 s, waiting 30 s after a job's end for its last lines.
    from zen.cli.follow import CLOUD_POLL_S, POLL_S

    timing = (POLL_S, 5.0) if env.get("ZEN_JOB_LOGS_DIR") else (CLOUD_POLL_S, 30.0)
    return create_app(config, Database.from_env(), identify, reader_factory=lambda: reader_from_env(env, project),
                      refresh_s=refresh_s, output_timing=timing)


def serve(app: Flask, host: str, port: int, on_bound: Callable[[], None] = lambda: None) -> None:
    """Serve until interrupted, a thread per request (each page's output stream holds one); ``on_bound`` once the
    address is Zen's. An address taken is one ``CliError`` line (werkzeug prints its own lines and exits)."""
    from werkzeug.serving import make_server

    from zen.cli.kit import CliError

    try:
        six = ":" in host  # an IPv6 host (::) answers IPv4 too where the system can, as werkzeug's own bind did
        listening = socket.create_server((host, port), family=socket.AF_INET6 if six else socket.AF_INET,
                                         dualstack_ipv6=six and socket.has_dualstack_ipv6())
    except OSError as exc:
        taken = exc.errno == errno.EADDRINUSE
        raise CliError(f"cannot serve the console on {host}:{port}: " + (
            "the port is taken (a local stack serves its console on 8097: zen local up prints its address); "
            "use --port N" if taken else f"{exc.strerror or exc}")) from None
    with listening:
        server = make_server(host, port, app, threaded=True, fd=listening.fileno())
        on_bound()
        server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    from zen.cli.kit import Parser  # a usage error is one `zen:` line, as every command's

    parser = Parser(prog="zen console", description="Serve the read-only web console "
                    "(docs/how-to/console.md) against ZEN_DATABASE_URL or the local stack.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8097, help="port (default 8097)")
    args = parser.parse_args(argv)
    app = from_env(hosts=(args.host,), local=True)
    try:
        shown = f"[{args.host}]" if ":" in args.host else args.host  # http://[::1]:8097/, a URL a browser takes
        serve(app, args.host, args.port, lambda: print(f"Zen console: http://{shown}:{args.port}/", flush=True))
    except KeyboardInterrupt:
        pass
    return 0
