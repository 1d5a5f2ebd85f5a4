"""Zen makes each GPU VM's control subscription (``zen-vm-control-<vm>``, filtered on the VM's name), and
lets only the agent service account that VM runs as (its cluster's, for its region's tags) read it: the
Pub/Sub adapter behind the scale tick, for every instance its MIGs list, within a time budget per tick; and deletes
it once a scaling pass saw the VM leave its MIG (``zen-vm-control`` holds 10,000 subscriptions at most).

Why, and what it grants: docs/explanations/security.md, "A VM reads its own cluster's messages only".
"""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from typing import Callable, Collection, Iterable, Mapping, Union

from google.api_core import exceptions as gexc
import google.cloud.pubsub_v1 as pubsub_v1
from google.pubsub_v1 import types as T

from zen.core.provisioning import PENDING_SEP, region_of
from zen.core.config import ZenConfig

log = logging.getLogger("zen.adapters.control_subscriptions")
SUBSCRIBER_ROLE = "roles/pubsub.subscriber"
CONTROL_TTL = timedelta(days=1)  # as zen.agent.transport's (the agent package is not imported here)
CONTROL_RETENTION = timedelta(hours=1)
CONTROL_ACK_DEADLINE_S = 30
# A VM's subscription is deleted once its MIG no longer lists the VM (ControlSubscriptions._delete_gone), by the
# function instance that made it, or by the next instance's first tick (the VMs gone in the last CONTROL_TTL).
# A subscription made is looked at again this long after (once a tick's budget allows): one gone meanwhile (its
# TTL passed unread: an instance whose agent could not run for a day, kept under its name) is made again. Never
# looked at again, its VM got no order from then on, a STOP included, for the life of the function instance.
RECHECK_S = 1800.0

# Cluster -> the agent service account email of each of its regions (a cluster's regions with different tags
# run as different accounts), or one email for all its regions: what terraform set before accounts were per
# tag set, which a function deployed then still carries until the apply that makes them.
AgentAccounts = Mapping[str, Union[str, Mapping[str, str]]]
ACCOUNTS_FORMAT = ('ZEN_AGENT_ACCOUNTS must be a JSON object of cluster name -> {region: service account email}'
                   ' (or -> one service account email for all its regions)')


def accounts_from_env(environ: Mapping[str, str]) -> AgentAccounts | None:
    """``ZEN_AGENT_ACCOUNTS`` (:data:`AgentAccounts`), or None when unset. A malformed value raises ValueError:
    the tick then fails at its cold start, where it is seen, rather than grant nothing VM after VM."""
    raw = environ.get("ZEN_AGENT_ACCOUNTS", "").strip()
    if not raw:
        return None
    try:
        accounts = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{ACCOUNTS_FORMAT}; not JSON: {exc}") from exc

    def email(value) -> bool:
        return isinstance(value, str) and bool(value)

    if not isinstance(accounts, dict) or not all(
            email(v) or (isinstance(v, dict) and v and all(email(e) for e in v.values())) for v in accounts.values()):
        raise ValueError(f"{ACCOUNTS_FORMAT}; got {raw[:200]}")
    return accounts


