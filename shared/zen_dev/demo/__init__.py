"""``make demo``: the whole system on this machine, doing its job for real.

Brings up the local stack with ``zen-demo.yaml`` against ``scenario.yaml`` (us-central1 out of GPUs
for the first minute), submits its jobs through the official Pub/Sub client as a user would, waits for
every job to end and every idle VM to go, prints what happened and why, and exits non-zero on any
unexpected outcome. The scenario, job by job: docs/README.md ("What works today")."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from zen.store import fleet, repository, usage
from zen_dev.demo import dollars as demo_dollars, gangs, notices, pipelines, placement, who
from zen_dev.local.environment import overridden_environ
from zen_dev.local.stack import LocalStack, Ports

HERE = Path(__file__).parent
STOCKOUT_REGION = "us-central1"
STOCKOUT_REAL_S = 60  # scenario.yaml: 600 cloud seconds at time_scale 10
PREEMPT_AFTER_S = 3  # spot-8 is preempted this long after it is seen RUNNING (it saves a step each 0.25 s)


@dataclass(frozen=True)
class DemoJob:
    job_id: str
    cluster: str
    command: list[str]
    expect: str  # final status
    regions: list[str] | None = None
    expect_attempt: int | None = 1  # None: the job's own check says (a gang: zen_dev.demo.gangs.check)
    action: str | None = None  # "stop" or "preempt" once RUNNING
    body: dict | None = None  # the whole request, when it is more than the fields above
    checkpoint: dict | None = None  # its checkpoint: field
    expect_said: str | None = None  # in its final report (its output's tail)

    def request(self) -> dict:
        if self.body:
            return self.body
        body = {"job_id": self.job_id, "user_id": "demo", "cluster": self.cluster, "command": self.command}
        if self.regions:
            body["regions"] = self.regions
        if self.checkpoint:
            body["checkpoint"] = self.checkpoint
        return body


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


# spot-8: 60 steps of 0.25 s, each written whole to $ZEN_CHECKPOINT_DIR/step; it starts from the step its
# checkpoint holds, and stops at SIGTERM (its VM preempted), its last step saved (docs/how-to/checkpoints.md).
COUNTER = """
import os, signal, time
path = os.path.join(os.environ["ZEN_CHECKPOINT_DIR"], "step")
step = int(open(path).read()) if os.path.exists(path) else 0
print(f"resumed from step {step}" if step else "starting at step 0", flush=True)
stopped = []
signal.signal(signal.SIGTERM, lambda *_: stopped.append(1))
while step < 60 and not stopped:
    step += 1
    with open(path + ".tmp", "w") as file:
        file.write(str(step))
    os.replace(path + ".tmp", path)
    time.sleep(0.25)
