"""Cloud Functions (gen2) entry points: the job lifecycle's four, and the notifier (``on_job_event``, on
zen-job-events), and the web console (``console``, HTTP, behind Identity-Aware Proxy). Thin: decode the
CloudEvent, call one Zen method, return.

Clients (database pool, Pub/Sub publisher) are built once per function instance, lazily, on the
first event. A raised exception (database down) answers HTTP 500, so Eventarc redelivers; a bad
message is recorded and acked inside the library.
"""

import gc
import threading

import functions_framework

from zen.app import Zen
from zen.logs import setup_logging

_zen = None
_zen_lock = threading.Lock()  # an instance serves several requests at once (terraform: concurrency)


def zen() -> Zen:
    global _zen
    if _zen is None:
        with _zen_lock:
            if _zen is None:
                setup_logging()
                _zen = Zen.from_env()
                # What startup built (modules, configuration, clients) lives as long as the instance: in
                # the permanent generation, no full collection walks it again, in the middle of a request
                # with the GIL held (docs/benchmarks/control-plane.md).
                gc.freeze()
    return _zen


@functions_framework.cloud_event
def on_job_submitted(event):
    zen().on_job_submitted(event["id"], event["type"], event.data)


@functions_framework.cloud_event
def on_heartbeat(event):
    zen().on_heartbeat(event["id"], event["type"], event.data)


@functions_framework.cloud_event
def on_stop_requested(event):
    zen().on_stop_requested(event["id"], event["type"], event.data)


@functions_framework.cloud_event
def on_job_event(event):
    zen().on_job_event(event["id"], event["type"], event.data)


@functions_framework.cloud_event
def on_scale_tick(event):
    zen().on_scale_tick()


_console = None


def console_app():
    """The web console's Flask app (zen.console.serve.from_env), built on the first request of an instance."""
    global _console
    if _console is None:
        with _zen_lock:
            if _console is None:
                from zen.console.serve import from_env

                setup_logging()
                _console = from_env()
    return _console


@functions_framework.http
def console(request):
    """The read-only web console behind Identity-Aware Proxy (terraform/console.tf): the request is handed to
    its app as it came, and the answer streamed back as it is written (a job's output is a stream)."""
    from flask import Response

    answer = {}

    def start_response(status, headers, exc_info=None):
        answer.update(status=status, headers=headers)

    body = console_app()(request.environ, start_response)
    return Response(body, status=answer["status"], headers=answer["headers"])