class ControlSubscriptions:
    def __init__(self, config: ZenConfig, project: str, accounts: AgentAccounts,
                 subscriber: pubsub_v1.SubscriberClient | None = None, budget_s: float = 20.0,
                 clock: Callable[[], float] = time.monotonic):
        self._config = config
        self._project = project
        self._accounts = dict(accounts)
        self._subscriber = subscriber or pubsub_v1.SubscriberClient()
        self._topic = f"projects/{project}/topics/{config.topics.vm_control}"
        self._budget_s = budget_s
        self._clock = clock
        self._made: dict[tuple[str, str, str], float] = {}  # (vm, cluster, pool) done by this function instance: when
        self._gone_read = False  # the VMs gone in the last day read, once (``ensure``'s ``gone``)

    def ensure(self, instances: Iterable[tuple[str, str, str]],
               gone: Callable[[], Iterable[tuple[str, str, str]]] | None = None,
               left: Callable[[list[str]], Collection[str]] | None = None) -> int:
        """Make and grant the control subscription of each (vm, cluster, pool) not done yet, or done ``RECHECK_S``
        ago (made again if gone); how many were made, or looked at again, now. First, within half the budget,
        deletes those whose VM left its MIG (``_delete_gone``): those this function instance made, and, read at its
        first tick, those of the VMs ``gone`` gives (seen in a MIG in the last ``CONTROL_TTL``, listed no more: an
        instance of the tick before this one made theirs, and they stayed attached to the topic a day). ``left``: of
        the names it is given, those a pass saw leave their MIG; only theirs are deleted (None: all not listed)."""
        instances = list(instances)
        if not self._gone_read and gone is not None:
            try:
                for key in gone():
                    self._made.setdefault(key, self._clock())
                self._gone_read = True
            except Exception as exc:  # noqa: BLE001 - logged; read again at the next tick, the new VMs' made now
                log.warning("VMs gone in the last day unread", extra={"error": f"{type(exc).__name__}: {exc}"})
        deadline = self._clock() + self._budget_s
        self._delete_gone({vm for vm, _, _ in instances}, self._clock() + self._budget_s / 2, left)
        done = 0
        for vm, cluster, region in instances:
            made = self._made.get((vm, cluster, region))
            if made is not None and self._clock() - made < RECHECK_S or PENDING_SEP in vm:  # a flex VM not granted yet
                continue
            if self._clock() >= deadline:
                log.warning("control subscriptions left for the next tick", extra={"budget_s": self._budget_s})
                break
            try:
                if self._ensure_one(vm, cluster, region):
                    self._made[(vm, cluster, region)] = self._clock()
                    done += 1
            except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
                log.warning("control subscription not made yet", extra={
                    "vm": vm, "cluster": cluster, "error": f"{type(exc).__name__}: {exc}"})
        return done

    def _delete_gone(self, listed: set[str], deadline: float,
                     left: Callable[[list[str]], Collection[str]] | None = None) -> None:
        """Delete the control subscription of each VM made here (or given by ``ensure``'s ``gone``) that the MIGs no
        longer list (deleted: a MIG never lists a name again once it is gone). Left to expire a day unread, they stayed
        attached to zen-vm-control: VMs made and deleted by the thousand a day filled the topic's 10,000 subscriptions
        (Pub/Sub's limit), and every new VM got none (refused), its agent never started, and its VM was replaced, over
        and over. A pool the configuration dropped is not listed any more, but its VMs run on until terraform destroys
        its MIG: theirs are kept (to expire). So are those of VMs no pass saw leave (not in ``left``): a pool forgotten
        as dropped by a function instance whose configuration lacks it (one still running as a deploy adds it, or one
        deployed before a deploy that put it back) while its VMs run on, listed again by the next pass; deleted,
        the orders sent to them meanwhile were lost (a CONFIRM: the claim timed out; a STOP: the job ran on)."""
        pools = {cluster.name: cluster.pools() for cluster in self._config.clusters}
        candidates = [key for key in self._made if key[0] not in listed and key[2] in pools.get(key[1], ())]
        if candidates and left is not None:
            try:
                seen_leaving = left([key[0] for key in candidates])
            except Exception as exc:  # noqa: BLE001 - logged; none deleted now, the next tick reads again
                log.warning("control subscriptions of VMs gone not deleted: which left unread", extra={
                    "error": f"{type(exc).__name__}: {exc}"})
                return  # (raised, it failed the tick's step: no new VM got its subscription either)
            candidates = [key for key in candidates if key[0] in seen_leaving]
        for key in candidates:
            if self._clock() >= deadline:
                break
            path = f"projects/{self._project}/subscriptions/{self._config.vm_control_subscription(key[0])}"
            try:
                self._subscriber.delete_subscription(subscription=path)
                log.info("control subscription of a VM gone deleted", extra={"vm": key[0], "cluster": key[1]})
            except gexc.NotFound:
                pass
            except (gexc.GoogleAPICallError, gexc.RetryError) as exc:  # tried again next tick
                log.warning("control subscription of a VM gone not deleted yet", extra={
                    "vm": key[0], "cluster": key[1], "error": f"{type(exc).__name__}: {exc}"})
                continue
            del self._made[key]

    def account_of(self, cluster: str, region: str) -> str | None:
        """The email of the agent service account the VMs of ``cluster`` in ``region`` run as, if known. ``region``
        may be a pool's key (``zen.core.provisioning.pool_key``: a secondary model's pool, ``<region>/<model>``),
        as the scaling passes record instances: its region's account (it found none, and a spot or flex-start VM
        of a cluster whose first model is standard never got its control subscription)."""
        accounts = self._accounts.get(cluster)
        return accounts if isinstance(accounts, str) or accounts is None else accounts.get(region_of(region))

    def _ensure_one(self, vm: str, cluster: str, region: str) -> bool:
        account = self.account_of(cluster, region)
        if account is None:
            log.error("no agent service account for this cluster and region in ZEN_AGENT_ACCOUNTS",
                      extra={"cluster": cluster, "region": region})
            return False
        path = f"projects/{self._project}/subscriptions/{self._config.vm_control_subscription(vm)}"
        wanted = self._config.vm_control_filter(vm)
        try:
            current = self._subscriber.get_subscription(subscription=path)
        except gexc.NotFound:
            current = None
        if current is None:
            try:
                self._subscriber.create_subscription(request=T.Subscription(
                    name=path, topic=self._topic, filter=wanted, ack_deadline_seconds=CONTROL_ACK_DEADLINE_S,
                    message_retention_duration=CONTROL_RETENTION,
                    expiration_policy=T.ExpirationPolicy(ttl=CONTROL_TTL)))
                log.info("control subscription made", extra={"vm": vm, "cluster": cluster})
            except gexc.AlreadyExists:
                current = self._subscriber.get_subscription(subscription=path)
        if current is not None and (current.topic != self._topic or current.filter != wanted):
            log.error("control subscription has the wrong topic or filter; not granted", extra={
                "vm": vm, "cluster": cluster, "topic": current.topic, "filter": current.filter})
            return False
        self._grant(path, f"serviceAccount:{account}")
        return True

    def _grant(self, path: str, member: str) -> None:
        policy = self._subscriber.get_iam_policy(request={"resource": path})
        for binding in policy.bindings:
            if binding.role == SUBSCRIBER_ROLE:
                if member in binding.members:
                    return
                binding.members.append(member)
                break
        else:
            policy.bindings.add(role=SUBSCRIBER_ROLE, members=[member])
        self._subscriber.set_iam_policy(request={"resource": path, "policy": policy})
