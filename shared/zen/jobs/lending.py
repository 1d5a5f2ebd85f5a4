"""What the queues of a cohort lend and borrow (``zen queues``' ``borrowed_gpus``; ``zen.jobs.queueing``)."""

from __future__ import annotations

from typing import Mapping


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
