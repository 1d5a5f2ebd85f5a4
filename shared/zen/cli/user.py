"""The user-facing ``zen`` commands that talk to a running Zen: submit and stop (``zen watch`` is in
``zen.cli.watch``, ``zen local up/down`` in ``zen.cli.programs``).

They publish through the official Pub/Sub client (``PUBSUB_EMULATOR_HOST`` for a local stack, which
``zen`` reads from ``.zen/stack.json`` when a stack is running). ``zen submit`` checks the request with
the function's own rules (``zen.core.events.decode_payload`` and ``zen.jobs.placement.resolve_request``, against
``ZEN_CONFIG``) before publishing, and always sends a unique job id; the function still checks.
"""

from __future__ import annotations

import getpass
import os
import re
import secrets
import string
from datetime import datetime, timezone
from typing import Any


from zen.cli import batches, identity, submitted
from zen.cli.identity import Identity
from zen.cli.jobfiles import file_and_command, heaviest, read_job_file
from zen.cli.publish import NotPublished, publish
from zen.cli.kit import CliError, Context, database_configured, deployed, deployed_config, read, seconds
from zen.core.events import PubSubEnvelope
from zen.core.models import JobRequest, StopRequest, request_fingerprint
from zen.core.provisioning import ANY, MODELS
from zen.jobs.authorization import EARLY_STOP_KEPT

EARLY_STOP_KEPT_DAYS = EARLY_STOP_KEPT.days  # said in days


def default_job_id(user: str, now: datetime | None = None) -> str:
    """``<user>-<yyyymmdd-hhmmss>-<8 chars>``: readable, sortable, and unique without asking anyone. Two
    identical submits given one id are one job (the second a redelivery to Zen): with 4 characters (1.7 M a
    second) 20,000 ids drawn in one second repeated 120 times; with 8 (2.8e12), 1,000 submits of one second
    share an id once in 5 million."""
    now = now or datetime.now(timezone.utc)
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", user).strip("-._")[:64] or "user"
    suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
    return f"{name}-{now:%Y%m%d-%H%M%S}-{suffix}"


def _default_user() -> str:
    """``$USER`` (else the login name), or ``CliError`` asking for --user when neither is known (a
    container's uid without a passwd entry)."""
    try:
        return os.environ.get("USER") or getpass.getuser() or "local"
    except (KeyError, OSError):
        raise CliError(f"cannot tell who you are ($USER is not set and uid {os.getuid()} has no passwd entry): "
                       "give --user NAME (or user_id: in the job file)", 2) from None