print(f"preempted at step {step}" if stopped else "done: 60 steps", flush=True)
"""


FIRST_WAVE = [
    DemoJob("train-1", "1xl4", _py("import time; time.sleep(3); print('loss 0.12')"), "SUCCEEDED"),
    DemoJob("train-2", "1xl4", _py("import time; time.sleep(3); print('loss 0.10')"), "SUCCEEDED"),
    DemoJob("train-3", "4xa100-40gb", _py("import time; time.sleep(5); print('epoch 1/1')"), "SUCCEEDED"),
    DemoJob("train-4", "4xa100-40gb", _py("import time; time.sleep(5); print('epoch 1/1')"), "SUCCEEDED"),
    DemoJob("eval-eu-5", "1xl4", _py("print('eval ok')"), "SUCCEEDED", regions=["europe-west4"]),
    DemoJob(notices.BROKEN_ID, "1xl4", [], "FAILED", body=notices.broken_request()),  # tells the webhook sink
    DemoJob("stopped-7", "4xa100-40gb", _py("import time; time.sleep(600)"), "CANCELLED", action="stop"),
    DemoJob("spot-8", "4xa100-40gb", _py(COUNTER), "SUCCEEDED", regions=["us-west1"], expect_attempt=2,
            action="preempt", checkpoint={"every": 30}, expect_said="resumed from step"),
    DemoJob(who.SECRET_ID, "1xl4", [], "SUCCEEDED", body=who.secret_request(), expect_said=who.SECRET_SAID),
]
SECOND_WAVE = [
    DemoJob("late-9", "1xl4", _py("print('late 9')"), "SUCCEEDED"),
    DemoJob("late-10", "1xl4", _py("print('late 10')"), "SUCCEEDED"),
    DemoJob("late-11", "4xa100-40gb", _py("print('late 11')"), "SUCCEEDED"),
    DemoJob("late-12", "4xa100-40gb", _py("print('late 12')"), "SUCCEEDED"),
]

PIPELINE_JOBS = [DemoJob(task, "1xl4", [], "SUCCEEDED", expect_said=f"trial {i} lr {pipelines.RATES[i]}")
                 for i, task in enumerate(pipelines.TASK_IDS)] + [
    DemoJob(pipelines.PREP_ID, "1xl4", [], "SUCCEEDED"),
    DemoJob(pipelines.TRAIN_ID, "1xl4", [], "SUCCEEDED", expect_attempt=2),
    DemoJob(pipelines.EVAL_ID, "1xl4", [], "SUCCEEDED"),
    DemoJob(gangs.GANG_ID, "1xl4", [], "SUCCEEDED", expect_attempt=None)]  # two nodes; one preempted

TAGGED = DemoJob(placement.TAGGED_ID, "4xa100-40gb", [], "SUCCEEDED", body=placement.tagged_request())
NEAR_DATA = DemoJob(placement.DATA_ID, placement.DATA_CLUSTER, [], "SUCCEEDED", body=placement.data_request())


@dataclass
class DemoResult:
    jobs: dict[str, dict] = field(default_factory=dict)
    decisions: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    vm_minutes_paid: float = 0.0
    vm_minutes_used: float = 0.0
    vms_left: int = 0
    placement: list[str] = field(default_factory=list)  # where the placement jobs ran, and why
    cheaper: list[str] = field(default_factory=list)  # ADDs that chose a cheaper pool than the first region
    who: list[str] = field(default_factory=list)  # refusals of who may do what, and the secret kept out
    pipelines: list[str] = field(default_factory=list)  # the sweep's concurrency, the retried step, the wait
    notices: list[str] = field(default_factory=list)  # what the webhook sink was told
    gang: list[str] = field(default_factory=list)  # the two-node job: met, preempted, requeued whole, met again


def run(home: Path = Path(".zen/demo"), base_port: int = 8185, second_wave: bool = True,
        progress=print, timeout_s: float = 420, view=None, forks=None) -> DemoResult:
    """Bring the stack up, play the scenario, tear it down; returns what happened. ``view(db)``, when given, is
    called about once a second (the live table on a terminal); ``forks``: the stack's (``LocalStack``)."""
    stack = LocalStack(home=home, config_path=HERE / "zen-demo.yaml", scenario=HERE / "scenario.yaml",
                       tick_every_s=2.0, ports=Ports.from_base(base_port), fresh=True,
                       buckets=placement.BUCKETS, forks=forks)
    record = stack.up()
    progress(f"Web console (while the demo runs): {record['console']}")
    try:
        with overridden_environ(record["env"]):  # the official clients find the stand-ins through these
            return _play(stack, second_wave, progress, timeout_s, view)
    finally:
        stack.down()


