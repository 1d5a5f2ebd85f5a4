"""What the queues of a cohort lend and borrow (``zen queues``' ``borrowed_gpus``; ``zen.jobs.queueing``), and what an
admission's reason says a queue holds and borrows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from zen.core.config import QueueConfig, ZenConfig


def borrowed(held: Mapping[str, int], nominal: Mapping[str, int]) -> dict[str, int]:
    """GPUs each queue of a cohort borrows: what the members hold above their quotas, less what the cohort holds
    beyond their sum (a quota lowered under what its jobs hold lends nothing), shared out in proportion to what each
    holds above its own (which queue's quota was lowered is not recorded), so their sum is what the others lend."""
    above = {name: max(0, held.get(name, 0) - quota) for name, quota in nominal.items()}
    total = max(0, sum(above.values()) - max(0, sum(held.values()) - sum(nominal.values())))
    share = {name: total * a / sum(above.values()) for name, a in above.items() if a}
    out = {name: int(part) for name, part in share.items()}  # largest remainders take what rounding left
    for name in sorted(share, key=lambda n: share[n] - out[n], reverse=True)[:total - sum(out.values())]:
        out[name] += 1
    return {name: out.get(name, 0) for name in nominal}


def bound(config: ZenConfig, queue: QueueConfig, cluster: str) -> str:
    """What caps ``queue`` on ``cluster`` under a waiting job accepted before (``zen explain``): its quota, its quota
    plus its borrowing_limit, or its cohort's quotas (a member removed or moved to another cohort, or its quota
    lowered). The job was told "its quota was lowered" where the queue's quota had not changed."""
    if queue.cohort is None:
        return "its quota was lowered"
    total = sum(q.quota.get(cluster, 0) for q in config.cohort_of(queue))
    if queue.limit(cluster) <= total:
        return f"its quota {queue.quota[cluster]} plus borrowing_limit {queue.may_borrow(cluster)}"
    return f"cohort {queue.cohort}'s quotas add up to {total}"


def admission_reason(queue: str, nominal: int, held: int, cluster: str) -> str:
    """The reason an admission records: what ``queue`` holds with the job of its nominal quota, and what it borrows."""
    borrowed = max(0, held - nominal)
    return (f"admitted by queue {queue}: {held}/{nominal} GPUs of {cluster}"
            + (f" ({borrowed} borrowed)" if borrowed else ""))