def build_request(args, sender: Identity | None = None) -> JobRequest:
    """A JobRequest from a YAML/JSON file, with flags filling or overriding fields; ``CliError`` (usage)
    with one line naming the field when it is not a valid request. Its user is ``sender``'s (the identity
    the message will prove: ``zen.cli.identity``), else ``$USER``."""
    from zen.core.errors import describe_validation_error
    from pydantic import ValidationError

    data: dict = {}
    args.file, args.command = file_and_command(args)
    if args.cluster is not None and (args.gpu_type is not None or args.gpu_count is not None):  # the flags' clash
        raise CliError("invalid job request: --cluster and --gpu-type/--gpu-count each give the GPU shape: give "
                       "--cluster, or --gpu-type with --gpu-count", 2)
    if args.file:
        data = read_job_file(args.file)
        if any(v is not None for v in (args.cluster, args.gpu_type, args.gpu_count)):
            for field in ("cluster", "gpu_type", "gpu_types", "gpu_count"):  # the shape is the flags' alone
                data.pop(field, None)
            if args.cluster is None and (args.gpu_type is None or args.gpu_count is None):  # not the file's fault
                given, other = ("--gpu-type", "--gpu-count") if args.gpu_count is None else ("--gpu-count", "--gpu-type")
                raise CliError(f"invalid job request: {given} replaces the whole GPU shape of {args.file} (its cluster, "
                               f"gpu_type, gpu_types and gpu_count): give {other} with it, or --cluster instead", 2)
    flags = {"job_id": args.job_id, "user_id": args.user, "cluster": args.cluster, "gpu_type": args.gpu_type,
             "gpu_count": args.gpu_count, "image": args.image, "priority": args.priority,
             "max_runtime_s": args.max_runtime, "max_attempts": args.max_attempts,
             "regions": args.region or None, "command": args.command or None,
             "provisioning": args.provisioning, "max_start_wait_s": args.max_start_wait,
             "queue": getattr(args, "queue", None), "max_retries": getattr(args, "max_retries", None),
             "retry_exit_codes": getattr(args, "retry_exit_code", None) or None,
             "retry_backoff_s": getattr(args, "retry_backoff", None), "after": getattr(args, "after", None) or None,
             "after_condition": "any" if getattr(args, "after_any", False) else None,
             "nodes": getattr(args, "nodes", None)}
    data.update({k: v for k, v in flags.items() if v is not None})
    for name, flag, pairs in (("env", "env", args.env), ("labels", "label", args.label),
                              ("secrets", "secret", getattr(args, "secret", None))):
        if pairs:
            bad = [item for item in pairs if "=" not in item]
            if bad:
                raise CliError(f"--{flag} {bad[0]!r}: expected KEY=VALUE (see `zen submit --help`)", 2)
            data[name] = {**(data.get(name) or {}), **dict(item.split("=", 1) for item in pairs)}
    array = {"count": getattr(args, "array", None), "max_parallel": getattr(args, "max_parallel", None),
             "params": batches.read_params(args.array_params)
             if getattr(args, "array_params", None) else None}
    if any(v is not None for v in array.values()):  # the file's array: with the flags' fields replaced
        data["array"] = {**(data.get("array") or {}), **{k: v for k, v in array.items() if v is not None}}
        if data["array"].get("count") is None and data["array"].get("params") is None:
            raise CliError("--max-parallel is an array's: give --array N or --array-params FILE too", 2)
    if getattr(args, "checkpoint_every", None) is not None:  # the file's checkpoint: with its period replaced
        data["checkpoint"] = {**(data.get("checkpoint") or {}), "every": args.checkpoint_every}
    if data.get("user_id") is None:  # only then: the default may not be known (a container's uid)
        data["user_id"] = sender.email if sender is not None and sender.email else _default_user()
    elif sender is not None and sender.email and str(data["user_id"]).lower() != sender.email.lower():
        raise CliError(f"the job says user_id {data['user_id']!r} but you are {sender.email} ({sender.source}): "
                       "Zen takes a job's user from its sender's identity; drop --user / user_id", 2)
    args.chosen_job_id = bool(data.get("job_id"))  # the user's (it may be taken), not a fresh unique one
    if not data.get("job_id"):
        data["job_id"] = default_job_id(str(data["user_id"]))
    nothing = CliError("submit: nothing to run: give a job file, a command after -- (zen submit --cluster CLUSTER -- "
                       "python train.py), or --image (see `zen submit --help`)", 2)
    try:
        request = JobRequest.model_validate(data)
    except ValidationError as exc:
        if not args.file and not data.get("command") and not data.get("image"):
            raise nothing from None
        fields = {str(e["loc"][0]) if e["loc"] else "" for e in exc.errors()} - {k for k, v in flags.items() if v is not None}
        where = f"{args.file}: " if args.file and fields else ""  # a file's mistyped field (`comand:`), not a flag's value
        raise CliError(f"invalid job request: {where}{describe_validation_error(exc, top='', model=JobRequest, quote_text=True)}", 2) from None
    if not request.command and not request.image:
        raise nothing
    return request