def _play(stack: LocalStack, second_wave: bool, progress, timeout_s: float, view=None) -> DemoResult:
    from google.cloud import pubsub_v1

    from zen.store.db import Database

    db = Database.from_env()
    publisher = pubsub_v1.PublisherClient()
    project = stack.config.project
    topics = stack.config.topics
    started = time.monotonic()

    owners: dict[str, str] = {}  # job -> its user, who sends its stop

    def publish(topic: str, body: dict, sender: str | None = None) -> None:
        """As ``zen submit`` / ``zen stop`` would: with the sender's ID token (the job's user's)."""
        if "user_id" in body:
            owners[body["job_id"]] = body["user_id"]
        who = sender or body.get("user_id") or owners[body["job_id"]]
        publisher.publish(publisher.topic_path(project, topic), json.dumps(body).encode(),
                          **stack.sender(who)).result(30)

    waves = [FIRST_WAVE, [TAGGED, NEAR_DATA], PIPELINE_JOBS] + ([SECOND_WAVE] if second_wave else [])
    jobs = [job for wave in waves for job in wave]
    placement.upload_input()
    for job in FIRST_WAVE + [TAGGED]:
        publish(topics.job_submitted, job.request())
    publish(topics.job_submitted, who.denied_request())  # refused: its user may not use queue prod
    pipeline = pipelines.Pipeline(lambda body: publish(topics.job_submitted, body))
    pipeline.start()
    gang = gangs.Gang(lambda body: publish(topics.job_submitted, body), lambda zone, vm: _preempt(project, zone, vm))
    gang.start()
    progress(f"submitted {len(FIRST_WAVE) + 1} jobs; {STOCKOUT_REGION} has no GPUs for {STOCKOUT_REAL_S}s, "
             f"and is the only region cleared for {TAGGED.job_id} (requires_tags [hipaa])")
    data_sent = False
    placed: dict[str, str] = {}  # placement job -> status seen last
    done_actions: set[str] = set()
    running_seen: dict[str, float] = {}  # job -> when the loop first saw it RUNNING
    waited: dict[str, str] = {}  # job -> status seen last, for the queue's PENDING/admitted lines
    paid_vm_s = 0.0
    last_sample = time.monotonic()
    second_sent = not second_wave
    last_line = ""
    while True:
        elapsed = time.monotonic() - started
        rows = _jobs(db)
        _report_queue(db, stack.config, rows, waited, lambda text: progress(f"{elapsed:5.0f}s  {text}"))
        pipeline.advance(rows)
        gang.advance(db, lambda text: progress(f"{elapsed:5.0f}s  {text}"))
        for job in jobs:
            row = rows.get(job.job_id)
            if row and row["status"] == "RUNNING":
                running_seen.setdefault(job.job_id, time.monotonic())
            # A preemption only once the job has run a few seconds: RUNNING is reported as its process starts,
            # before it has saved a step (on a loaded machine, seconds before).
            settled = time.monotonic() - running_seen.get(job.job_id, time.monotonic()) >= (
                PREEMPT_AFTER_S if job.action == "preempt" else 0)
            if job.action and job.job_id not in done_actions and row and row["status"] == "RUNNING" and settled:
                if job.action == "stop":
                    publish(topics.job_stop, {"job_id": job.job_id, "reason": "not mine to stop"}, sender=who.INTRUDER)
                    progress(f"{elapsed:5.0f}s  {who.INTRUDER} asked to stop {job.job_id} (refused: not theirs)")
                    publish(topics.job_stop, {"job_id": job.job_id, "reason": "demo: user changed their mind"})
                    progress(f"{elapsed:5.0f}s  stop requested for {job.job_id} by its user")
                else:
                    _preempt(project, row["zone"], row["vm"])
                    progress(f"{elapsed:5.0f}s  spot VM {row['vm']} running {job.job_id} preempted")
                done_actions.add(job.job_id)
        _report_placement(rows, placed, lambda text: progress(f"{elapsed:5.0f}s  {text}"))
        # Last, once its cluster is quiet (never on a timer: an idle VM elsewhere could take it first;
        # and not during the stockout story, where its hedge would strike the recovering region).
        if not data_sent and second_sent and placement.data_cluster_quiet(
                rows, _instances(db), [j.job_id for j in FIRST_WAVE + (SECOND_WAVE if second_wave else [])
                                       if j.cluster == NEAR_DATA.cluster]):
            publish(topics.job_submitted, NEAR_DATA.request())
            data_sent = True
            progress(f"{elapsed:5.0f}s  {placement.DATA_CLUSTER} is quiet: submitted {NEAR_DATA.job_id}, whose input "
                     f"is in gs://{placement.DATA_BUCKET} ({placement.DATA_LOCATION})")
        if not second_sent and elapsed > STOCKOUT_REAL_S + 15:
            for job in SECOND_WAVE:
                publish(topics.job_submitted, job.request())
            second_sent = True
            progress(f"{elapsed:5.0f}s  {STOCKOUT_REGION} has recovered: submitted {len(SECOND_WAVE)} more jobs")
        over = [j for j in jobs if rows.get(j.job_id, {}).get("status") in ("SUCCEEDED", "FAILED", "CANCELLED")]
        vms = _vm_count(db)
        paid_vm_s += _vms_up(db) * (time.monotonic() - last_sample)  # VMs whose agent is up, sampled
        last_sample = time.monotonic()
        line = f"{elapsed:5.0f}s  jobs over: {len(over)}/{len(jobs)}  VMs: {vms}"
        if line.split("s ", 1)[1] != last_line:
            progress(line)
            last_line = line.split("s ", 1)[1]
        if view is not None:
            view(db)
        if data_sent and second_sent and len(over) == len(jobs) and vms == 0:
            break
        if elapsed > timeout_s:
            progress(f"{elapsed:5.0f}s  giving up waiting")
            break
        time.sleep(1.0)
    result = _summarise(db, jobs)
    result.vm_minutes_paid = paid_vm_s / 60
    output_uri, output = placement.output_object()  # while the storage stand-in is up
    result.problems += placement.check(result.jobs, output)
    result.placement = placement.describe(stack.config, result.jobs, output_uri, output)
    result.who, problems = who.check(db, stack.home)
    result.notices, told = notices.check(stack.home)
    problems += told
    result.problems += problems
    with db.transaction() as session:
        result.pipelines, problems = pipelines.check(repository.all_job_events(session))
    result.problems += problems
    result.gang, problems = gangs.check(db)
    result.problems += problems
    result.cheaper = demo_dollars.cheaper_moves(result.decisions, stack.config)
    if not result.cheaper:
        result.problems.append("no job was placed in a cheaper region than its cluster's first (pricing.overrides)")
    return result


