"""A free VM runs the queued job of highest priority it can run, not the oldest start its agent pulled.

Agents pull starts about in the order Zen published them, whatever their priority: an admitted job of priority 5
waited for a VM behind every older job of priority 0 of its regions. Now a claim that would win, from an agent that
gives way (``Heartbeat.gives_way``), is refused (``outranked``) where a QUEUED job of higher priority waits that the
VM could run: that job is offered to the VM alone (zen-vm-control, kind=start), after the RELEASE, and the agent
gives the refused job's start back for another VM (it is not published again). Nothing runs twice: the offered job
is still claimed, and its first claim wins (zen.jobs.claims.outranked)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.messages import heartbeat, job_request
from tests.test_routing import get, history, offers, reach, routed  # noqa: F401 (a fixture)


def controls(publisher) -> list[tuple[str, str, str, str | None]]:
    """The orders to VMs on zen-vm-control, offers left out: (vm, job, action, refused cause)."""
    return [(json.loads(m.data)["vm"], json.loads(m.data)["job_id"], json.loads(m.data)["action"],
             m.attributes.get("refused")) for m in publisher.on("zen-vm-control") if m.attributes.get("kind") != "start"]


def starts(publisher) -> list[str]:
    return [json.loads(m.data)["job_id"] for m in publisher.on("zen-job-start")]


def test_a_vm_claiming_an_older_job_is_offered_the_one_of_higher_priority(zen, functions, publisher, clock):
    functions.submit(job_request("low", priority=0))
    clock.advance(1)
    functions.submit(job_request("high", priority=5))
    assert starts(publisher) == ["low", "high"]

    functions.heartbeat(heartbeat("low", "CLAIMED", 1, vm="vm-a", gives_way=True))  # the older start, pulled first
    assert controls(publisher) == [("vm-a", "low", "RELEASE", "outranked")]
    assert offers(publisher) == [("vm-a", "high", "1")]
    order = [m.attributes.get("kind") or json.loads(m.data)["action"] for m in publisher.on("zen-vm-control")]
    assert order == ["RELEASE", "start"]  # the offer after the RELEASE: the VM takes it once free of its claim
    assert starts(publisher) == ["low", "high"]  # the refused job's start: given back by the VM, not published again
    low, high = get(zen, "low"), get(zen, "high")
    assert (low.status.value, low.vm) == ("QUEUED", None)
    assert (high.start_vms, high.start_regions, high.widen_at) == (["vm-a"], None, clock() + timedelta(seconds=60))
    assert history(zen, "high")[-1][2] == ("start offered to VM vm-a first, ahead of a job (priority 0) it claimed; "
                                           "widened after 60 s unclaimed")

    functions.heartbeat(heartbeat("high", "CLAIMED", 2, vm="vm-a", gives_way=True))
    assert controls(publisher)[-1] == ("vm-a", "high", "CONFIRM", None)
    assert get(zen, "high").status.value == "ASSIGNED"
    functions.heartbeat(heartbeat("low", "CLAIMED", 1, vm="vm-b", gives_way=True))  # the next VM takes the older one
    assert controls(publisher)[-1] == ("vm-b", "low", "CONFIRM", None)


def test_an_agent_that_does_not_give_way_keeps_its_claim(zen, functions, publisher, clock):
    """An agent from before ``gives_way`` drops the start of a claim it is refused: its claim stands."""
    functions.submit(job_request("low"))
    functions.submit(job_request("high", priority=5))
    functions.heartbeat(heartbeat("low", "CLAIMED", 1, vm="vm-a"))
    assert controls(publisher) == [("vm-a", "low", "CONFIRM", None)] and offers(publisher) == []


def test_jobs_of_one_priority_are_taken_as_pulled(zen, functions, publisher, clock):
    functions.submit(job_request("first"))
    clock.advance(1)
    functions.submit(job_request("second"))
    functions.heartbeat(heartbeat("second", "CLAIMED", 1, vm="vm-a", gives_way=True))
    assert controls(publisher) == [("vm-a", "second", "CONFIRM", None)] and offers(publisher) == []


@pytest.mark.parametrize("why, high", [
    ("its regions are others", dict(regions=["us-west1"])),
    ("it requires a tag the VM's template lacks", dict(requires_tags=["hipaa"])),
    ("it is a gang", dict(nodes=2)),
])
def test_a_job_of_higher_priority_the_vm_could_not_run_takes_nothing_from_it(config, db, publisher, clock, why, high):
    from tests.test_tags import functions_with

    _, functions = functions_with(config, db, publisher, clock, {"us-central1": ["hipaa"]})  # the VM says no tags
    functions.submit(job_request("low"))
    functions.submit(job_request("high", priority=5, **high))
    functions.heartbeat(heartbeat("low", "CLAIMED", 1, vm="vm-a", gives_way=True))
    assert controls(publisher) == [("vm-a", "low", "CONFIRM", None)], why
    assert offers(publisher) == []


def test_a_job_offered_to_one_vm_is_not_offered_to_the_next_until_its_offer_widens(zen, functions, publisher, clock):
    for job_id in ("low-1", "low-2", "low-3"):
        functions.submit(job_request(job_id))
    functions.submit(job_request("high", priority=5))
    functions.heartbeat(heartbeat("low-1", "CLAIMED", 1, vm="vm-a", gives_way=True))
    functions.heartbeat(heartbeat("low-2", "CLAIMED", 1, vm="vm-b", gives_way=True))  # vm-a is asked: vm-b keeps low-2
    assert controls(publisher) == [("vm-a", "low-1", "RELEASE", "outranked"), ("vm-b", "low-2", "CONFIRM", None)]
    assert offers(publisher) == [("vm-a", "high", "1")]

    clock.advance(61)  # vm-a never took it (its agent is older, or died): the tick sends it everywhere
    functions.tick()
    job = get(zen, "high")
    assert (job.start_vms, job.start_regions, job.widen_at) == (None, None, None)
    assert reach(publisher.on("zen-job-start")[-1]) == {"allow_any", "allow_us_central1", "allow_us_west1",
                                                        "allow_europe_west4"}
    assert history(zen, "high")[-1][2] == "start widened to every allowed region: unclaimed 61 s on VM vm-a"
    functions.heartbeat(heartbeat("low-3", "CLAIMED", 1, vm="vm-c", gives_way=True))  # still waiting: offered again
    assert controls(publisher)[-1] == ("vm-c", "low-3", "RELEASE", "outranked")
    assert offers(publisher) == [("vm-a", "high", "1"), ("vm-c", "high", "1")]


def test_two_vms_offered_one_job_run_it_once(zen, functions, publisher, clock):
    """The offer is a second copy of the job's start: the VM it is offered to and a VM that pulled its first copy
    both claim it; the first claim wins, the other is told RELEASE, as for any start delivered twice."""
    functions.submit(job_request("low"))
    functions.submit(job_request("high", priority=5))
    functions.heartbeat(heartbeat("low", "CLAIMED", 1, vm="vm-a", gives_way=True))
    assert offers(publisher) == [("vm-a", "high", "1")]
    functions.heartbeat(heartbeat("high", "CLAIMED", 1, vm="vm-b", gives_way=True))  # its regional copy, pulled meanwhile
    functions.heartbeat(heartbeat("high", "CLAIMED", 2, vm="vm-a", gives_way=True))  # the offer, taken
    assert controls(publisher)[-2:] == [("vm-b", "high", "CONFIRM", None), ("vm-a", "high", "RELEASE", None)]
    assert get(zen, "high").vm == "vm-b"


def test_zen_explain_says_a_start_is_offered_ahead_of_a_lower_priority_job(zen, functions, tmp_path, monkeypatch,
                                                                             capsys):
    import yaml

    from zen.cli.queues import explain_job, local_time

    functions.submit(job_request("low"))
    functions.submit(job_request("high", priority=5))
    functions.heartbeat(heartbeat("low", "CLAIMED", 1, vm="vm-a", gives_way=True))
    path = tmp_path / "zen.yaml"
    path.write_text(yaml.safe_dump(json.loads(zen.config.model_dump_json())))
    monkeypatch.setenv("ZEN_CONFIG", str(path))
    assert explain_job("high", False, zen.db) == 0
    assert ("high: QUEUED - admitted; waiting for a VM of 4xa100-40gb in us-central1, us-west1, europe-west4 (its start "
            "is offered to vm-a first, ahead of the lower-priority job it claimed; widened at the first tick after "
            f"{local_time(get(zen, 'high').widen_at)})") in capsys.readouterr().out


def test_a_start_offered_to_a_warm_vm_alone_is_not_outranked(routed, publisher):
    """The VM was chosen for that job (its cache holds its inputs): its claim stands, and the job of higher priority
    waits for another VM."""
    from tests.test_routing import DATA
    from tests.test_start_offers import two_idle_vms_one_warm

    zen, functions = routed
    functions.submit(job_request("high", priority=5, regions=["us-west1"]))
    two_idle_vms_one_warm(functions)
    functions.submit(job_request("warm", inputs=DATA))
    assert offers(publisher) == [("vm-warm", "warm", "1")]
    functions.heartbeat(heartbeat("warm", "CLAIMED", 1, vm="vm-warm", region="us-west1", zone="us-west1-a",
                                  gives_way=True))
    assert controls(publisher) == [("vm-warm", "warm", "CONFIRM", None)]
    assert get(zen, "high").start_vms is None


def epoch_ms(clock) -> int:
    return int(clock().timestamp() * 1000)


def test_a_later_try_of_an_outranked_claim_does_not_win_the_older_job(zen, functions, publisher, clock):
    """The agent sends CLAIMED again (the next ``seq``) when no answer came within ``ZEN_AGENT_CLAIM_TIMEOUT_S``; a
    slow Zen answers the first with RELEASE ``outranked`` and then reads the second try: refused again, the offer sent
    again. Won, it held the older job ASSIGNED to a VM that gave its start back, and nothing ran it."""
    functions.submit(job_request("low"))
    clock.advance(1)
    functions.submit(job_request("high", priority=5))

    first = epoch_ms(clock)
    functions.heartbeat(heartbeat("low", "CLAIMED", first, vm="vm-a", gives_way=True))
    assert controls(publisher) == [("vm-a", "low", "RELEASE", "outranked")]
    assert offers(publisher) == [("vm-a", "high", "1")]

    # The agent's second try, sent 20 s after the first before the RELEASE reached it (Zen was slow).
    functions.heartbeat(heartbeat("low", "CLAIMED", first + 20_000, vm="vm-a", gives_way=True))
    low_after_retry = get(zen, "low").status.value

    clock.advance(1)
    functions.heartbeat(heartbeat("high", "CLAIMED", first + 21_000, vm="vm-a", gives_way=True))  # the offer, taken
    assert controls(publisher)[-1] == ("vm-a", "high", "CONFIRM", None)
    assert get(zen, "high").vm == "vm-a"
    assert low_after_retry == "QUEUED"  # the VM gave its start back: held ASSIGNED there, nothing runs it
    assert offers(publisher) == [("vm-a", "high", "1")] * 2  # sent again with the second refusal


def test_an_outranked_claim_is_not_counted_as_a_malformed_message(zen, functions, publisher, clock):
    """Refusing an older job's claim for a job of higher priority is the scheduler's ordinary work: the operators'
    metric of rejected messages must not call it a message that cannot be read."""
    from zen import telemetry

    functions.submit(job_request("low"))
    functions.submit(job_request("high", priority=5))
    functions.heartbeat(heartbeat("low", "CLAIMED", 1, vm="vm-a", gives_way=True))
    release = next(m for m in publisher.on("zen-vm-control") if m.attributes.get("refused") == "outranked")
    reason = json.loads(release.data)["reason"]
    assert telemetry.reason_class(reason) != "malformed", reason


def test_a_vm_claiming_the_job_of_higher_priority_while_its_older_claim_is_decided_is_answered(
        zen, functions, publisher, clock):
    """A VM's claims can be decided at once (its agent gave an unanswered claim up and claimed the next start while
    Zen worked through a backlog): each is answered on its first delivery, none fails for a deadlock."""
    import threading
    import time

    functions.submit(job_request("low"))
    clock.advance(1)
    functions.submit(job_request("high", priority=5))
    failures: list[BaseException] = []
    threads: list[threading.Thread] = []

    def claim_high() -> None:
        try:
            functions.heartbeat(heartbeat("high", "CLAIMED", 3, vm="vm-a", gives_way=True))
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    def meanwhile(*_args, **_kwargs) -> None:  # the claim of "low" holds its row and vm-a's lock by now
        if not threads:
            threads.append(threading.Thread(target=claim_high, daemon=True))
            threads[0].start()
            time.sleep(1.0)  # the claim of "high" holds its row, and waits for vm-a's lock

    zen.store.hooks.after("queued_jobs_outranking", meanwhile)
    try:
        functions.heartbeat(heartbeat("low", "CLAIMED", 2, vm="vm-a", gives_way=True))
    except BaseException as exc:  # noqa: BLE001 - reported below
        failures.append(exc)
    for thread in threads:
        thread.join(30)
    zen.store.hooks.clear()
    assert failures == [], [str(f)[:300] for f in failures]


def test_a_shared_vm_gives_way_only_where_the_higher_job_would_not_fit_beside_the_claimed_one(
        config, db, publisher, clock, db_url, monkeypatch):
    """On a cluster of several jobs per VM (8 GPUs, up to four jobs here): a claim gives way to a job of higher
    priority that fits on the VM now but would not beside it; where both fit, the claim stands."""
    from tests.test_jobs_per_vm import SHARED, by_type, sharing
    from zen.app import Zen
    from zen_dev.local.invoke import FunctionsInvoker

    monkeypatch.setenv("ZEN_DATABASE_URL", db_url)
    zen = Zen(sharing(config, max_jobs=4), db, publisher, clock)
    functions = FunctionsInvoker(zen)
    functions.submit(by_type("four", 4))
    functions.submit(job_request("whole", cluster=SHARED, priority=5))  # named the cluster: the whole VM
    functions.heartbeat(heartbeat("four", "CLAIMED", 1, vm="vm-a", gives_way=True))  # 8 fit on vm-a, not beside 4
    assert controls(publisher) == [("vm-a", "four", "RELEASE", "outranked")]
    assert offers(publisher) == [("vm-a", "whole", "1")]

    functions.submit(by_type("two", 2))
    functions.submit(by_type("four-high", 4, priority=5))
    functions.heartbeat(heartbeat("two", "CLAIMED", 1, vm="vm-b", gives_way=True))  # 4 fit beside 2 on vm-b
    assert controls(publisher)[-1] == ("vm-b", "two", "CONFIRM", None)
    functions.heartbeat(heartbeat("four", "CLAIMED", 2, vm="vm-b", gives_way=True))  # not beside 2 and 4
    assert controls(publisher)[-1] == ("vm-b", "four", "RELEASE", "outranked")
    assert offers(publisher) == [("vm-a", "whole", "1"), ("vm-b", "four-high", "1")]