def check_request(request: JobRequest, chosen: bool = True) -> tuple[str, list[str]]:
    """The function's own checks (size, shape, cluster, regions, limits) against ZEN_CONFIG; the
    cluster and regions it would use, or ``CliError`` with the reason it would refuse the job (or cancel it as it
    arrives: a stop kept for its id if ``chosen``, ``submitted.stopped_on_arrival``; a generated one is new)."""
    from zen.core.errors import Rejected
    from zen.core.events import decode_payload
    from zen.core.clearance import data_uris
    from zen.jobs.authorization import may_submit
    from zen.jobs.placement import resolve_request

    config = deployed_config()  # where it goes
    envelope = PubSubEnvelope(message_id="zen-submit", data=request.to_bytes())
    try:
        checked = decode_payload(envelope, JobRequest, config.limits.max_message_bytes)
        resolved = resolve_request(config, checked)
        if refused := may_submit(config, checked.user_id, resolved.queue, checked.priority,  # the queue's, the data's
                                 data_uris(checked.model_dump(mode="json", include={"inputs", "outputs"}))):
            raise Rejected(refused)
    except Rejected as rejection:
        shipped = ("; checked against the configuration shipped with zen: set ZEN_CONFIG to the one you deployed"
                   if deployed() and not os.environ.get("ZEN_CONFIG") else "")
        look = heaviest(request) if rejection.reason.startswith("payload is ") else _where_to_look(rejection.reason)
        raise CliError(f"Zen would refuse this job: {rejection.reason} ({look}{shipped})", 1) from None
    if chosen and (stop := submitted.stopped_on_arrival(config, checked, resolved.queue)):
        raise CliError(stop, 1)  # Zen would take it, then cancel it at once
    if len({shape.cluster for shape in resolved.shapes}) > 1:  # the function chooses as it takes the job
        return (" or ".join(dict.fromkeys(shape.cluster for shape in resolved.shapes))
                + ", the one Zen chooses as it takes the job (zen jobs get shows it)"), ["the chosen cluster's"]
    return resolved.cluster, resolved.regions


def _where_to_look(reason: str) -> str:
    """Where a refused job's user reads what the rule is: `zen clusters` knows shapes, regions and limits only."""
    if "may not name data under" in reason:  # first: a bucket's name may hold any word below
        return "see docs/how-to/data-placement.md#data-clearance"
    if reason.startswith("notify") or " notify." in reason:
        return "see docs/how-to/notifications.md"
    if "secret" in reason:
        return "the configuration's secrets: rules, docs/how-to/queues.md#secrets"
    if "queue" in reason or "priority" in reason:
        return "see `zen queues`"
    if "checkpoint" in reason:
        return "see docs/how-to/checkpoints.md"
    return "see `zen clusters`"


def _sender() -> tuple[Identity | None, Exception | None]:
    """Who publishes (``zen.cli.identity``), and, for a deployed Zen without Application Default
    Credentials, google-auth's error, for the caller to raise once the job's own checks pass: the
    search for them takes seconds off GCE, so it is made once."""
    from google.auth.exceptions import DefaultCredentialsError

    try:
        return identity.current(deployed_config(), publishing=True), None
    except DefaultCredentialsError as exc:
        return None, exc