def _report_placement(rows: dict[str, dict], seen: dict[str, str], say) -> None:
    """A line when a placement job starts waiting for a VM, and when it starts running (where)."""
    for job_id in (TAGGED.job_id, NEAR_DATA.job_id):
        row = rows.get(job_id)
        if row is None or seen.get(job_id) == row["status"]:
            continue
        if row["status"] == "QUEUED":
            say(f"{job_id} waits for a VM in {', '.join(row['regions'])} (its regions, in order)")
        elif row["status"] == "RUNNING":
            say(f"{job_id} runs in {row['region']} on {row['vm']}")
        seen[job_id] = row["status"]


def _report_queue(db, config, rows: dict[str, dict], waited: dict[str, str], say) -> None:
    """A line when a job waits PENDING (for quota, or held by its array, a dependency or a retry's backoff,
    with the reason), and when it leaves PENDING."""
    from zen.jobs.queueing import Queueing
    from zen.store.jobstore import PostgresJobTx

    for job_id, row in rows.items():
        before, now = waited.get(job_id), row["status"]
        if now == "PENDING" and before != "PENDING":
            with db.transaction() as session:
                job = repository.get_job(session, job_id)
                why = f"held: {job.hold}" if job.hold else Queueing(config).why_pending(PostgresJobTx(session), job)
                say(f"{job_id} waits PENDING: {why}")
        elif before == "PENDING" and now != "PENDING":
            say(f"{job_id} admitted ({now})")
        waited[job_id] = now


def _vms_up(db) -> int:
    with db.transaction() as session:
        return sum(1 for vm in repository.list_vms(session) if vm["state"] in ("IDLE", "BUSY"))


def _preempt(project: str, zone: str, vm: str) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1
    from google.cloud.compute_v1.services.instances.transports.rest import InstancesRestTransport

    client = compute_v1.InstancesClient(transport=InstancesRestTransport(
        host=os.environ["ZEN_COMPUTE_ENDPOINT"], credentials=AnonymousCredentials(), url_scheme="http"))
    client.simulate_maintenance_event_unary(project=project, zone=zone, instance=vm)


def _jobs(db) -> dict[str, dict]:
    with db.transaction() as session:
        return {j.job_id: j.public_view() for j in repository.list_jobs(session)}


def _vm_count(db) -> int:
    return len(_instances(db))


def _instances(db) -> list[dict]:
    with db.transaction() as session:
        return fleet.mig_instances(session)