def cmd_submit(args) -> int:
    sender, no_credentials = _sender()
    request = build_request(args, sender)
    job_id = request.job_id
    if job_id is None:  # build_request gives every request one
        raise CliError("the job request has no job_id", 2)
    cluster, regions = check_request(request, getattr(args, "chosen_job_id", True))
    if not request.image and not os.environ.get("PUBSUB_EMULATOR_HOST"):  # a deployed Zen's agents refuse it
        containers = ("runs jobs in containers only (without an image a job would run on the VM as root with the VM's "
                      "credentials; docs/explanations/security.md)")
        raise CliError(f"a deployed Zen {containers}: give --image IMAGE, or image: in the job file" if deployed() else
                       "no local stack is running in this directory or above it: start one with `zen local up` "
                       f"(for a deployed Zen, set ZEN_PROJECT; it {containers}: give --image IMAGE)", 1)
    if no_credentials is not None:
        raise no_credentials
    batches.await_dependencies(request.after or [], request.user_id, _read_job, condition=request.after_condition or "ok")
    if request.array is not None:
        return batches.submit_array(request, job_id, cluster, regions, sender, args.wait, publish,
                                    lambda ids: submitted.known_job(ids, _taken_ids)[0] or [],
                                    lambda: submitted.known_job(job_id, batches.read_array)[0] or [])
    following = None
    if args.wait:  # opened (and read once) before publishing: a submission it cannot follow is not sent
        from zen.cli.follow import Following

        following = Following(job_id)
    request_hash = request_fingerprint(request.canonical(job_id))
    existing, readable = (following.existing, True) if following is not None else submitted.known_job(job_id, _read_job)
    if existing is not None:  # the function would take it for a duplicate (or refuse it): nothing would run
        if existing.request_hash != request_hash:
            raise CliError(f"job_id {job_id} is taken by another request ({existing.status.value}; zen jobs get "
                           f"{job_id}): Zen would refuse this one; use a new job_id (or none: zen makes one). "
                           "Not published", 1)
        raise CliError(f"job {job_id} already exists ({existing.status.value}): the same request runs "
                       "nothing new; use a new job_id (or none: zen makes one). Not published (retrying a "
                       f"submit whose publish failed? it got through: zen jobs get {job_id})", 1)
    if readable and submitted.known_job(job_id, batches.read_array)[0]:  # the function refuses an array's id
        raise CliError(f"job_id {job_id} is an array's (its tasks {job_id}-N: zen jobs list --array {job_id}): use a "
                       "new job_id (or none: zen makes one). Not published", 1)
    where = submitted.topic("job_submitted")
    chosen = where if getattr(args, "chosen_job_id", True) else None  # a generated id is unique: not checked
    submitted.check_in_flight(chosen, job_id, request_hash, readable)  # on its way from an earlier `zen submit`?
    try:
        message_id = publish("job_submitted", request.to_bytes(), identity.attributes(sender))
    except NotPublished:  # refused outright: nothing went out, the id is free
        submitted.update(chosen, job_id, request_hash, None)
        raise
    except CliError as exc:  # it may have been published all the same (the answer lost): same id, one job
        submitted.update(chosen, job_id, request_hash, None)
        raise CliError(f"{exc}; job {job_id} may have been published all the same: to try again "
                       f"without making a second job, submit it again with --job-id {job_id}",
                       exc.code) from None
    except BaseException:  # credentials refused or not checkable, or Ctrl-C before the publish (during it: Interrupted,
        submitted.update(chosen, job_id, request_hash, None)  # a CliError, above): nothing went out, the id is free
        raise
    submitted.update(where, job_id, request_hash, message_id)  # (a generated id's too: for `zen stop` meanwhile)
    caveat = ("" if readable or chosen is None
              else f" (if job_id {job_id} is new: the database could not be read to check)")
    print(f"submitted {job_id} to cluster {cluster} (regions {', '.join(regions)}; message {message_id}) "
          f"{identity.describe(sender)}{caveat}", flush=True)
    print(f"  status: zen jobs get {job_id}    stop: zen stop {job_id}")
    if following is not None:
        return following.follow(job_id, message_id, request_hash)
    return 0


def _taken_ids(ids: list[str]) -> list[str]:
    """Those of ``ids`` a job or an array holds, in one read (an array's up to max_array_tasks task ids)."""
    from zen.store import repository

    return read(lambda session: repository.ids_taken(session, ids))


def _read_job(job_id: str):
    """The job of that id from the configured database (None: it has none); raises when it cannot be read."""
    from zen.store import repository

    return read(lambda session: repository.get_job(session, job_id))


def _stop_outlook(job_id: str) -> tuple[str, Any]:
    """What the stop will do, from the database when it can be read; and the job when it was read."""
    kept = (f"Zen keeps the stop for {EARLY_STOP_KEPT_DAYS} days: a job submitted with that id in that time is "
            "cancelled when it arrives")
    if not database_configured():
        return f"could not check whether job {job_id} exists (no database configured); if it does not, {kept}", None
    try:  # a stop must go out even when the check cannot be made (a runaway job on a GPU VM)
        job = _read_job(job_id)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - unreachable, no ZEN_DB_USER, no read grant, no credentials
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return (f"could not check whether job {job_id} exists (the database could not be read: {why}); "
                f"if it does not, {kept}"), None
    if job is None and (tasks := batches.read_array(job_id)):
        left = sum(1 for t in tasks if not t.status.terminal)
        if not left:
            return (f"array {job_id} has already ended (its {len(tasks)} tasks all ended): the stop changes "
                    "nothing"), tasks[0]
        return f"array {job_id}: {left} of its {len(tasks)} tasks have not ended: they will be stopped", tasks[0]
    if job is None:
        return f"no job {job_id} is known (yet): {kept}. Check the id with `zen jobs list`", None
    if job.status.value in ("SUCCEEDED", "FAILED", "CANCELLED"):
        return f"job {job_id} has already ended ({job.status.value}): the stop changes nothing", job
    if job.status.value in ("QUEUED", "PENDING"):
        return (f"job {job_id} is {job.status.value}: it is cancelled before it runs (follow with `zen jobs get "
                f"{job_id}`)"), job
    return f"job {job_id} is {job.status.value}: it will be stopped (follow with `zen jobs get {job_id}`)", job