def _summarise(db, jobs: list[DemoJob]) -> DemoResult:
    result = DemoResult(jobs=_jobs(db))
    with db.transaction() as session:
        result.decisions = list(reversed(fleet.recent_decisions(session, None, 100_000)))
        histories = repository.all_job_events(session)
    result.vms_left = _vm_count(db)
    submitted = {e["job_id"]: e["at"] for e in histories if e["from_status"] is None}
    waited = [e["job_id"] for e in histories if e["from_status"] == "PENDING" and e["to_status"] == "QUEUED"
              and (e["at"] - submitted[e["job_id"]]).total_seconds() > 1]
    if not waited:
        result.problems.append("no job waited PENDING for the demo queue's quota")
    with db.transaction() as session:  # every attempt that ran, x its VMs: a failed one retried too (its job's
        # history goes RUNNING -> PENDING: counted from it, such attempts' minutes and a gang's other nodes were not)
        result.vm_minutes_used = float(usage.run(session, "vm_seconds_run")[0]["seconds"]) / 60
    for job in jobs:
        row = result.jobs.get(job.job_id)
        if row is None:
            result.problems.append(f"{job.job_id} never reached Zen")
            continue
        if row["status"] != job.expect or job.expect_attempt not in (None, row["attempt"]):
            result.problems.append(f"{job.job_id}: {row['status']} attempt {row['attempt']} "
                                   f"(expected {job.expect} attempt {job.expect_attempt})")
        if job.expect_said and job.expect_said not in (row.get("message") or ""):
            result.problems.append(f"{job.job_id}: {job.expect_said!r} not in its final report "
                                   f"({(row.get('message') or '')[-200:]!r})")
        # The first wave starts and ends well inside the stockout: none of it may run there.
        if job in FIRST_WAVE and row["region"] == STOCKOUT_REGION:
            result.problems.append(f"{job.job_id} ran in {STOCKOUT_REGION} during its stockout")
    second = [result.jobs.get(j.job_id, {}).get("region") for j in jobs if j in SECOND_WAVE]
    if second and STOCKOUT_REGION not in second:
        result.problems.append(f"no job of the second wave ran in {STOCKOUT_REGION} after it recovered "
                               f"(regions: {second})")
    if result.vms_left:
        result.problems.append(f"{result.vms_left} VM(s) left at the end (idle VMs should be scaled away)")
    return result


def print_summary(result: DemoResult) -> None:
    print("\nJobs:")
    print(f"  {'job':<12} {'outcome':<10} {'region':<13} {'attempt':>7} {'time to start':>14}")
    for job_id, row in sorted(result.jobs.items(), key=lambda kv: kv[1]["submitted_at"]):
        wait = ""
        if row["started_at"]:
            seconds = (datetime.fromisoformat(row["started_at"]) - datetime.fromisoformat(row["submitted_at"]))
            wait = f"{seconds.total_seconds():.0f}s"
        print(f"  {job_id:<12} {row['status']:<10} {row['region'] or '-':<13} {row['attempt']:>7} {wait:>14}")
    print("\nScaling decisions:")
    for d in result.decisions:
        if d["action"] in ("BLOCK", "UNBLOCK", "ADD", "DELETE"):
            where = f"{d['cluster']}/{d['region'] or '-'}"
            print(f"  {d['at'].strftime('%H:%M:%S')} {d['action']:<7} {where:<27} {d['reason']}")
    print(f"\nGPU VM-minutes: paid {result.vm_minutes_paid:.1f} (VMs with their agent up, sampled each second; "
          f"boots excluded), used by jobs {result.vm_minutes_used:.1f}")
    for heading, lines in (
            ("Placed by clearance and by data", result.placement),
            ("Who is asking (each message carries its sender's ID token; docs/how-to/queues.md)", result.who),
            ("A sweep and a pipeline (docs/how-to/arrays-and-pipelines.md)", result.pipelines),
            ("Notified (docs/how-to/notifications.md)", result.notices),
            ("A two-node job (docs/how-to/multi-node.md)", result.gang),
            ("Moved to a cheaper region than the cluster's first (the reason names the prices compared)",
             result.cheaper[:3])):
        if lines:
            print(f"\n{heading}:")
            print("\n".join(lines))
    print(f"\nDollars per policy on the simulator's {demo_dollars.SCENARIO} scenario (zen simulate):")
    print("\n".join(demo_dollars.policy_dollars()))
    if result.problems:
        print("\nUNEXPECTED:")
        for problem in result.problems:
            print(f"  - {problem}")
    else:
        print("\nEvery job ended as expected; the stocked-out region was avoided while it had no GPUs and used "
              "again once it had; the tagged job ran only in its cleared region and the data job next to its "
              "data; idle VMs were scaled away.")


def main(base_port: int = 8185) -> int:
    started = datetime.now(timezone.utc)
    print(f"Zen demo: the whole system on this machine ({started:%H:%M:%S} UTC). Logs: .zen/demo/logs/")
    if sys.stdout.isatty():
        # On a terminal: the live table of jobs and VMs per region (zen watch) under the progress lines.
        from rich.live import Live

        from zen.cli.watch import frame as watch_frame

        with Live(refresh_per_second=2) as live:
            result = run(base_port=base_port, progress=live.console.print, view=lambda db: live.update(watch_frame(db)))
    else:
        result = run(base_port=base_port)
    print_summary(result)
    return 1 if result.problems else 0