def cmd_stop(args) -> int:
    from zen.core.models import JOB_ID_PATTERN
    from zen.jobs.authorization import may_stop

    if not JOB_ID_PATTERN.match(args.job_id):  # no job can have it: a stop kept for it would wait for nothing
        raise CliError(f"{args.job_id!r}: job_id must be 1-128 characters of letters, digits, '.', '_', ':' or '-', "
                       "starting with a letter or digit", 2)
    limit = StopRequest.model_fields["reason"].metadata[0].max_length
    if args.reason is not None and len(args.reason) > limit:
        raise CliError(f"--reason: at most {limit} characters (it has {len(args.reason)})", 2)
    outlook, job = _stop_outlook(args.job_id)
    if outlook.startswith("no job") and (lately := submitted.published_lately(args.job_id)):
        outlook = (f"job {args.job_id} was published {lately.age()} ago from this machine and is not in the database "
                   f"yet: Zen keeps the stop and cancels the job when it arrives")
    elif outlook.startswith("no job") and not args.force:  # refused: what a sent stop would do is no outlook of this one
        raise CliError(f"no job {args.job_id} is known: stop not sent. Check the id with `zen jobs list`; to stop a "
                       f"job you are about to submit with that id: zen stop --force {args.job_id} (Zen keeps such a "
                       f"stop {EARLY_STOP_KEPT_DAYS} days and cancels the job when it arrives)", 1)
    ended = (f"job {args.job_id} has already ended", f"array {args.job_id} has already ended")
    if outlook.startswith(ended) and not args.force:
        print(f"{outlook}; not sent (Zen would only record it as refused; zen stop --force sends it anyway)")
        return 0
    config = deployed_config()
    sender = identity.current(config, publishing=True)  # no credentials: an error before publishing
    why = may_stop(config, sender.email, job) if job is not None and sender is not None else None
    if why and not args.force:
        raise CliError(f"Zen would refuse this stop: {why}; not sent (zen stop --force sends it anyway: a Zen with "
                       "ZEN_AUTH=off believes any sender)", 1)
    message_id = publish("job_stop", StopRequest(job_id=args.job_id, reason=args.reason).to_bytes(), identity.attributes(sender))
    outlook = f"Zen refuses it unless it runs with ZEN_AUTH=off: {why}" if why else outlook  # forced: not the job's fate
    print(f"stop requested for {args.job_id} (message {message_id}) {identity.describe(sender)}: {outlook}")
    return 0


def register(sub, ctx: Context) -> None:
    submit = sub.add_parser(
        "submit", help="publish a job (a YAML/JSON job file, and/or flags); prints its id",
        description="Check a job against Zen's configuration and rules, then publish it. Examples: "
                    "zen submit examples/hello.yaml;  zen submit --cluster 1xl4 -- python train.py --lr 3")
    submit.add_argument("--job-id", help="the job's id (default: <user>-<yyyymmdd-hhmmss>-<8 chars>)")
    submit.add_argument("--user", help="user_id (default: the identity the submission proves, else $USER; with a proof, it must be that identity)")
    submit.add_argument("--cluster", help="cluster to run on (`zen clusters` lists them)")
    submit.add_argument("--gpu-type", help="instead of --cluster: a GPU type, e.g. nvidia-l4 (with --gpu-count)")
    submit.add_argument("--gpu-count", type=int, help="instead of --cluster: GPUs per VM (with --gpu-type)")
    submit.add_argument("--image", help="container image the command runs in (a deployed Zen requires one; the "
                        "local stack runs the command as a process of this machine, the image unused)")
    submit.add_argument("--priority", type=int, help="-1000..1000: a queue admits, scaling plans for, and a free VM "
                        "runs higher first (not a gang; default 0)")
    submit.add_argument("--max-runtime", type=seconds, metavar="SECONDS", help="stop an attempt after this long; a "
                        "rerun after a preemption gets it again (default: the configured cap, limits.max_runtime_s)")
    submit.add_argument("--max-attempts", type=int, help="attempts before it is FAILED (a VM gone silent spends one; a preempted VM does not)")
    submit.add_argument("--provisioning", choices=(*MODELS, ANY),
                        help="the VMs it may run on (default: any of its cluster's provisioning models)")
    submit.add_argument("--max-start-wait", type=seconds, metavar="SECONDS", help="how long it may wait for a start "
                        "before Zen uses a costlier model (default: its cluster's max_start_wait_s)")
    submit.add_argument("--checkpoint-every", type=seconds, metavar="SECONDS",
                        help="save $ZEN_CHECKPOINT_DIR this often, restore it in a rerun (checkpoint: {every: N})")
    submit.add_argument("--nodes", type=int, metavar="N", help="VMs it runs on at once, in one region, each with "
                        "ZEN_NODE_RANK, ZEN_NUM_NODES, ZEN_NODE_IPS and torchrun's MASTER_ADDR, MASTER_PORT, NNODES, "
                        "NODE_RANK (default 1; docs/how-to/multi-node.md)")
    submit.add_argument("--queue", help="the queue whose quota it runs under (default: your queue, see `zen queues`)")
    submit.add_argument("--array", type=int, metavar="N", help="N tasks from this one job, each with $ZEN_ARRAY_INDEX "
                        "(0..N-1): jobs <id>-0 .. <id>-(N-1) (array: {count: N})")
    submit.add_argument("--array-params", metavar="FILE", help="a YAML/JSON list of mappings: one task per entry, "
                        "its variables in the task's environment (array: {params: [...]})")
    submit.add_argument("--max-parallel", type=int, metavar="K", help="an array's tasks let run at once (default: all)")
    submit.add_argument("--after", action="append", metavar="ID", help="start only after this job or array "
                        "SUCCEEDED (repeatable; cancelled if it does not)")
    submit.add_argument("--after-any", action="store_true", help="with --after: start once they ended, however")
    submit.add_argument("--max-retries", type=int, metavar="N", help="run again after a failed exit, at most N times "
                        "(a lost or preempted attempt is rerun anyway: --max-attempts)")
    submit.add_argument("--retry-exit-code", type=int, action="append", metavar="CODE",
                        help="retry only these exit codes (repeatable; default: any non-zero)")
    submit.add_argument("--retry-backoff", type=seconds, metavar="SECONDS",
                        help="wait before the first retry (default 30), doubling")
    submit.add_argument("--region", action="append", help="allowed region (repeatable; default: all of the cluster's)")
    submit.add_argument("--env", action="append", metavar="KEY=VALUE", help="environment variable (repeatable)")
    submit.add_argument("--secret", action="append", metavar="NAME=REFERENCE", help=(
        "environment variable read from Secret Manager on the VM, e.g. "
        "HF_TOKEN=projects/P/secrets/hf-token/versions/latest (repeatable; its queue must allow it)"))
    submit.add_argument("--label", action="append", metavar="KEY=VALUE",
                        help="label, for `zen jobs list --label` (repeatable)")
    submit.add_argument("-f", "--wait", "--follow", dest="wait", action="store_true",
                        help="follow the job to its end, printing its output; exit with its exit code")
    submit.add_argument("words", nargs="*", metavar="[FILE] [-- PROGRAM ARGS]",
                        help="a job file (.yaml/.yml/.json), and/or the command after --")
    submit.set_defaults(func=cmd_submit)
    stop = sub.add_parser("stop", help="ask to stop a job (says what will happen to it)")
    stop.add_argument("job_id", help="the job's id (printed by zen submit)")
    stop.add_argument("--reason", help="recorded in the job's history")
    stop.add_argument("--force", action="store_true",
                      help="send the stop although no such job is known yet (it then waits for the job), or "
                           "Zen would refuse its sender")
    stop.set_defaults(func=cmd_stop)
